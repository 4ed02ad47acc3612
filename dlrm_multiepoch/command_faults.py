"""The environment's faults at a command's boundary: one line naming the path and what to do, never a traceback.

A command (``sweep``, ``search``, ``compare``, ``preprocess``) first checks the folder it
writes (:func:`check_folder`: a path that is a file or lies under one, a folder it cannot
write, a name that is not UTF-8), before anything launches. Then it runs inside
:func:`guarded`: an ``OSError`` that still comes (a disk that fills, a folder made
read-only meanwhile, a file deleted under it) becomes one line naming the path, the cause
and what to do; a signal (Ctrl-C, SIGTERM, SIGHUP) one line saying it stopped. Every
record is written atomically (``json_io.write_json``), so finished work is on disk and the
line ends with how to continue. Console streams print any path (a name that is not UTF-8
shows its bytes as ``\\xff``). Torch-free.

Example::

    def main(argv):
        return guarded("compare", lambda: _compare(argv), then="then rerun the same command")
"""

import contextlib
import errno
import os
import signal
import sys
from typing import Callable, Iterator

# errno -> (what it means here, what to do about it)
_CAUSES = {
    errno.ENOSPC: ("the disk is full", "free space"),
    errno.EDQUOT: ("the disk quota is used up", "free space"),
    errno.EROFS: ("the file system is read-only", "make it writable or use another folder"),
    errno.EACCES: ("permission denied", "make it writable (and readable) or use another folder"),
    errno.EPERM: ("not permitted", "make it writable or use another folder"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "move that file or use another path"),
    errno.EEXIST: ("a file is in the way", "move it or use another path"),
    errno.EISDIR: ("it is a folder where a file belongs", "move it or use another path"),
    errno.ENOENT: ("it does not exist (moved or deleted meanwhile?)", "put it back or use another path"),
    errno.EIO: ("an input/output error (a failing disk or network file system)", "check the disk"),
    errno.ENAMETOOLONG: ("the name is too long", "use a shorter path"),
}


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C raises ``KeyboardInterrupt``; ``sigval`` names the signal
    (as TorchX's ``SignalException`` does), so whoever stops on Ctrl-C stops on these the same way."""

    def __init__(self, signum: int) -> None:
        self.sigval = signal.Signals(signum)
        super().__init__(self.sigval.name)


def shown(path: object) -> str:
    """A path as text that any console prints: bytes that are not UTF-8 as ``\\xff``."""
    text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def is_utf8(path: str) -> bool:
    """Whether a path's bytes are UTF-8 (TensorBoard's reader and JSON records take no other name)."""
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def fault_line(prog: str, e: OSError, then: str) -> str:
    """``prog: PATH: CAUSE (strerror); REMEDY, THEN`` for an ``OSError`` (the path it names, if any).

    Example::

        fault_line("search", OSError(28, "No space left on device", "runs/s/search.json"), "then rerun")
        # 'search: runs/s/search.json: the disk is full (No space left on device); free space, then rerun'
    """
    cause, remedy = _CAUSES.get(e.errno or 0, ("", "fix it"))
    names = [shown(p) for p in (e.filename, e.filename2) if p is not None]
    where = f"{' -> '.join(names)}: " if names else "a file: "
    reason = f"{cause} ({e.strerror})" if cause and e.strerror else cause or e.strerror or type(e).__name__
    return f"{prog}: {where}{reason}; {remedy}, {then}"


@contextlib.contextmanager
def naming(path: str) -> Iterator[None]:
    """Give an ``OSError`` raised inside the path it happened to (a full disk fails a ``write()`` with none)."""
    try:
        yield
    except OSError as e:
        if e.filename is None:
            e.filename = path
        raise


def check_folder(path: str, what: str) -> None:
    """Refuse, before anything runs, a folder a command is to write: a file at ``path`` or above it, a name that
    is not UTF-8, or a folder (or the nearest one above, where it is to be created) it cannot write.

    Args:
        path: the folder (it may not exist yet).
        what: how the user gave it (``EXPERIMENT_DIR``, ``--out``), for the message.

    Raises:
        ValueError: naming the path and what to do.
    """
    if not is_utf8(path):
        raise ValueError(
            f"{what} {shown(path)} is not UTF-8 text (the records and TensorBoard name their folders in UTF-8): "
            "rename it"
        )
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        above = "" if existing == os.path.abspath(path) else f", and {shown(path)} would be under it"
        raise ValueError(f"{what} {shown(path)}: {shown(existing)} is a file, not a folder{above}; use another path")
    if not os.access(existing, os.W_OK | os.X_OK):
        created = "" if existing == os.path.abspath(path) else f" (where {shown(path)} is to be created)"
        raise ValueError(
            f"{what} {shown(path)}: cannot write into {shown(existing)}{created}: it is read-only or not yours; "
            "make it writable or use another folder"
        )


@contextlib.contextmanager
def signals_stop() -> Iterator[None]:
    """SIGHUP (a closed terminal) and SIGTERM raise :class:`Stopped` where Ctrl-C raises ``KeyboardInterrupt``,
    each only where it would otherwise end the process: a SIGHUP that ``nohup`` ignores stays ignored, and a SIGTERM
    handler already there (TorchX's local scheduler installs its own) stays."""

    def stop(signum: int, _frame: object) -> None:
        raise Stopped(signum)

    before = {
        signum: signal.signal(signum, stop)
        for signum in (signal.SIGHUP, signal.SIGTERM)
        if signal.getsignal(signum) == signal.SIG_DFL
    }
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def signal_of(e: BaseException) -> str:
    """The signal behind an interruption: :class:`Stopped`'s or TorchX's ``SignalException``'s, else SIGINT."""
    return getattr(getattr(e, "sigval", None), "name", None) or "SIGINT"


def guarded(prog: str, body: Callable[[], int], then: str) -> int:
    """Run a command's ``body`` at its boundary: streams that print any path, signals that stop it in one line
    (exit 130), an ``OSError`` as one line (exit 1; see the module docstring); ``body``'s exit code otherwise.

    Args:
        prog: the command's name, the line's prefix.
        body: the command; its own interruptions and errors it reports itself.
        then: how to go on once the cause is fixed ("then rerun the same command to continue").
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    with signals_stop():
        try:
            return body()
        except OSError as e:
            print(fault_line(prog, e, then), file=sys.stderr, flush=True)
            return 1
        except BaseException as e:  # Ctrl-C, Stopped, TorchX's SignalException (its SIGTERM and SIGINT)
            if not isinstance(e, KeyboardInterrupt) and not isinstance(getattr(e, "sigval", None), signal.Signals):
                raise
            print(f"\n{prog}: interrupted ({signal_of(e)}); {then}", file=sys.stderr, flush=True)
            return 130
