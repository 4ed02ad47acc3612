"""``dlrm-multiepoch compare`` on run folders written here with TensorBoard's writer: exact figures.

The real-run end to end (sweep + compare on two tiny runs) is in ``tests/test_sweep_runs.py``.
"""

import csv
import json
import os

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from dlrm_multiepoch.report import compare_experiment, read_experiment
from dlrm_multiepoch.report.command import main as compare_main
from dlrm_multiepoch.report.tables import to_markdown


def write_run(folder, test_auc, train_auc=None, wall=10.0, planned=None, seed=0, finished=True, logloss=None, best=None):
    """A run folder as the training app writes it: one evaluation per whole epoch (plus one mid-epoch).

    ``best``: ``(epoch, test AUC)`` of restored best-validation weights, as the auto schedule logs them.
    """
    os.makedirs(folder, exist_ok=True)
    with SummaryWriter(str(folder)) as w:
        if best is not None:
            w.add_scalar("best/test/like/auc", best[1], 10 * len(test_auc))
        w.add_scalar("train/samples_per_sec", 1000.0, 1)
        w.add_scalar("train/samples_per_sec", 3000.0, 2)
        w.add_scalar("eval/epoch", 0.5, 5)  # a mid-epoch evaluation: not a whole epoch, ignored
        w.add_scalar("test/like/auc", 0.1, 5)
        for i, auc in enumerate(test_auc):
            step = 10 * (i + 1)
            w.add_scalar("eval/epoch", i + 1, step)
            w.add_scalar("test/like/auc", auc, step)
            w.add_scalar("test/like/logloss", (logloss or [0.5] * len(test_auc))[i], step)
            if train_auc is not None:
                w.add_scalar("train_sample/like/auc", train_auc[i], step)
    summary = {"config": {"seed": seed, "epochs": planned or len(test_auc), "optim": {"learning_rate": 0.001}}}
    summary["evaluations"] = [{"epoch": i + 1} for i in range(len(test_auc))]
    if finished:
        summary["wall_time_s"] = wall
    if best is not None:
        summary["best"] = {"epoch": best[0]}
    (folder / "summary.json").write_text(json.dumps(summary))


def manifest(exp, runs):
    """``sweep.json`` listing runs as (name, strategy, seed, epochs[, window])."""
    entries = {r[0]: {"name": r[0], "strategy": r[1], "seed": r[2], "epochs": r[3], "window": r[4] if len(r) > 4 else None} for r in runs}
    (exp / "sweep.json").write_text(json.dumps({"runs": entries}))


def f32(x):
    return float(np.float32(x))  # event files store float32


