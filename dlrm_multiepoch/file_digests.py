"""sha256 of files, remembered by their stat as git's index remembers its blobs: read whole once, stat-ed after.

**Why every byte.** A nightly export rewritten in place keeps its path, its ids, often its
size, and changes labels a few rows apart; a size or a sample of blocks would miss it.
**Why a cache.** A 1 TB Criteo folder read whole at each launch, sweep and search rerun
would cost more than an epoch; remembered, it is read once per version of the data (as
preprocessing and every epoch read it), then each check costs one ``stat`` per file.

An entry (``<cache_dir>/digests/<hash of the real path>.json``) holds the digest with
the file's size, ``mtime_ns``, ``ctime_ns``, inode and device; any difference means a
full read again. A rewrite changes mtime and ctime (no user can set ctime back: ``touch -d``
and ``cp -p`` leave it new), a replacement changes the inode. A file changed again within
its filesystem's timestamp granularity after it was read could keep its stat ("racy" in
git's words), so an entry is stored only for a file whose times are older than the read by
more than that granularity: 2 s where the times are whole seconds (a coarse filesystem),
0.1 s otherwise. What the cache cannot see is a byte changed behind an unchanged stat
(bit rot): a resume still reads every checkpoint file whole (``verify_checkpoint``).
Torch-free; a cache folder that cannot be written only costs the reads.

Example::

    digest = cached_file_digest("day_0.tsv", "~/.cache/dlrm_multiepoch")   # read once, then a stat
"""

import hashlib
import json
import os
import time
from typing import Dict, Optional, Tuple, Union

PathLike = Union[str, "os.PathLike[str]"]
DIGESTS_DIR = "digests"
_COARSE_S, _FINE_S = 2.0, 0.1  # timestamp granularity to wait out: whole-second times, finer ones
# This process's digests by (real path, stat), as remembered on disk (a read-only cache folder: here only).
_SEEN: Dict[Tuple[str, Tuple[int, ...]], str] = {}


def file_digest(path: PathLike) -> str:
    """sha256 of a file's content, read whole."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _stat_key(st: os.stat_result) -> Tuple[int, ...]:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def _entry_path(cache_dir: str, real: str) -> str:
    name = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return os.path.join(cache_dir, DIGESTS_DIR, f"{name}.json")


def _settled(st: os.stat_result, read_at_ns: int) -> bool:
    """Whether the file's times are older than the read by more than their filesystem's granularity."""
    times = (st.st_mtime_ns, st.st_ctime_ns)
    margin = _COARSE_S if any(t % 1_000_000_000 == 0 for t in times) else _FINE_S
    return all(read_at_ns - t > margin * 1e9 for t in times)


def cached_file_digest(path: PathLike, cache_dir: Optional[str]) -> str:
    """sha256 of ``path``'s content: remembered under ``cache_dir`` by the file's stat (see the module docstring).

    Args:
        path: the file.
        cache_dir: the cache folder (None: no cache, a full read).

    Raises:
        OSError: the file cannot be read.
    """
    real = os.path.realpath(path)
    before = os.stat(real)
    key = _stat_key(before)
    if (real, key) in _SEEN:
        return _SEEN[(real, key)]
    entry = _entry_path(os.path.expanduser(cache_dir), real) if cache_dir else None
    if entry is not None:
        try:
            with open(entry) as f:
                saved = json.load(f)
            if saved.get("path") == real and tuple(saved.get("stat", ())) == key and isinstance(saved.get("sha256"), str):
                _SEEN[(real, key)] = saved["sha256"]
                return saved["sha256"]
        except (OSError, ValueError, AttributeError):
            pass  # no entry, or a damaged one: read the file
    read_at = time.time_ns()
    digest = file_digest(real)
    if _stat_key(os.stat(real)) != key or not _settled(before, read_at):
        return digest  # changed while read, or racy: the next look reads it again
    _SEEN[(real, key)] = digest
    if entry is not None:
        try:
            os.makedirs(os.path.dirname(entry), exist_ok=True)
            tmp = f"{entry}.{os.getpid()}.tmp"  # ranks that read the same file write their entries side by side
            with open(tmp, "w") as f:
                json.dump({"path": real, "stat": list(key), "sha256": digest}, f)
            os.replace(tmp, entry)
        except OSError:
            pass  # a read-only or full cache folder: the next look reads the file again
    return digest
