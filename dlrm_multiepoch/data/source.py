"""What a data source is: :class:`Source`, the callables that turn a ``--dataset``'s files into a dataset
folder. A source module defines one (a built-in module as ``SOURCE``, which
:mod:`~dlrm_multiepoch.data.registry` loads on the first lookup; yours passes it to ``register_source``).
Nothing of the package above this module is imported here, so a built-in source imports neither the
registry that loads it nor the config that leads there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Union

if TYPE_CHECKING:
    from dlrm_multiepoch.data.dataset import InteractionData

Log = Callable[[str], None]
# A source's ``cfg``: the run's DataConfig (its flags, parsed fields and the methods id_fit_splits() and
# min_counts()), named here, not imported: data/config.py leads, through the registry, to the built-in sources.
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