def test_figures_baselines_winner_and_one_epoch_flag(tmp_path):
    exp = tmp_path / "exp"
    write_run(exp / "joint-1ep-s0", [0.74], [0.80], wall=5, seed=0)
    write_run(exp / "joint-1ep-s1", [0.76], [0.82], wall=7, seed=1)
    # joint: peaks at epoch 1 on the mean, falls while train AUC rises (the one-epoch phenomenon).
    write_run(exp / "joint-s0", [0.74, 0.72, 0.70], [0.80, 0.90, 0.95], wall=20, seed=0)
    write_run(exp / "joint-s1", [0.76, 0.73, 0.71], [0.82, 0.91, 0.96], wall=22, seed=1)
    write_run(exp / "delayed-s0", [0.55, 0.56, 0.78], [0.55, 0.56, 0.85], wall=15, seed=0, logloss=[0.7, 0.69, 0.6])
    write_run(exp / "delayed-s1", [0.55, 0.56, 0.76], [0.55, 0.56, 0.83], wall=17, seed=1, logloss=[0.7, 0.69, 0.4])
    # noisy: test AUC falls on the mean (-0.0025) by less than the seed spread: not flagged.
    write_run(exp / "noisy-s0", [0.70, 0.69], [0.80, 0.90], seed=0)
    write_run(exp / "noisy-s1", [0.72, 0.725], [0.80, 0.90], seed=1)
    manifest(exp, [("joint-1ep-s0", "joint-1ep", 0, 1), ("joint-1ep-s1", "joint-1ep", 1, 1), ("joint-s0", "joint", 0, 3),
                   ("joint-s1", "joint", 1, 3), ("delayed-s0", "delayed", 0, 3), ("delayed-s1", "delayed", 1, 3),
                   ("noisy-s0", "noisy", 0, 2), ("noisy-s1", "noisy", 1, 2)])  # fmt: skip
    comparison = compare_experiment(str(exp))
    assert comparison.problems == []
    (task,) = comparison.tasks
    assert [r.strategy for r in task.rows] == ["joint-1ep", "joint", "delayed", "noisy"]
    assert task.row("noisy").one_epoch_drop is None
    joint, delayed = task.row("joint"), task.row("delayed")
    assert (joint.best_epoch, joint.epochs, joint.seeds) == (1, 3, 2)
    assert joint.auc_best.mean == pytest.approx((f32(0.74) + f32(0.76)) / 2, abs=1e-12)
    assert joint.auc_last.mean == pytest.approx((f32(0.70) + f32(0.71)) / 2, abs=1e-12)
    assert joint.auc_last.std == pytest.approx(np.std([f32(0.70), f32(0.71)], ddof=1), abs=1e-12)
    assert joint.gap_last.mean == pytest.approx((f32(0.95) - f32(0.70) + f32(0.96) - f32(0.71)) / 2, abs=1e-12)
    assert joint.one_epoch_drop == (1, pytest.approx(joint.curve[2].mean - joint.curve[1].mean))
    assert delayed.one_epoch_drop is None
    assert delayed.logloss_last.mean == pytest.approx((f32(0.6) + f32(0.4)) / 2, abs=1e-12)
    assert delayed.logloss_best.std == pytest.approx(np.std([f32(0.6), f32(0.4)], ddof=1), abs=1e-12)
    assert (joint.wall_time_s, joint.samples_per_s) == (21.0, 2000.0)  # mean wall time, median throughput
    # Baselines: joint-1ep from its own runs; joint at its best epoch (1).
    assert (task.joint_1ep.source, task.joint_1ep.auc) == ("joint-1ep", pytest.approx((f32(0.74) + f32(0.76)) / 2))
    assert (task.joint_best.epoch, task.joint_best.auc) == (1, pytest.approx((f32(0.74) + f32(0.76)) / 2))
    assert delayed.vs_joint_best == pytest.approx(delayed.auc_last.mean - task.joint_best.auc)
    # Winner: delayed (0.77) over joint-1ep (0.75): margin 0.02 > the larger seed std (0.0141).
    assert (task.winner, task.runner_up) == ("delayed", "joint-1ep")
    assert task.margin == pytest.approx(delayed.auc_last.mean - task.row("joint-1ep").auc_last.mean)
    assert task.spread == pytest.approx(max(delayed.auc_last.std, task.row("joint-1ep").auc_last.std))
    assert task.margin_exceeds_spread is True
    text = to_markdown(comparison)
    assert "**like: delayed wins** with last-epoch test AUC 0.7700 ± 0.0141, 2.00 pt above joint-1ep (more than the seed spread, 1.41 pt)" in text
    assert "| joint | 2 | 3 | 1 | 0.7500 ± 0.0141 | 0.7050 ± 0.0071 |" in text
    assert "one-epoch drop ep 1→2 (-2.50 pt)" in text
    assert "+2.00 pt (+2.67%)" in text  # delayed vs joint-1ep: 0.02 / 0.75


def test_missing_partial_and_corrupt_runs_are_named_and_the_rest_compared(tmp_path, capsys):
    exp = tmp_path / "exp"
    write_run(exp / "joint-s0", [0.74, 0.72])
    write_run(exp / "early-s0", [0.74, 0.75])
    write_run(exp / "delayed-s0", [0.55], planned=2, finished=False)  # interrupted after epoch 1
    write_run(exp / "short-s0", [0.74])  # finished, but launched for 1 of the 2 planned epochs
    write_run(exp / "auto-s0", [0.73], planned=2)  # stopped itself after epoch 1 of 2: finished
    write_run(exp / "corrupt-s0", [0.7, 0.7])
    (exp / "corrupt-s0" / "summary.json").write_text('{"config": {"seed": 0, "ep')
    (exp / "garbage-s0").mkdir()
    (exp / "garbage-s0" / "events.out.tfevents.1.host.1.0").write_bytes(os.urandom(300))
    names = ("joint-s0", "early-s0", "delayed-s0", "short-s0", "auto-s0", "corrupt-s0", "garbage-s0", "missing-s0")
    manifest(exp, [(n, n.split("-")[0], 0, 2) for n in names])
    runs, problems = read_experiment(str(exp))
    assert [r.name for r in runs] == ["joint-s0", "early-s0", "auto-s0"]
    reasons = {p.name: p.reason for p in problems}
    assert reasons["delayed-s0"].startswith("partial: its summary.json does not record the end of training")
    assert reasons["short-s0"].startswith("partial: 1 of 2 epochs")
    assert reasons["corrupt-s0"].startswith("corrupt summary.json")
    assert reasons["garbage-s0"].startswith("no evaluations in its event files")
    assert reasons["missing-s0"] == "missing: no run folder"
    assert compare_main([str(exp), "--no-hparams"]) == 0
    out = capsys.readouterr().out
    assert "**like: early wins**" in out
    for name in ("delayed-s0", "short-s0", "corrupt-s0", "garbage-s0", "missing-s0"):
        assert f"- {name}: " in out


