"""End to end: the training app on 2 gloo ranks, launched by torchrun, on real data."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

REPO = Path(__file__).resolve().parents[1]


def run_app(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        str(REPO / "apps" / "train.py"), "--tensorboard_dir", str(tmp_path), "--run_name", "run", *flags,
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_two_rank_run_on_movielens_subset_writes_tensorboard_and_summary(tmp_path):
    proc = run_app(
        tmp_path,
        "--dataset", "movielens", "--max_rows", "6000", "--epochs", "2", "--batch_size", "512",
        "--eval_every_n_steps", "5", "--train_eval_rows", "1000", "--log_every_n_steps", "2", "--no-progress_bar",
        "--freeze_schedule", "tables=frozen@[0,1) train@[1,end)", "--pipeline", "semi_sync",
        "--pipeline_staleness_interval", "1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    run_dir = tmp_path / "run"
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    expected = {"train/loss", "train/samples_per_sec", "train/loss_like", "train/loss_love"}
    expected |= {f"{split}/{task}/{m}" for split in ("test", "train_sample") for task in ("like", "love") for m in ("auc", "logloss", "ne")}
    assert expected <= tags, expected - tags
    # The freeze state is logged per group: frozen (0) in epoch 1, training (1) in epoch 2.
    states = [e.value for e in acc.Scalars("freeze/tables")]
    assert states[0] == 0.0 and states[-1] == 1.0
    assert "freeze schedule at step 0 (epoch 0.000): tables frozen" in proc.stderr + proc.stdout
    # Semi-sync lookups are exact while the tables are frozen and stale (some rows) after.
    stale = {e.step: e.value for e in acc.Scalars("pipeline/stale_fraction")}
    steps_per_epoch = max(stale) // 2
    assert all(v == 0.0 for step, v in stale.items() if step <= steps_per_epoch)
    assert any(v > 0.0 for step, v in stale.items() if step > steps_per_epoch + 1)
    summary = json.loads((run_dir / "summary.json").read_text())
    epochs = [e["epoch"] for e in summary["evaluations"]]
    assert epochs[-1] == 2 and 1 in epochs and len(epochs) > 2  # per epoch plus every 5 steps
    # Each evaluation covers every test row exactly once across the two ranks.
    test_rows = summary["dataset"]["test"]
    assert all(e["test"]["like"]["rows"] == test_rows for e in summary["evaluations"])
    assert all(0.0 <= e[split][task]["auc"] <= 1.0 for e in summary["evaluations"] for split in ("test", "train_sample") for task in ("like", "love"))


def test_bad_flag_fails_fast_with_its_name(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "apps" / "train.py"), "--embeding_dim", "8"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "unrecognized arguments: --embeding_dim" in proc.stderr
