"""Where encoded datasets are cached: one dataset folder per key, built once under a lock.

The key covers every option that decides the encoded arrays and the source's content,
so a changed flag or a changed input file is a new entry. Dataset folders appear whole
(see :mod:`~dlrm_multiepoch.data.store`); the lock makes concurrent ranks build once
and share the result.
"""

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from dlrm_multiepoch.data.workers import map_in_workers
from dlrm_multiepoch.file_digests import cached_file_digest

# Bump when a source changes the arrays it produces, so stale caches are not reused.
# The validation designs (--val_gap, --val_unseen_share) enter the key as options, only when set.
CACHE_VERSION = 5  # 4: per-table min_count, --id_maps, slice column, encoding report; 5: one timestamp format per file


def file_digests(paths: Sequence[Path], cache_dir: Optional[str], workers: int = 1) -> List[str]:
    """sha256 of each file's content (the cache key must change when the data does), ``workers`` files at a
    time (spawned processes), each remembered under ``cache_dir`` by its stat
    (:func:`~dlrm_multiepoch.file_digests.cached_file_digest`: a file is read whole once per version).

    Example::

        digests = file_digests([Path("day_0"), Path("day_1")], "~/.cache/dlrm_multiepoch", workers=2)
    """
    return map_in_workers(cached_file_digest, paths, [cache_dir] * len(paths), workers=workers, what="input digest")


def cache_key(options: Dict[str, Any]) -> str:
    """Short stable hash of everything that affects the arrays."""
    payload = json.dumps({"version": CACHE_VERSION, **options}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def temporary_folder(folder: Path) -> Path:
    """Where this process builds ``folder`` before renaming it into place."""
    return folder.with_name(f".{folder.name}.tmp-{os.getpid()}")


def remove_leftovers(folder: Path, log: Callable[[str], None]) -> None:
    """Delete the temporary folders that builds of ``folder`` killed midway left behind
    (a preprocessing job's scratch can be as large as its input); call under :func:`build_lock`."""
    for stale in sorted(folder.parent.glob(f".{folder.name}.tmp-*")):
        log(f"removing {stale}, left by an interrupted build")
        shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def build_lock(folder: Path) -> Iterator[None]:
    """Exclusive lock for building ``folder`` (a no-op where ``fcntl`` is absent).

    Example::

        with build_lock(entry):
            if not is_dataset_folder(entry):
                build(entry)
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    path = folder.parent / f"{folder.name}.lock"
    while True:
        f = open(path, "a")
        fcntl.flock(f, fcntl.LOCK_EX)
        # The holder before us removes the file as it lets go: a lock on that removed file locks nothing.
        if path.exists() and os.path.samestat(os.fstat(f.fileno()), path.stat()):
            break
        f.close()
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # nothing left beside the folder, whether it was built or refused
        f.close()
