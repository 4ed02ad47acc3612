"""The entry points the trainer and ``dlrm-multiepoch preprocess`` call.

:func:`prepare_dataset` encodes a source into a dataset folder (once: later calls find
it); :func:`load_dataset` prepares if needed and opens the folder, every split read
from disk on demand. ``--data_path`` may also name a folder that ``preprocess`` wrote,
or data a source reads in place (TorchRec's Criteo npy days).
"""

import shutil
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from dlrm_multiepoch.config_section import flag_fields, validated
from dlrm_multiepoch.data.cache import build_lock, cache_key, remove_leftovers
from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.data.fetch import default_cache_dir
from dlrm_multiepoch.data.identity import data_identity, prepared_identity, source_identity
from dlrm_multiepoch.data.registry import get_source
from dlrm_multiepoch.data.store import is_dataset_folder, open_dataset

Log = Callable[[str], None]


def cached_folder(cfg: DataConfig, log: Log = print) -> Tuple[Union[Path, List[Path]], Path, Dict[str, Any]]:
    """``(input, folder, identity)``: the source's input (fetched if needed), the cache folder its encoding
    lives in, and the data's identity (:mod:`~dlrm_multiepoch.data.identity`: its ``options``, the
    input's digest included, decide the folder)."""
    source = get_source(cfg.dataset)
    cache_dir = cfg.cache_dir or default_cache_dir()
    located = source.locate(cfg, cache_dir, log)
    paths = located if isinstance(located, list) else [located]
    identity = source_identity(paths, cfg.cache_options(), cache_dir, cfg.preprocess_workers)
    return located, Path(cache_dir) / "datasets" / f"{cfg.dataset}-{cache_key(identity['options'])}", identity


def prepare_dataset(cfg: DataConfig, output: Optional[str] = None, log: Log = print) -> Path:
    """Encode ``cfg``'s source into a dataset folder unless it exists; return the folder.

    Args:
        cfg: the data config.
        output: where to write (unset: the cache folder that training finds by itself).
        log: where log lines go.

    Example::

        folder = prepare_dataset(DataConfig(dataset="criteo", data_path="day_0.tsv"), "prepped/day_0")
    """
    if output:
        check_output(Path(output))
    path, folder, identity = cached_folder(cfg, log)
    options = identity["options"]
    folder = Path(output) if output else folder
    with build_lock(folder):
        if is_dataset_folder(folder):
            try:
                _, meta = open_dataset(folder)
            except (OSError, ValueError, KeyError, TypeError) as e:
                # A damaged folder (disk full, deleted file) is rebuilt rather than trusted.
                log(f"ignoring unreadable cache entry {folder}: {e}")
                shutil.rmtree(folder)
            else:
                # A cache folder's key covers its options; a chosen --output must match them.
                if output and meta.get("options") != options:
                    changed = sorted(k for k in options if meta.get("options", {}).get(k) != options[k])
                    raise ValueError(
                        f"--output {folder} holds {meta['name']!r} preprocessed with other options or input "
                        f"(differing: {', '.join(changed)}); pick another --output or delete the folder"
                    )
                return folder
        remove_leftovers(folder, log)
        start = time.perf_counter()
        log(f"building {cfg.dataset} from {', '.join(map(str, path)) if isinstance(path, list) else path}")
        sources = [str(p) for p in path] if isinstance(path, list) else [str(path)]
        meta = {"options": options, "source": sources[0] if len(sources) == 1 else sources}
        get_source(cfg.dataset).prepare(cfg, path, folder, log, meta)
        log(f"built {cfg.dataset} in {time.perf_counter() - start:.1f}s, cached as {folder}")
    return folder


def check_output(output: Path) -> None:
    """Refuse ``--output`` that names a file, or a folder holding anything but a dataset
    (checked before any work: the finished folder could not replace it)."""
    if output.exists() and not output.is_dir():
        raise ValueError(f"--output {output} is a file; pass a folder to create")
    if output.is_dir() and not is_dataset_folder(output) and any(output.iterdir()):
        names = sorted(p.name for p in output.iterdir())
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise ValueError(f"--output {output} is a folder that holds other files ({shown}) and no dataset; pass a new or "
                         "empty folder")


def load_dataset(cfg: DataConfig, log: Log = print) -> InteractionData:
    """Load ``cfg.dataset``, encoding and caching it on first use; a second call with the
    same options opens the cache. Logs what was built (sizes, skipped lines, positives
    per task).

    Args:
        cfg: the data config (validated here unless it was).
        log: where log lines go (e.g. a rank-0-only logger).

    Example::

        data = load_dataset(DataConfig(dataset="bookcrossing", history_length=10))
        print(data.tables, len(data.splits["train"]))
    """
    validated(cfg)
    cfg.check_paths()
    start = time.perf_counter()
    source = get_source(cfg.dataset)
    given = Path(cfg.data_path) if cfg.data_path else None
    data: Optional[InteractionData] = None
    if given is not None and is_dataset_folder(given):
        data, meta = open_dataset(given)
        _check_prepared(cfg, given, meta, log)
        data.identity = prepared_identity(given, meta)
        log(f"loaded {cfg.dataset} from {given} in {time.perf_counter() - start:.1f}s")
    elif given is not None and source.open_in_place is not None and given.exists():
        data = source.open_in_place(cfg, given)
        if data is not None:
            log(f"reading {cfg.dataset} in place from {given}")
            data.identity = data_identity(cfg, log)
    if data is None:
        folder = prepare_dataset(cfg, log=log)
        data, meta = open_dataset(folder)
        given_name = f" (source {given})" if given is not None else ""
        log(f"loaded {cfg.dataset} from cache {folder} in {time.perf_counter() - start:.1f}s{given_name}")
        for note in meta["notes"]:
            log(note)
        data.identity = data_identity(cfg, log)  # read by stat: the cache's key just read the files
    data.validate()
    log(data.summary())
    return data


def _check_prepared(cfg: DataConfig, folder: Path, meta: Dict[str, Any], log: Log) -> None:
    """A prepared folder decides its own encoding: refuse a different dataset, log other flags it overrides."""
    if meta["name"] != cfg.dataset:
        raise ValueError(
            f"--data_path {folder} holds a preprocessed {meta['name']!r} dataset; pass --dataset {meta['name']}"
        )
    built = meta.get("options", {})
    options = cfg.cache_options()
    for name, value in options.items():
        if name in built and built[name] != value:
            log(f"--{name} {value!r} is ignored: {folder} was preprocessed with --{name} {built[name]!r}")
    for name in set(built) & {f.name for f in flag_fields(cfg)} - set(options):  # set there, default here
        log(f"{folder} was preprocessed with --{name} {built[name]!r}: its splits are used as they are")
