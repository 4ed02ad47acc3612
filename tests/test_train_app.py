"""End to end: the training app on 2 gloo ranks, launched by torchrun (with restarts), on real data."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.resume_helpers import E2E_FLAGS, scalars

REPO = Path(__file__).resolve().parents[1]


def app_command(tmp_path: Path, *flags: str, torchrun: Sequence[str] = ()) -> List[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *torchrun,
        str(REPO / "apps" / "train.py"), "--tensorboard_dir", str(tmp_path), "--run_name", "run", *flags,
    ]  # fmt: skip


def _app_env() -> Dict[str, str]:
    # A fresh rendezvous store per restart: torchrun's shared one keeps the previous
    # attempt's keys, and gloo may connect to a dead peer (pytorch/pytorch#135712).
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")


def _worker_of_rank(agent: int, rank: int) -> Optional[int]:
    """The pid of the torchrun worker (a child of ``agent``) that runs ``rank``."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # exited meanwhile, or not ours to read
        if ppid == agent and f"RANK={rank}".encode() in environ:
            return int(pid)
    return None


def test_two_rank_run_killed_mid_epoch_restarts_by_itself_and_equals_the_uninterrupted_run(
    tmp_path: Path, uninterrupted_runs: Path
) -> None:
    """SIGKILL one of 2 ranks mid-epoch: torchrun restarts the job, which resumes from its own
    newest checkpoint without --resume, and ends with the uninterrupted run's metrics."""
    cmd = app_command(tmp_path, *E2E_FLAGS, torchrun=["--max_restarts", "1"])
    proc = subprocess.Popen(cmd, cwd=REPO, env=_app_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = tmp_path / "run" / "checkpoints" / "step_5"
        deadline = time.monotonic() + 300
        while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        victim = _worker_of_rank(proc.pid, 1)
        assert first.exists() and victim is not None, "the job never reached its first step checkpoint"
        os.kill(victim, signal.SIGKILL)
        output, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output[-8000:]
    assert "restart 1 of job" in output and "resuming from its checkpoint" in output
    run_dir = tmp_path / "run"
    summary = json.loads((run_dir / "summary.json").read_text())
    reference = json.loads((uninterrupted_runs / "e2e" / "summary.json").read_text())
    assert len(summary["resumed_from"]) == 1 and summary["resumed_from"][0]["step"] >= 5
    assert summary["evaluations"] == reference["evaluations"]
    for tag in ("train/loss", "test/like/auc", "pipeline/stale_fraction"):
        assert scalars(str(run_dir), tag) == scalars(str(uninterrupted_runs / "e2e"), tag), tag

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    expected = {"train/loss", "train/samples_per_sec", "train/loss_like", "train/loss_love"}
    expected |= {f"{split}/{task}/{m}" for split in ("test", "train_sample") for task in ("like", "love") for m in ("auc", "logloss", "ne")}
    expected |= {"lr/t_user", "lr/t_item", "test.unseen_user/like/auc", "test.seen/love/auc"}
    assert expected <= tags, expected - tags
    # The freeze state is logged per group: frozen (0) in epoch 1, training (1) in epoch 2.
    states = [e.value for e in acc.Scalars("freeze/tables")]
    assert states[0] == 0.0 and states[-1] == 1.0
    assert "freeze schedule at step 0 (epoch 0.000): tables frozen" in output
    # Semi-sync lookups are exact while the tables are frozen and stale (some rows) after.
    stale = {e.step: e.value for e in acc.Scalars("pipeline/stale_fraction")}
    steps_per_epoch = max(stale) // 2
    assert all(v == 0.0 for step, v in stale.items() if step <= steps_per_epoch)
    assert any(v > 0.0 for step, v in stale.items() if step > steps_per_epoch + 1)
    # Warm-up over 2 steps, then the per-table base LRs, as set on the fused kernels.
    lrs = {t: [e.value for e in acc.Scalars(f"lr/{t}")] for t in ("t_item", "t_user")}
    assert lrs["t_item"][-1] == pytest.approx(0.1) and lrs["t_user"][-1] == pytest.approx(0.05)
    assert "re-initialised ['t_item'] before epoch 2" in output
    assert summary["encoding"]["t_user"]["min_count"] == 2 and summary["encoding"]["t_item"]["folded_ids"] == 0
    assert summary["falr_memory"]["bytes_rank0"] > 0
    epochs = [e["epoch"] for e in summary["evaluations"]]
    assert epochs[-1] == 2 and 1 in epochs and len(epochs) > 2  # per epoch plus every 5 steps
    # Each evaluation covers every test row exactly once across the two ranks.
    test_rows = summary["dataset"]["test"]
    assert all(e["test"]["like"]["rows"] == test_rows for e in summary["evaluations"])
    assert all(0.0 <= e[split][task]["auc"] <= 1.0 for e in summary["evaluations"] for split in ("test", "train_sample") for task in ("like", "love"))


@pytest.mark.parametrize("entry", [["-m", "dlrm_multiepoch.train"], [str(REPO / "apps" / "train.py")]], ids=["module", "file"])
def test_bad_flag_fails_fast_with_its_name(tmp_path, entry):
    # The module from a folder that is not the checkout (the package is installed); the file form from the checkout.
    proc = subprocess.run(
        [sys.executable, *entry, "--embeding_dim", "8"], cwd=tmp_path if entry[0] == "-m" else REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "unrecognized arguments: --embeding_dim" in proc.stderr
    assert proc.stderr.startswith("usage: python -m dlrm_multiepoch.train [-h]"), proc.stderr[:200]
