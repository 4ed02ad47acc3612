"""The environment's faults, made for tests: a read-only folder, a full disk (a small tmpfs), a disk that fills
at a chosen write (an injected ENOSPC), a name that is not UTF-8.

The read-only folder and the small disk are the kernel's own (``EROFS``/``EACCES``, ``ENOSPC``); the
injected full disk (:class:`FullDiskAt`) fails ``write()`` with ``ENOSPC`` and no path, as a full disk
does, from a chosen file opened for writing on, and counts those files, so a test can fill the disk at
any write of a command.

Example::

    with read_only(exp):
        code = compare_main([str(exp), "--out", str(out)])
    with FullDiskAt(exp, at=7) as disk:
        code, out, _ = run_search([str(exp), *ARGS])
"""

import builtins
import contextlib
import errno
import os
import subprocess
from pathlib import Path
from typing import Any, Iterator, List

import pytest

# A folder name that is not UTF-8 (byte 0xff), as os.listdir returns it.
NOT_UTF8 = os.fsdecode(b"run\xff-s0")


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """``folder`` and everything under it read-only for this process: write permission removed for a user; for
    root, whom permissions do not stop, a read-only bind mount. Skips the test where neither is possible."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")]}
        for path, mode in modes.items():
            os.chmod(path, mode & ~0o222)
        try:
            yield
        finally:
            for path, mode in modes.items():
                os.chmod(path, mode)
        return
    _mount(["--bind", str(folder), str(folder)])
    try:
        _mount(["-o", "remount,ro,bind", str(folder), str(folder)])
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@contextlib.contextmanager
def small_disk(folder: Path, size: str = "1m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``folder`` (a real disk that fills: root only, skips otherwise)."""
    folder.mkdir(parents=True, exist_ok=True)
    _mount(["-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)])
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def _mount(args: List[str]) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here: {done.stderr.strip()}")


def fill(folder: Path) -> Path:
    """Fill the disk of ``folder`` to the last byte; returns the filler file (delete it to free the disk)."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0")
    return filler


class _FullFile:
    """A file opened for writing on a full disk: opened, but every write fails."""

    def __init__(self, file: Any) -> None:
        self._file = file

    def write(self, _data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def writelines(self, _lines: Any) -> None:
        self.write(b"")

    def __enter__(self) -> "_FullFile":
        return self

    def __exit__(self, *_: object) -> None:
        self._file.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


class FullDiskAt:
    """The disk of ``under`` fills at the ``at``-th file opened for writing there (from 1): that file and every
    later one open, but their ``write()`` fails with ``ENOSPC`` (the disk stays full). ``at=0``: never; then
    ``opened`` counts the files a command opens for writing (the writes a test may choose from)."""

    def __init__(self, under: Path, at: int = 0) -> None:
        self.under, self.at, self.opened = os.path.abspath(under), at, 0

    def __enter__(self) -> "FullDiskAt":
        real = self._real = builtins.open

        def opening(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            handle = real(file, mode, *args, **kwargs)
            writing = any(c in mode for c in "wax+") and isinstance(file, (str, os.PathLike))
            if not writing or not os.path.abspath(os.fspath(file)).startswith(self.under + os.sep):
                return handle
            self.opened += 1
            return _FullFile(handle) if self.at and self.opened >= self.at else handle

        builtins.open = opening
        return self

    def __exit__(self, *_: object) -> None:
        builtins.open = self._real
