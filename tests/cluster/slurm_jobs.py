"""What the cluster tests share: the tiny training run they all launch, and Slurm job states.

The tests run against the Slurm that ``make test-cluster`` starts (``tools/slurm/start.sh``;
``SLURM_CONF`` names it): node ``$(hostname -s)`` alone in the default partition ``debug``
(jobs there run one at a time, each taking both CPUs) and two nodes in ``multi``.

Example::

    out = torchx("run", "-s", "slurm", "dlrm_multiepoch.train", *train_args(tmp, "run"), cwd=tmp)
    handle = submitted_handle(out.stdout + out.stderr)
    assert wait_for_job(job_id(handle)) == "COMPLETED"
"""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

# The training app, as the component launches it (``torchrun -m``): jobs start in the test's folder,
# which is not the checkout, and find the app in the installed package.
TRAIN_MODULE = "dlrm_multiepoch.train"

# One run: 2399 MovieLens training rows, 10 steps per epoch at global batch 256, 2 epochs,
# a checkpoint every 4 steps and at each epoch's end (steps 4, 8, 10, 12, 16, 20), all kept.
STEPS_PER_EPOCH = 10
EPOCHS = 2
# The `delayed` preset: the sweep's run of it repeats the reference run flag for flag.
STRATEGY_FLAGS = ["--freeze_schedule", "delayed"]
DATA_PARAMS = ["--dataset", "movielens", "--max_rows", "3000", "--batch_size", "256"]
APP_FLAGS = [
    "--train_eval_rows", "500", "--log_every_n_steps", "2", "--checkpoint_every_n_steps", "4",
    "--keep_checkpoints", "20", "--no-progress_bar",
]  # fmt: skip


def train_args(tensorboard_dir: Path, run_name: str, *extra_app_flags: str) -> List[str]:
    """The ``dlrm_multiepoch.train`` component's arguments for the run, in ``tensorboard_dir/run_name``."""
    return [
        *DATA_PARAMS, "--epochs", str(EPOCHS), "--seed", "0",
        "--tensorboard_dir", str(tensorboard_dir), "--run_name", run_name,
        "--", *STRATEGY_FLAGS, *APP_FLAGS, *extra_app_flags,
    ]  # fmt: skip


JOB_TIMEOUT_S = 600  # one tiny job, on a loaded 2-core machine


def summary_of(run: Path) -> Dict:
    """A run folder's ``summary.json``."""
    return json.loads((run / "summary.json").read_text())


_ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED", "REQUEUE_HOLD"}


def submitted_handle(torchx_stdout: str) -> str:
    """The ``slurm://torchx/ID`` handle that ``torchx run -s slurm`` prints."""
    found = re.findall(r"slurm://\S+/\d+", torchx_stdout)
    assert found, f"no Slurm app handle in:\n{torchx_stdout}"
    return found[-1]


def job_id(handle: str) -> str:
    """``slurm://torchx/42`` -> ``42``."""
    return handle.rsplit("/", 1)[1]


def job_records(jid: str, *fields: str, duplicates: bool = False) -> List[List[str]]:
    """``sacct`` rows of the job's allocations (one per node group of a heterogeneous job).

    Args:
        jid: the job id.
        fields: sacct fields, e.g. ``"State", "NodeList"``.
        duplicates: also the records of earlier attempts of a requeued job (``sacct -D``).
    """
    cmd = ["sacct", "-n", "-X", "-P", "-j", jid, "-o", ",".join(fields)] + (["-D"] if duplicates else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


def job_state(jid: str) -> str:
    """The job's state (``CANCELLED by 0`` reads ``CANCELLED``); ``PENDING`` until accounting knows it.

    A heterogeneous job's components share one state unless one failed: the worst is returned.
    """
    states = {row[0].split()[0] for row in job_records(jid, "State")}
    if not states:
        return "PENDING"
    return sorted(states, key=lambda s: (s in _ACTIVE, s != "COMPLETED"), reverse=True)[0]


def wait_for_job(jid: str, timeout: float = JOB_TIMEOUT_S) -> str:
    """Wait until the job stopped for good (a requeued one runs again first); return its state."""
    return wait_until(lambda: (state := job_state(jid)) not in _ACTIVE and state, timeout, f"job {jid} to end")


def wait_until(check: Callable[[], object], timeout: float, what: str, every: float = 0.5) -> object:
    """Poll ``check`` until it returns something truthy; return that. Fails after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def scancel(jid: str) -> None:
    subprocess.run(["scancel", jid], check=True)


def kill_rank(jid: str, rank: int) -> int:
    """SIGKILL the training process of ``rank`` that runs inside Slurm job ``jid``; return its pid.

    Found by its environment (``SLURM_JOB_ID``, ``RANK``), which torchrun and Slurm set.
    """
    wanted = {f"SLURM_JOB_ID={jid}".encode(), f"RANK={rank}".encode()}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
        except OSError:
            continue  # exited meanwhile
        # Workers only: not torchrun's agent nor its `bash -c` (their command lines name
        # torchrun), nor a sweep process that launches the app (no TORCHELASTIC_RUN_ID).
        elastic = any(e.startswith(b"TORCHELASTIC_RUN_ID=") for e in environ)
        app = f"\0-m\0{TRAIN_MODULE}\0".encode() in cmdline
        if app and b"torchrun" not in cmdline and elastic and wanted <= environ:
            os.kill(int(pid), signal.SIGKILL)
            return int(pid)
    raise AssertionError(f"no rank {rank} training process of job {jid} found")


def newest_log(folder: Path, pattern: str) -> Optional[str]:
    """The text of the newest file matching ``pattern`` in ``folder`` (a job's ``slurm-*.out``)."""
    files = sorted(folder.glob(pattern), key=os.path.getmtime)
    return files[-1].read_text(errors="replace") if files else None
