"""Sweeps on a real Slurm: one job per run, a run cancelled with ``scancel`` and the same command
rerun, ``compare`` on the result; and the whole sweep as one job that the scheduler restarts."""

import csv
import io
import json
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Tuple

import pytest

from dlrm_multiepoch.report.command import main as compare_main
from tests.cluster.slurm_jobs import (
    APP_FLAGS,
    DATA_PARAMS,
    EPOCHS,
    STEPS_PER_EPOCH,
    job_id,
    job_records,
    job_state,
    kill_rank,
    newest_log,
    scancel,
    submitted_handle,
    summary_of,
    wait_for_job,
    wait_until,
)
from tests.resume_helpers import scalars
from tests.torchx_cli import torchx

# `delayed` repeats the reference run (tests/cluster/conftest.py) flag for flag.
SWEEP = [
    "joint-1ep", "delayed", "--epochs", str(EPOCHS), "-s", "slurm", "-j", "1x2",
    "--", *DATA_PARAMS, *APP_FLAGS,
]  # fmt: skip


def _sweep(exp: Path) -> str:
    """``dlrm-multiepoch sweep EXP SWEEP...`` as a user runs it, from the experiment's parent folder (not the
    checkout: every job runs the app as a module); its output (it must exit 0, no traceback)."""
    proc = subprocess.run(
        [sys.executable, "-m", "dlrm_multiepoch.cli", "sweep", str(exp), *SWEEP],
        cwd=exp.parent, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in output, output
    return output


def _handle(exp: Path, run: str) -> str:
    return json.loads((exp / "sweep.json").read_text())["runs"][run]["handle"]


@pytest.fixture(scope="module")
def cancelled_sweep(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Path, str, str]:
    """The sweep, its `delayed` run cancelled mid-epoch, the same command rerun, all jobs done.

    Returns the experiment folder, the rerun's output and the id of the cancelled job.
    """
    exp = tmp_path_factory.mktemp("sweep") / "exp"
    exp.mkdir()
    first = _sweep(exp)
    assert "joint-1ep-s0: submitted as slurm://" in first and "delayed-s0: submitted as slurm://" in first, first
    cancelled = job_id(_handle(exp, "delayed-s0"))
    # The jobs run one after another: wait for delayed's first step checkpoint, 4 steps in.
    wait_until(lambda: (exp / "delayed-s0" / "checkpoints" / "step_4").is_dir(), 900, "delayed-s0's step 4 checkpoint")
    scancel(cancelled)
    wait_until(lambda: job_state(cancelled) == "CANCELLED", 120, f"job {cancelled} to be cancelled")
    assert (
        not (exp / "delayed-s0" / "summary.json").exists()
        or len(summary_of(exp / "delayed-s0")["evaluations"]) < EPOCHS
    )
    rerun = _sweep(exp)
    resubmitted = job_id(_handle(exp, "delayed-s0"))
    assert resubmitted != cancelled, rerun
    assert wait_for_job(resubmitted) == "COMPLETED"
    assert wait_for_job(job_id(_handle(exp, "joint-1ep-s0"))) == "COMPLETED"
    return exp, rerun, cancelled


def test_a_cancelled_run_resumes_from_its_step_checkpoint_and_equals_the_uninterrupted_run(
    cancelled_sweep: Tuple[Path, str, str], reference_run: Tuple[Path, str]
) -> None:
    exp, rerun, _ = cancelled_sweep
    assert "delayed-s0: submitted as slurm://" in rerun, rerun
    run, reference = exp / "delayed-s0", reference_run[0]
    (resumed,) = summary_of(run)["resumed_from"]
    assert resumed["step"] % STEPS_PER_EPOCH != 0, resumed  # a step checkpoint, mid-epoch
    assert summary_of(run)["evaluations"] == summary_of(reference)["evaluations"]
    for tag in ("train/loss", "test/like/auc", "test/love/logloss"):
        assert scalars(str(run), tag) == scalars(str(reference), tag), tag


def test_a_third_call_submits_nothing(cancelled_sweep: Tuple[Path, str, str]) -> None:
    exp = cancelled_sweep[0]
    before = (exp / "sweep.json").read_text()
    output = _sweep(exp)
    assert "joint-1ep-s0: finished earlier, skipped" in output and "delayed-s0: finished earlier, skipped" in output
    assert "submitted" not in output
    assert json.loads((exp / "sweep.json").read_text())["runs"] == json.loads(before)["runs"]


def test_compare_reads_the_cluster_sweep(
    cancelled_sweep: Tuple[Path, str, str], reference_run: Tuple[Path, str]
) -> None:
    exp = cancelled_sweep[0]
    with redirect_stdout(io.StringIO()):
        assert compare_main([str(exp)]) == 0
    with open(exp / "compare" / "comparison.csv") as f:
        rows = {(r["task"], r["strategy"]): r for r in csv.DictReader(f)}
    assert set(rows) == {(t, s) for t in ("like", "love") for s in ("joint-1ep", "delayed")}
    final = summary_of(reference_run[0])["evaluations"][-1]["test"]
    for task in ("like", "love"):
        assert float(rows[(task, "delayed")]["test_auc_last_mean"]) == pytest.approx(final[task]["auc"], abs=1e-6)
    assert "Runs left out" not in (exp / "compare" / "comparison.md").read_text()


def test_the_sweep_job_restarted_by_the_scheduler_finishes_every_run(tmp_path: Path) -> None:
    """``dlrm_multiepoch.sweep`` as one Slurm job with ``--max_retries 1``: a rank killed in its first
    run fails the job, TorchX's script requeues it, and the second attempt resumes that run from
    its step checkpoint and skips the run the first attempt finished."""
    exp = tmp_path / "exp"
    out = torchx(
        "run", "-s", "slurm", "dlrm_multiepoch.sweep", "--experiment_dir", str(exp), "--epochs", "1",
        "--max_retries", "1", "-j", "1x1",
        "--", "joint-1ep", "frozen", "--", *DATA_PARAMS, *APP_FLAGS, cwd=tmp_path,
    )  # fmt: skip
    jid = job_id(submitted_handle(out.stdout + out.stderr))
    wait_until(
        lambda: (exp / "joint-1ep-s0" / "checkpoints" / "step_4").is_dir(), 600, "joint-1ep-s0's step 4 checkpoint"
    )
    kill_rank(jid, 0)
    assert wait_for_job(jid) == "COMPLETED"
    attempts = [row[0].split()[0] for row in job_records(jid, "State", duplicates=True)]
    assert attempts == ["REQUEUED", "COMPLETED"], attempts
    (resumed,) = summary_of(exp / "joint-1ep-s0")["resumed_from"]
    assert resumed["step"] >= 4 and resumed["epoch"] == 0
    assert "resumed_from" not in summary_of(exp / "frozen-s0")  # finished in the first attempt, never rerun
    for run in ("joint-1ep-s0", "frozen-s0"):
        assert [e["epoch"] for e in summary_of(exp / run)["evaluations"]] == [1]
    log = newest_log(tmp_path, f"slurm-{jid}-sweep-0.out") or ""
    assert "[2/2] frozen-s0: finished earlier (1 epoch), skipped" in log, log[-3000:]
