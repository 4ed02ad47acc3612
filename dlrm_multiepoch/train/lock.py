"""One owner per run folder: a lock file naming the trainer that writes there.

Rank 0 of a training job takes ``<run_dir>/trainer.lock`` before it writes anything
and holds it until the job ends (removed at the end, also on errors). The file holds
the holder's elastic job id, host, PID (and the PID's start time, so a reused PID is
not mistaken for it) and start time; the holder keeps an exclusive ``flock`` on it
and touches it every :data:`HEARTBEAT_S` seconds.

Who may take a lock that exists:

- the same elastic job (torchrun restarting its ranks: the id is the same);
- anyone, once the holder is dead: on the holder's host, its PID no longer runs (and
  the ``flock`` is free); on another host, its heartbeat (the file's mtime) is older
  than :data:`~dlrm_multiepoch.lock_holder.STALE_AFTER_S`. The taker logs whose lock it took over.

Anyone else is refused with :class:`RunFolderBusy`, naming the holder. A sweep asks
:func:`~dlrm_multiepoch.lock_holder.live_holder` (who holds a folder is read there, torch-free)
before launching a run, and waits for a live one instead.

Example::

    lock = RunLock.acquire("runs/bx/joint-s0", job_id="local_cwd://torchx/bx-joint-s0-x1", log=print)
    try:
        ...  # train
    finally:
        lock.release()
"""

import atexit
import datetime
import fcntl
import json
import os
import socket
import threading
import time
from dataclasses import asdict
from typing import Callable, Dict, Optional

from dlrm_multiepoch.lock_holder import LockHolder, process_start, read_holder
from dlrm_multiepoch.run_files import lock_path

HEARTBEAT_S = 30.0  # how often a holder touches its lock file
RESTART_WAIT_S = 30.0  # a restarted job waits this long for its old rank 0's lock to drop
_HELD: Dict[str, "RunLock"] = {}  # lock file (real path) -> this process's lock on it


class RunFolderBusy(RuntimeError):
    """A live trainer holds the run folder; the message names it and its lock file."""


class RunLock:
    """The lock of one run folder, held by this process (see the module docstring)."""

    def __init__(self, path: str, fd: int, holder: LockHolder):
        self.path = path
        self.holder = holder
        self._fd: Optional[int] = fd
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="run-lock-heartbeat", daemon=True)
        self._beat.start()
        atexit.register(self.release)  # an error ending the process releases it too

    @classmethod
    def acquire(cls, run_dir: str, job_id: Optional[str], log: Callable[[str], None] = print) -> "RunLock":
        """Take ``run_dir``'s lock (creating the folder), taking over a dead holder's with a log line.

        Raises:
            RunFolderBusy: a live trainer of another job holds it (the message names it).
        """
        os.makedirs(run_dir, exist_ok=True)
        path = lock_path(run_dir)
        held = _HELD.get(os.path.realpath(path))
        if held is not None:  # this process trains the folder again (an in-process resume): its lock moves on
            held.release()
        me = LockHolder(job_id, socket.gethostname(), os.getpid(), process_start(os.getpid()), _now())
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                flocked = True
            except BlockingIOError:
                flocked = False
            try:
                same_file = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same_file = False
            if not same_file:  # released and removed between our open and our flock: try again
                os.close(fd)
                continue
            before = read_holder(run_dir)
            if before is not None and before.pid is None and flocked:
                before = None  # an empty file nobody holds: a holder killed while writing it
            age = time.time() - os.fstat(fd).st_mtime
            restart = before is not None and job_id is not None and before.job_id == job_id
            if before is not None and not restart and (not flocked or before.alive(age)):
                os.close(fd)
                raise RunFolderBusy(
                    f"run folder {run_dir} is in use by a live trainer ({before.describe()}; lock file {path}): "
                    "a second trainer would overwrite its checkpoints and results. Wait for it to end, stop it, "
                    "or use another --run_name"
                )
            if not flocked and not _wait_for_flock(fd, RESTART_WAIT_S):
                os.close(fd)
                raise RunFolderBusy(
                    f"run folder {run_dir}: the earlier rank 0 of job {job_id} ({before.describe()}) still holds "
                    f"{path} after {RESTART_WAIT_S:.0f} s; stop it and restart"
                )
            if before is not None:
                why = f"restart of job {job_id}" if restart else "its holder is gone"
                log(f"run folder {run_dir}: taking over the lock of {before.describe()} ({why})")
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(asdict(me)).encode(), 0)
            os.fsync(fd)
            lock = cls(path, fd, me)
            _HELD[os.path.realpath(path)] = lock
            return lock

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                os.utime(self.path)
            except OSError:
                return

    def release(self) -> None:
        """Remove the lock file and drop the lock (idempotent)."""
        if self._fd is None:
            return
        self._stop.set()
        try:
            if os.fstat(self._fd).st_ino == os.stat(self.path).st_ino:
                os.remove(self.path)  # removed while held: no one can take a lock on the old file
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None
        atexit.unregister(self.release)
        if _HELD.get(os.path.realpath(self.path)) is self:
            del _HELD[os.path.realpath(self.path)]


def _wait_for_flock(fd: int, seconds: float) -> bool:
    """Take ``fd``'s flock within ``seconds`` (torchrun is still reaping a restarted job's old ranks)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            time.sleep(0.2)
    return False


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
