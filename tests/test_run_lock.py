"""The run-folder lock: one live trainer per folder, dead holders taken over, restarts of the same job allowed.
Holders are real processes (a child that takes the lock, then is killed); the trainer's use of it is in
tests/test_sweep_jobs.py (two real trainers on one folder)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from dlrm_multiepoch.lock_holder import STALE_AFTER_S, live_holder, read_holder
from dlrm_multiepoch.run_files import LOCK_FILE
from dlrm_multiepoch.train.lock import RunFolderBusy, RunLock

HOLD = "import sys, time; from dlrm_multiepoch.train.lock import RunLock; RunLock.acquire(sys.argv[1], sys.argv[2]); print('held', flush=True); time.sleep(60)"


@pytest.fixture
def holder(tmp_path):
    """A child process holding tmp_path/run for job 'job-a'."""
    run = str(tmp_path / "run")
    child = subprocess.Popen([sys.executable, "-c", HOLD, run, "job-a"], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    yield run, child
    child.kill()
    child.wait()


def test_a_live_holder_is_named_and_refuses_a_second_trainer(holder):
    run, child = holder
    held = live_holder(run)
    assert (held.job_id, held.pid, held.host) == ("job-a", child.pid, socket.gethostname())
    with pytest.raises(RunFolderBusy, match=rf"run folder {run} is in use by a live trainer \(job job-a, pid {child.pid} on host "):
        RunLock.acquire(run, "job-b", log=print)


def test_a_dead_holder_is_taken_over_with_a_log_line(holder):
    run, child = holder
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert read_holder(run).pid == child.pid and live_holder(run) is None  # the file stays; its holder is gone
    lines = []
    lock = RunLock.acquire(run, "job-b", log=lines.append)
    (line,) = lines
    assert line.startswith(f"run folder {run}: taking over the lock of job job-a, pid {child.pid} on host {socket.gethostname()} since ")
    assert line.endswith(" (its holder is gone)")
    assert (live_holder(run).job_id, live_holder(run).pid) == ("job-b", os.getpid())
    lock.release()
    assert not os.path.exists(os.path.join(run, LOCK_FILE)) and live_holder(run) is None
    lock.release()  # idempotent


def test_a_restart_of_the_same_job_takes_its_lock(holder):
    run, child = holder
    child.send_signal(signal.SIGKILL)  # torchrun kills the failed ranks, then restarts them with the same job id
    child.wait()
    lines = []
    RunLock.acquire(run, "job-a", log=lines.append).release()
    assert len(lines) == 1 and lines[0].endswith("(restart of job job-a)")


def _foreign_lock(run, age_s):
    os.makedirs(run, exist_ok=True)
    path = os.path.join(run, LOCK_FILE)
    with open(path, "w") as f:
        json.dump({"job_id": "slurm://1", "host": "node-b", "pid": 1, "pid_start": 5, "started": "2026-12-01T10:00:00Z"}, f)
    os.utime(path, (time.time() - age_s, time.time() - age_s))


def test_a_holder_on_another_host_is_alive_while_its_heartbeat_is(tmp_path):
    run = str(tmp_path / "run")
    _foreign_lock(run, age_s=10)
    with pytest.raises(RunFolderBusy, match=r"job slurm://1, pid 1 on host node-b"):
        RunLock.acquire(run, "job-b", log=print)
    _foreign_lock(run, age_s=STALE_AFTER_S + 1)
    lines = []
    RunLock.acquire(run, "job-b", log=lines.append).release()
    assert lines == [f"run folder {run}: taking over the lock of job slurm://1, pid 1 on host node-b since 2026-12-01T10:00:00Z (its holder is gone)"]


def test_a_reused_pid_is_not_the_holder(tmp_path):
    run = str(tmp_path / "run")
    os.makedirs(run)
    with open(os.path.join(run, LOCK_FILE), "w") as f:  # this process's pid, another start time: a dead holder's reused pid
        json.dump({"job_id": None, "host": socket.gethostname(), "pid": os.getpid(), "pid_start": 1, "started": "x"}, f)
    assert live_holder(run) is None
    RunLock.acquire(run, None, log=lambda _: None).release()


def test_the_same_process_may_take_its_folder_again(tmp_path):
    run = str(tmp_path / "run")
    first = RunLock.acquire(run, None, log=print)
    second = RunLock.acquire(run, None, log=print)  # an in-process resume (tests, notebooks)
    first.release()  # the old handle no longer owns the file
    assert live_holder(run).pid == os.getpid()
    second.release()
    assert live_holder(run) is None
