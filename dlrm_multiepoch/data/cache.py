"""On-disk cache of encoded datasets: one ``.npz`` of arrays plus a small JSON layout.

Files are written to a temp name and renamed, the JSON last: a reader that finds the
JSON finds a complete ``.npz``, and an interrupted build leaves only temp files behind.
A file lock makes concurrent ranks build once and share the result.
"""

import contextlib
import hashlib
import json
import os
import tempfile
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from dlrm_multiepoch.data.dataset import InteractionData, Split, TableSpec

# Bump when a loader changes the arrays it produces, so stale caches are not reused.
CACHE_VERSION = 3


def file_digest(path: Path) -> str:
    """sha256 of a file's content (the cache key must change when the data does)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def cache_key(options: Dict[str, Any]) -> str:
    """Short stable hash of everything that affects the arrays."""
    payload = json.dumps({"version": CACHE_VERSION, **options}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


class ArrayCache:
    """Cached :class:`InteractionData` under ``folder``, one entry per key.

    Args:
        folder: where ``<stem>.npz`` and ``<stem>.json`` live.
        stem: file stem, e.g. ``"bookcrossing-<key>"``.

    Example::

        cache = ArrayCache(Path(cache_dir) / "arrays", f"movielens-{key}")
        with cache.lock():
            hit = cache.load()
            if hit is None:
                cache.save(data, notes)
    """

    def __init__(self, folder: Path, stem: str) -> None:
        self.folder = Path(folder)
        self.stem = stem
        self.npz_path = self.folder / f"{stem}.npz"
        self.json_path = self.folder / f"{stem}.json"

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive lock for building this entry (a no-op where ``fcntl`` is absent)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            import fcntl
        except ImportError:  # pragma: no cover - non-POSIX
            yield
            return
        with open(self.folder / f"{self.stem}.lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def load(self, log: Callable[[str], None] = print) -> Optional[Tuple[InteractionData, List[str]]]:
        """The cached data and notes, or ``None`` if absent or unreadable."""
        if not self.json_path.is_file():
            return None
        try:
            meta = json.loads(self.json_path.read_text())
            with np.load(self.npz_path, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
            data = InteractionData(
                name=meta["name"],
                tables=[TableSpec(**t) for t in meta["tables"]],
                dense_names=meta["dense_names"],
                tasks=meta["tasks"],
                encoding=meta.get("encoding", {}),
            )
            for name, layout in meta["splits"].items():
                data.splits[name] = Split(
                    sparse={f: arrays[f"{name}/sparse/{f}"] for f in layout["sparse"]},
                    dense=arrays[f"{name}/dense"],
                    labels={t: arrays[f"{name}/labels/{t}"] for t in layout["labels"]},
                    history=arrays[f"{name}/history"] if layout["history"] else None,
                    slices={s: arrays[f"{name}/slices/{s}"] for s in layout.get("slices", [])},
                )
            return data, list(meta["notes"])
        except (OSError, EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as e:
            # A damaged entry (e.g. disk full) is rebuilt rather than trusted.
            log(f"ignoring unreadable cache entry {self.json_path}: {e}")
            return None

    def save(self, data: InteractionData, notes: List[str]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        arrays: Dict[str, np.ndarray] = {}
        layout: Dict[str, Any] = {}
        for name, split in data.splits.items():
            for f, v in split.sparse.items():
                arrays[f"{name}/sparse/{f}"] = v
            arrays[f"{name}/dense"] = split.dense
            for t, v in split.labels.items():
                arrays[f"{name}/labels/{t}"] = v
            if split.history is not None:
                arrays[f"{name}/history"] = split.history
            for s, v in split.slices.items():
                arrays[f"{name}/slices/{s}"] = v
            layout[name] = {
                "sparse": list(split.sparse),
                "labels": list(split.labels),
                "history": split.history is not None,
                "slices": list(split.slices),
            }
        meta = {
            "name": data.name,
            "tables": [asdict(t) for t in data.tables],
            "dense_names": data.dense_names,
            "tasks": data.tasks,
            "splits": layout,
            "encoding": data.encoding,
            "notes": notes,
        }
        self._atomic_write(self.npz_path, lambda f: np.savez(f, **arrays))
        self._atomic_write(self.json_path, lambda f: f.write(json.dumps(meta, indent=1).encode()))

    def _atomic_write(self, path: Path, write: Any) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
