"""A sweep's view of its jobs and run folders: a job's state that never raises, the trainer
already in a run folder, a failed run's own error line (and whether its data failed to load),
and an interrupted sweep (the signals that interrupt it: :mod:`dlrm_multiepoch.command_faults`).

Example::

    status, why = job_state(runner, handle)   # (None, "its state cannot be read (...)") on Slurm's "CANCELLED by 0"
    if status is None or status.is_terminal():
        ...                                   # the run is stopped: resume or restart it from its folder
"""

import os
import re
import shutil
from typing import Optional, Tuple

from torchx.runner import Runner
from torchx.specs import AppState, AppStatus, parse_app_handle

from dlrm_multiepoch.lock_holder import LockHolder
from dlrm_multiepoch.run_files import DATA_ERROR_MARK

_ERROR_LINE = re.compile(r"^\s*(?:\[[^\]]*\]:?\s*)*((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Busy)): (.+)$")
_FULL_BELOW = 1 << 20  # bytes: a run's disk with less free space is full (its next checkpoint or record will not fit)
# The app's parser refusing a flag (a path the launch names that is not there: ``--start_from``, ``--resume``).
_USAGE_LINE = re.compile(r"^\s*(?:\[[^\]]*\]:?\s*)*(?:python -m )?[\w./-]+: error: (.+)$")
# torchrun's and TorchX's own wrappers around a worker's error: never the reason.
_WRAPPERS = ("ChildFailedError", "SignalException", "RendezvousClosedError")


class SweepInterrupted(Exception):
    """The user stopped the sweep (Ctrl-C, SIGTERM, a closed terminal); ``run`` is the run it stopped, if any."""

    def __init__(self, signal_name: str, run: Optional[str] = None):
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.run = run


def job_state(runner: Runner, handle: str) -> Tuple[Optional[AppStatus], str]:
    """The job's status, or ``(None, why)`` when the scheduler cannot tell.

    TorchX raises on states it cannot translate (0.7.0's Slurm scheduler asserts on
    ``CANCELLED by <uid>``, the state ``sacct`` gives a user-cancelled job), a scheduler
    may have forgotten the job, or be unreachable: the run is then treated as stopped
    (its folder's lock still keeps a second trainer out of a live one's folder).
    """
    try:
        status = runner.status(handle)
    except Exception as e:  # any scheduler failure means "unknown", never a traceback
        return None, f"its state cannot be read ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    if status is None:
        return None, "the scheduler no longer knows it"
    if status.state == AppState.UNKNOWN:
        return None, "its state is UNKNOWN"
    return status, ""


def holder_is_job(holder: LockHolder, handle: str) -> bool:
    """Whether a run folder's lock holder is the job ``handle`` (TorchX passes the app id as the elastic job id)."""
    try:
        return holder.job_id is not None and holder.job_id == parse_app_handle(handle).app_id
    except Exception:  # not a TorchX handle: cannot be that job
        return False


def failure_reason(log_file: Optional[str]) -> Optional[str]:
    """The app's own one-line error from a failed run's log: the last ``SomeError: message`` a rank
    raised, or its parser's refusal of a flag, not torchrun's ``ChildFailedError`` block around it; None if
    the log has none."""
    if not log_file or not os.path.isfile(log_file):
        return None
    reason = None
    with open(log_file, errors="replace") as f:
        for line in f:
            match, usage = _ERROR_LINE.match(line.rstrip()), _USAGE_LINE.match(line.rstrip())
            if match and not match.group(1).endswith(_WRAPPERS):
                reason = f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(2)}"
            elif usage:
                reason = f"the training app refused its flags: {usage.group(1)}"
    return reason


def disk_full(folder: str) -> Optional[str]:
    """Why a run failed without a word in its log: the disk of its folder is full (the log, on the same disk, could
    not take its error); None when it is not."""
    existing = folder
    while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    try:
        free = shutil.disk_usage(existing).free
    except OSError:
        return None
    if free >= _FULL_BELOW:
        return None
    return f"the disk of {existing} is full ({free} bytes free): free space, then rerun the same command"


def launch_log_dir(log_dir: str, handle: str) -> str:
    """Where the local scheduler wrote one launch's logs: ``<log_dir>/<session>/<app id>``."""
    _, session, app_id = parse_app_handle(handle)
    return os.path.join(log_dir, session, app_id)


def combined_log(log_dir: str) -> Optional[str]:
    """The first replica's combined stdout/stderr under a local scheduler's ``log_dir`` (the newest)."""
    found = []
    for root, _, files in os.walk(log_dir):
        if "combined.log" in files:
            found.append(os.path.join(root, "combined.log"))
    return max(found, key=os.path.getmtime) if found else None


def data_failed(log_file: Optional[str]) -> bool:
    """Whether a failed run's log says its data failed to load (the trainer's ``DATA_ERROR_MARK`` line):
    every run of the same data flags would fail the same way."""
    if not log_file or not os.path.isfile(log_file):
        return False
    with open(log_file, errors="replace") as f:
        return any(DATA_ERROR_MARK in line for line in f)
