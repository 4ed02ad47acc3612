"""Who holds a run folder: its ``trainer.lock``'s holder, read torch-free, and whether it still runs.

The trainer takes and keeps the lock (:mod:`dlrm_multiepoch.train.lock`); the sweep, the search and
``compare`` read who holds a folder here without importing torch.

Example::

    holder = live_holder("runs/bx/joint-s0")
    if holder is not None:
        print(f"trained now by {holder.describe()}")   # job J, pid P on host H since T
"""

import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Optional

from dlrm_multiepoch.run_files import lock_path

STALE_AFTER_S = 300.0  # a lock from another host without a heartbeat for this long is taken over


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or held) a run folder's lock, as its ``trainer.lock`` says.

    Args:
        job_id: the holder's elastic job id (``TORCHELASTIC_RUN_ID``), or None.
        host: its host name.
        pid: its process id on that host (None while it is still writing the file).
        pid_start: the process's start time in clock ticks since boot (Linux), or None.
        started: when it took the lock (ISO 8601, UTC).
    """

    job_id: Optional[str]
    host: str
    pid: Optional[int]
    pid_start: Optional[int]
    started: str

    def describe(self) -> str:
        """``job J, pid P on host H since T``."""
        job = f"job {self.job_id}, " if self.job_id else ""
        return f"{job}pid {self.pid} on host {self.host} since {self.started}"

    def alive(self, heartbeat_age_s: float) -> bool:
        """Whether the holder still runs: its PID on this host, else its heartbeat on another."""
        if self.host != socket.gethostname() or self.pid is None:
            return heartbeat_age_s < STALE_AFTER_S
        return process_alive(self.pid, self.pid_start)


def process_alive(pid: int, pid_start: Optional[int]) -> bool:
    """Whether process ``pid`` runs on this host and is the one that started at ``pid_start`` (None: any; a
    start this system does not show counts as a match), not a later process given the same PID."""
    start = process_start(pid)
    return start is not None and (pid_start is None or start in (-1, pid_start))


def process_start(pid: int) -> Optional[int]:
    """The start time of process ``pid`` (clock ticks since boot), -1 when unknown, None if it does not run."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
    except (OSError, IndexError, ValueError):
        try:
            os.kill(pid, 0)  # no /proc (macOS): the PID alone
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # runs, as another user
        return -1


def read_holder(run_dir: str) -> Optional[LockHolder]:
    """The holder named in ``run_dir``'s lock file (alive or not); None when there is no lock file.

    A lock file still being written (empty) names an unknown holder on this host, alive
    while its heartbeat is fresh.
    """
    try:
        with open(lock_path(run_dir)) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    try:
        fields = json.loads(text)
        return LockHolder(**{k: fields.get(k) for k in LockHolder.__dataclass_fields__})
    except (ValueError, TypeError, AttributeError):
        return LockHolder(None, "?", None, None, "?")


def live_holder(run_dir: str) -> Optional[LockHolder]:
    """The trainer that holds ``run_dir`` now, or None when no live trainer does."""
    holder = read_holder(run_dir)
    if holder is None:
        return None
    try:
        age = time.time() - os.path.getmtime(lock_path(run_dir))
    except FileNotFoundError:
        return None  # released meanwhile
    return holder if holder.alive(age) else None