def test_update_window_slope_per_seed(tmp_path):
    exp = tmp_path / "exp"
    runs = []
    for seed, offset in ((0, 0.0), (1, 0.01)):
        for w, auc in ((0, 0.70), (0.5, 0.72), (1, 0.74)):
            name = f"window@{w:g}-s{seed}"
            write_run(exp / name, [0.6, auc + offset * w], seed=seed)
            runs.append((name, f"window@{w:g}", seed, 2, w))
    manifest(exp, runs)
    comparison = compare_experiment(str(exp))
    assert comparison.tasks[0].rows == []  # window runs are not strategies of the main table
    (fit,) = comparison.windows
    # Seed 0: slope 0.04 per epoch; seed 1: 0.05 (float32 values, so not exactly).
    assert fit.slopes[0] == pytest.approx(0.04, abs=1e-6) and fit.slopes[1] == pytest.approx(0.05, abs=1e-6)
    assert fit.slope.mean == pytest.approx(0.045, abs=1e-6) and fit.monotone
    assert "Fitted slope: 0.0450 ± 0.0071 AUC per epoch of delay" in to_markdown(comparison)
    assert compare_main([str(exp), "--no-hparams"]) == 0
    with open(exp / "compare" / "update_window.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 and {float(r["seed_slope"]) for r in rows} == {fit.slopes[0], fit.slopes[1]}
    assert os.path.getsize(exp / "compare" / "update_window.png") > 10_000
    assert not (exp / "compare" / "test_auc.png").exists()  # no strategy rows to plot


def test_a_run_that_restores_its_best_validation_weights_is_judged_by_them(tmp_path):
    write_run(tmp_path / "auto-s0", [0.70, 0.74, 0.72], best=(1.6, 0.745), seed=0)
    write_run(tmp_path / "auto-s1", [0.70, 0.73, 0.72], best=(1.4, 0.735), seed=1)
    (task,) = compare_experiment(str(tmp_path)).tasks
    (row,) = task.rows
    assert row.auc_last.mean == pytest.approx((f32(0.745) + f32(0.735)) / 2, abs=1e-12)
    assert (row.best_epoch, row.deployed_epoch) == (2, pytest.approx(1.5))
    assert "last = its restored best-validation weights (epoch 1.50 on average)" in to_markdown(compare_experiment(str(tmp_path)))
    # A run the schedule stopped early (2 of 3 epochs evaluated) is complete; an interrupted one is not.
    write_run(tmp_path / "auto-s2", [0.70, 0.74], planned=3, best=(1.2, 0.741), seed=2)
    write_run(tmp_path / "auto-s3", [0.70, 0.74], planned=3, best=(1.2, 0.741), seed=3, finished=False)
    runs, problems = read_experiment(str(tmp_path))
    assert sorted(r.name for r in runs) == ["auto-s0", "auto-s1", "auto-s2"]
    assert [p.name for p in problems] == ["auto-s3"]


def test_a_folder_of_runs_without_manifest_is_grouped_by_name(tmp_path):
    write_run(tmp_path / "joint-s0", [0.74, 0.72], seed=0)
    write_run(tmp_path / "joint-s1", [0.75, 0.73], seed=1)
    write_run(tmp_path / "mine", [0.70, 0.76], seed=3)
    runs, problems = read_experiment(str(tmp_path))
    assert problems == [] and [(r.strategy, r.seed) for r in runs] == [("joint", 0), ("joint", 1), ("mine", 3)]


def test_bad_folders_raise_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_experiment(str(tmp_path / "nope"))
    (tmp_path / "sweep.json").write_text("{")
    with pytest.raises(ValueError, match="sweep.json is not valid JSON"):
        read_experiment(str(tmp_path))
