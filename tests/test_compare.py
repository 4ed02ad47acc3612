"""``dlrm-multiepoch compare`` on run folders written here with TensorBoard's writer: exact figures.

The real-run end to end (sweep + compare on two tiny runs) is in ``tests/test_sweep_runs.py``.
"""

import csv
import io
import json
import os
from contextlib import redirect_stdout

import numpy as np
import pytest

from dlrm_multiepoch.report import compare_experiment, read_experiment
from dlrm_multiepoch.report.command import main as compare_main
from dlrm_multiepoch.report.runs import metric_key
from dlrm_multiepoch.report.tables import to_markdown
from tests.run_writer import f32, hparams_sessions, manifest, mean32, truncate_events, write_run


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
    assert joint.test_auc.mean == pytest.approx((f32(0.70) + f32(0.71)) / 2, abs=1e-12)
    assert joint.test_auc.std == pytest.approx(np.std([f32(0.70), f32(0.71)], ddof=1), abs=1e-12)
    assert joint.gap.mean == pytest.approx((f32(0.95) - f32(0.70) + f32(0.96) - f32(0.71)) / 2, abs=1e-12)
    assert joint.one_epoch_drop == (1, pytest.approx(joint.curve[2].mean - joint.curve[1].mean))
    assert delayed.one_epoch_drop is None
    assert delayed.test_logloss.mean == pytest.approx((f32(0.6) + f32(0.4)) / 2, abs=1e-12)
    assert delayed.logloss_best.std == pytest.approx(np.std([f32(0.6), f32(0.4)], ddof=1), abs=1e-12)
    assert (joint.wall_time_s, joint.samples_per_s) == (21.0, 2000.0)  # mean wall time, median throughput
    # Baselines: joint-1ep from its own runs; joint at its best epoch (1).
    assert (task.joint_1ep.source, task.joint_1ep.auc) == ("joint-1ep", pytest.approx((f32(0.74) + f32(0.76)) / 2))
    assert (task.joint_best.epoch, task.joint_best.auc) == (1, pytest.approx((f32(0.74) + f32(0.76)) / 2))
    assert delayed.vs_joint_best == pytest.approx(delayed.test_auc.mean - task.joint_best.auc)
    # Winner: delayed (0.77) over joint-1ep (0.75): margin 0.02 > the larger seed std (0.0141).
    assert (task.winner, task.runner_up) == ("delayed", "joint-1ep")
    assert task.margin == pytest.approx(delayed.test_auc.mean - task.row("joint-1ep").test_auc.mean)
    assert task.spread == pytest.approx(max(delayed.test_auc.std, task.row("joint-1ep").test_auc.std))
    assert task.margin_exceeds_spread is True
    text = to_markdown(comparison)
    assert "**like: delayed wins on test** with test AUC 0.7700 ± 0.0141, 2.00 pt above joint-1ep (more than the seed spread, 1.41 pt)" in text
    assert "Picked on test, because these runs have no validation AUC for this task (no validation split)" in text
    assert "| joint | 2 | 3 | ep 3 | 0.7050 ± 0.0071 | 0.5000 ± 0.0000 | 1 | 0.7500 ± 0.0141 |" in text
    assert "one-epoch drop ep 1→2 (-2.50 pt)" in text
    assert "+2.00 pt (+2.67%)" in text  # delayed vs joint-1ep: 0.02 / 0.75


def test_missing_partial_and_corrupt_runs_are_named_and_the_rest_compared(tmp_path, capsys):
    exp = tmp_path / "exp"
    write_run(exp / "joint-s0", [0.74, 0.72])
    write_run(exp / "early-s0", [0.74, 0.75])
    write_run(exp / "delayed-s0", [0.55], planned=2, finished=False)  # interrupted after epoch 1
    write_run(exp / "short-s0", [0.74])  # finished, but launched for 1 of the 2 planned epochs
    write_run(exp / "auto-s0", [0.73], planned=2, best=(0.8, 0.73))  # stopped itself after epoch 1 of 2: finished
    write_run(exp / "lost-s0", [0.74, 0.72])  # its event file lost epoch 2 (summary.json records it)
    truncate_events(exp / "lost-s0", before=("eval/epoch", 2))
    write_run(exp / "cut-s0", [0.74, 0.72])  # cut inside epoch 2's evaluation
    truncate_events(exp / "cut-s0", before=("test/like/auc", 2))
    write_run(exp / "gone-s0", [0.74, 0.72])  # summary.json records a task its event files lack
    summary = json.loads((exp / "gone-s0" / "summary.json").read_text())
    for evaluation in summary["evaluations"][1:]:
        evaluation["test"]["love"] = {"auc": 0.7}
    (exp / "gone-s0" / "summary.json").write_text(json.dumps(summary))
    (exp / "stray").mkdir()  # not a run of the sweep
    write_run(exp / "corrupt-s0", [0.7, 0.7])
    (exp / "corrupt-s0" / "summary.json").write_text('{"config": {"seed": 0, "ep')
    (exp / "garbage-s0").mkdir()
    (exp / "garbage-s0" / "events.out.tfevents.1.host.1.0").write_bytes(os.urandom(300))
    names = ("joint-s0", "early-s0", "delayed-s0", "short-s0", "auto-s0", "lost-s0", "cut-s0", "gone-s0", "corrupt-s0",
             "garbage-s0", "missing-s0")
    manifest(exp, [(n, n.split("-")[0], 0, 2) for n in names])
    runs, problems = read_experiment(str(exp))
    assert [r.name for r in runs] == ["joint-s0", "early-s0", "auto-s0"]
    reasons = {p.name: p.reason for p in problems}
    assert reasons["delayed-s0"].startswith("partial: its summary.json does not record the end of training")
    assert reasons["short-s0"].startswith("partial: 1 of 2 epochs")
    assert reasons["corrupt-s0"].startswith("corrupt summary.json")
    assert reasons["garbage-s0"].startswith("no evaluations in its event files")
    assert reasons["missing-s0"] == "missing: no run folder"
    assert reasons["lost-s0"] == "partial: its event files lack epoch(s) 2 that summary.json records (truncated or damaged event files)"
    assert reasons["cut-s0"].startswith("partial: its event files lack test/like/auc at epoch(s) 2 (truncated")
    assert reasons["gone-s0"] == (
        "partial: its event files lack test/love/auc that summary.json records (truncated or damaged event files; 1 metric(s) lost)"
    )
    assert reasons["stray"] == "skipped: not a run of sweep.json"
    assert compare_main([str(exp), "--no-hparams"]) == 0
    out = capsys.readouterr().out
    assert "**like: early wins on test**" in out
    for name in ("delayed-s0", "short-s0", "lost-s0", "cut-s0", "gone-s0", "corrupt-s0", "garbage-s0", "missing-s0", "stray"):
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
    (task,) = comparison.tasks  # window runs are strategies of the table too, and get their own fit
    assert [r.strategy for r in task.rows] == ["window@0", "window@0.5", "window@1"] and task.winner == "window@1"
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
    assert os.path.getsize(exp / "compare" / "test_auc.png") > 10_000


def test_a_window_run_beside_the_presets_can_be_the_pick(tmp_path):
    """Issue 38, row 14: `sweep --windows 1` beside presets; the search may deploy window@1, so compare may pick it."""
    runs = [("joint", [0.70, 0.72], None), ("delayed", [0.50, 0.73], None), ("window@1", [0.50, 0.75], 1.0)]
    for name, val, window in runs:
        for seed in (0, 1):
            write_run(tmp_path / f"{name}-s{seed}", [0.7, 0.7], val_auc=val, seed=seed)
    manifest(tmp_path, [(f"{n}-s{s}", n, s, 2, w) for n, _, w in runs for s in (0, 1)])
    comparison = compare_experiment(str(tmp_path))
    (task,) = comparison.tasks
    assert [r.strategy for r in task.rows] == ["joint", "delayed", "window@1"]
    assert (task.decided_on, task.winner, task.runner_up) == ("val", "window@1", "delayed")
    assert [fit.final_auc.keys() for fit in comparison.windows] == [{1.0}]  # and the update-window fit as before
    assert "**like: window@1 wins on validation** with validation AUC 0.7500 ± 0.0000" in to_markdown(comparison)


def test_compare_picks_and_shows_the_metric_it_is_given(tmp_path, capsys):
    """Issue 37, item 3 (issue 38, row 12): `compare --metric cal_ne` picks on validation cal_ne (lower is better,
    by the metric table's sign) and shows it; AUC would pick the other strategy."""
    cal_ne = {"joint": ([0.93, 0.94], [0.92, 0.95]), "delayed": ([0.99, 0.96], [0.98, 0.97])}
    val_auc = {"joint": [0.70, 0.72], "delayed": [0.50, 0.74]}
    for name in ("joint", "delayed"):
        val, test = cal_ne[name]
        for seed in (0, 1):
            metrics = {("val", "cal_ne"): val, ("test", "cal_ne"): test}
            write_run(tmp_path / f"{name}-s{seed}", [0.74, 0.73], val_auc=val_auc[name], seed=seed, more=metrics)
    by_auc = compare_experiment(str(tmp_path)).tasks[0]
    assert (by_auc.metric, by_auc.winner, by_auc.row("joint").best_epoch) == ("auc", "delayed", 2)
    comparison = compare_experiment(str(tmp_path), "cal_ne")
    (task,) = comparison.tasks
    joint = task.row("joint")
    assert (task.metric, task.decided_on, task.winner, task.runner_up) == ("cal_ne", "val", "joint", "delayed")
    assert joint.val_metric.mean == f32(0.94) and joint.test_metric.mean == f32(0.95)
    assert joint.best_epoch == 1  # its lowest validation cal_ne; AUC's best epoch is 2
    assert task.margin == pytest.approx(f32(0.96) - f32(0.94))
    text = to_markdown(comparison)
    assert "| strategy | seeds | epochs | deployed | val cal_ne | test cal_ne | val AUC | test AUC | test logloss |" in text
    assert "| joint | 2 | 2 | ep 2 | 0.9400 ± 0.0000 | 0.9500 ± 0.0000 | 0.7200 ± 0.0000 | 0.7300 ± 0.0000 |" in text
    assert "**like: joint wins on validation** with validation cal_ne 0.9400 ± 0.0000, 0.0200 below delayed" in text
    assert "Picked on validation: the validation cal_ne of the model each run deploys" in text
    assert compare_main([str(tmp_path), "--metric", "cal_ne", "--no-hparams"]) == 0
    with open(tmp_path / "compare" / "comparison.csv") as f:
        rows = {r["strategy"]: r for r in csv.DictReader(f)}
    assert (rows["joint"]["metric"], rows["joint"]["winner"], rows["joint"]["val_metric_last_mean"]) == (
        "cal_ne", "True", repr(f32(0.94)),
    )  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        compare_main([str(tmp_path), "--metric", "acc"])
    assert exit_info.value.code == 2 and "argument --metric: invalid choice: 'acc'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--metric must be one of auc, logloss, ne, cal_ne; got 'acc'"):
        compare_experiment(str(tmp_path), "acc")


def test_the_winner_is_picked_on_validation_by_what_each_run_deploys(tmp_path):
    # joint: best validation epoch 2 (test would pick 3).
    write_run(tmp_path / "joint-s0", [0.74, 0.73, 0.75], val_auc=[0.70, 0.72, 0.71], seed=0)
    write_run(tmp_path / "joint-s1", [0.74, 0.73, 0.75], val_auc=[0.70, 0.72, 0.71], seed=1)
    # auto deploys its restored best-validation weights: highest validation AUC, not the highest test AUC.
    write_run(tmp_path / "auto-s0", [0.70, 0.74, 0.72], val_auc=[0.6, 0.7, 0.7], best=(1.6, 0.745, 0.73), seed=0)
    write_run(tmp_path / "auto-s1", [0.70, 0.73, 0.72], val_auc=[0.6, 0.7, 0.7], best=(1.4, 0.735, 0.74), seed=1)
    write_run(tmp_path / "delayed-s0", [0.55, 0.56, 0.78], val_auc=[0.5, 0.5, 0.725], seed=0)
    write_run(tmp_path / "delayed-s1", [0.55, 0.56, 0.78], val_auc=[0.5, 0.5, 0.725], seed=1)
    # Stopped at epoch 0.5: no whole-epoch evaluation, but a deployed model.
    write_run(tmp_path / "joint-early-stop-s0", [], planned=3, best=(0.5, 0.70, 0.69), seed=0)
    comparison = compare_experiment(str(tmp_path))
    assert comparison.problems == []
    (task,) = comparison.tasks
    auto, delayed, early, joint = (task.row(n) for n in ("auto", "delayed", "joint-early-stop", "joint"))
    assert (task.decided_on, task.val, task.winner, task.runner_up) == ("val", "defined", "auto", "delayed")
    assert auto.val_auc.mean == pytest.approx(mean32(0.73, 0.74), abs=1e-12)
    assert auto.test_auc.mean == pytest.approx(mean32(0.745, 0.735), abs=1e-12)
    assert (auto.best_on, auto.best_epoch, auto.deployed_epoch) == ("val", 2, pytest.approx(1.5))
    assert delayed.test_auc.mean == pytest.approx(f32(0.78)) and delayed.test_auc.mean > auto.test_auc.mean
    assert task.margin == pytest.approx(auto.val_auc.mean - delayed.val_auc.mean)
    assert (early.epochs, early.deployed_epoch, early.best_epoch, early.test_auc.mean) == (0, 0.5, None, pytest.approx(f32(0.70)))
    # Joint's baseline: its best validation epoch (2) and its test AUC there.
    assert (task.joint_best.epoch, task.joint_best.on, task.joint_best.auc) == (2, "val", pytest.approx(f32(0.73)))
    assert joint.test_auc.mean == pytest.approx(f32(0.75))
    text = to_markdown(comparison)
    assert "**like: auto wins on validation** with validation AUC 0.7350 ± 0.0071, 1.00 pt above delayed (more than the seed spread, 0.71 pt)" in text
    assert "; its test AUC 0.7400 ± 0.0071; test AUC vs joint at its best validation epoch (2, 0.7300): +1.00 pt (+1.37%)." in text
    assert "Picked on validation: the validation AUC of the model each run deploys" in text
    assert "| joint-early-stop | 1 | 0 | best-val weights, ep 0.50 | 0.6900 | 0.7000 |" in text
    assert "Δ test vs joint-best (val ep 2)" in text and "Runs left out" not in text
    with redirect_stdout(io.StringIO()):
        assert compare_main([str(tmp_path)]) == 0  # the plot and HParams with a run that has no whole epoch
    assert os.path.getsize(tmp_path / "compare" / "test_auc.png") > 10_000
    _, scalars = hparams_sessions(tmp_path)
    assert scalars["joint-early-stop-s0"]["compare/deployed_val_auc_like"] == f32(0.69)
    # A run the schedule stopped early (2 of 3 epochs evaluated) is complete; an interrupted one is not.
    write_run(tmp_path / "auto-s2", [0.70, 0.74], planned=3, best=(1.2, 0.741), seed=2)
    write_run(tmp_path / "auto-s3", [0.70, 0.74], planned=3, best=(1.2, 0.741), seed=3, finished=False)
    runs, problems = read_experiment(str(tmp_path))
    assert "auto-s2" in [r.name for r in runs]
    assert [p.name for p in problems] == ["auto-s3"]


def test_per_epoch_cells_with_fewer_seeds_say_so(tmp_path):
    """Issue 29, row 16: auto stopped itself after 2 epochs in one of its 3 seeds; its epoch-3 mean is of 2."""
    for seed in (0, 1, 2):
        write_run(tmp_path / f"joint-s{seed}", [0.74, 0.73, 0.72], val_auc=[0.70, 0.71, 0.70], seed=seed)
    write_run(tmp_path / "auto-s0", [0.70, 0.74, 0.75], val_auc=[0.6, 0.7, 0.7], planned=3, best=(2.6, 0.75, 0.70), seed=0)
    write_run(tmp_path / "auto-s1", [0.70, 0.74, 0.76], val_auc=[0.6, 0.7, 0.7], planned=3, best=(2.6, 0.75, 0.70), seed=1)
    write_run(tmp_path / "auto-s2", [0.70, 0.74], val_auc=[0.6, 0.7], planned=3, best=(1.6, 0.74, 0.70), seed=2)
    comparison = compare_experiment(str(tmp_path))
    (task,) = comparison.tasks
    assert task.row("auto").seeds == 3 and task.row("auto").curve[3].n == 2
    text = to_markdown(comparison)
    assert f" | {mean32(0.75, 0.76):.4f} ± 0.0071 (2 of 3 seeds) |" in text  # test AUC after epoch 3
    assert "| joint | 0.7400 ± 0.0000 | 0.7300 ± 0.0000 | 0.7200 ± 0.0000 |" in text  # every seed: unmarked
    assert "A cell marked (n of N seeds) is the mean of the seeds that reached that epoch only." in text


def test_bad_folders_raise_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_experiment(str(tmp_path / "nope"))
    (tmp_path / "sweep.json").write_text("{")
    with pytest.raises(ValueError, match="sweep.json is not valid JSON"):
        read_experiment(str(tmp_path))


NAN = float("nan")


def test_undefined_metrics_never_win_sort_or_crash(tmp_path, capsys):
    exp = tmp_path / "exp"
    # joint's test labels are of one class (AUC undefined) in both seeds; every run has an empty
    # test.unseen_user slice; task a/b is evaluated on test only (absent from the validation split).
    def empty(ab):
        return {"test.unseen_user": {"like": [NAN, NAN]}, "test": {"a/b": [0.60, ab]}}

    for seed in (0, 1):
        write_run(exp / f"joint-s{seed}", [NAN, NAN], [0.8, 0.9], val_auc=[0.70, 0.71], seed=seed, extra=empty(0.63))
        write_run(exp / f"delayed-s{seed}", [0.55, 0.60], [0.6, 0.7], val_auc=[0.50, 0.69], seed=seed, extra=empty(0.62))
    comparison = compare_experiment(str(exp))
    assert comparison.problems == [] and [t.task for t in comparison.tasks] == ["a/b", "like"]
    ab, like = comparison.tasks
    # like: picked on validation, where joint is defined and ahead; its undefined test AUC stays n/a.
    joint = like.row("joint")
    assert (like.decided_on, like.winner, like.runner_up) == ("val", "joint", "delayed")
    assert (joint.test_auc, joint.auc_best, joint.gap, joint.curve) == (None, None, None, {1: None, 2: None})
    assert (like.joint_best, like.row("delayed").vs_joint_best) == (None, None)  # joint-best is undefined here
    # a/b: no validation AUC, picked on test (optimistic, said so).
    assert (ab.decided_on, ab.val, ab.winner) == ("test", "absent", "joint")
    # A strategy without a defined deciding AUC is never ranked; NaN never sorts first.
    for seed in (0, 1):
        write_run(exp / f"reinit-s{seed}", [0.9, 0.9], val_auc=[NAN, NAN], seed=seed, extra=empty(0.5))
    like = compare_experiment(str(exp)).tasks[1]
    assert (like.winner, like.unranked) == ("joint", ["reinit"])
    assert compare_main([str(exp)]) == 0
    out = capsys.readouterr().out
    assert "**like: joint wins on validation** with validation AUC 0.7100 ± 0.0000" in out
    assert "Not ranked (no defined validation AUC): reinit." in out
    assert "| joint | 2 | 2 | ep 2 | 0.7100 ± 0.0000 | n/a | 0.5000 ± 0.0000 | 2 | n/a |" in out
    assert "**a/b: joint wins on test**" in out and "Picked on test, because these runs have no validation AUC" in out
    with open(exp / "compare" / "comparison.csv") as f:
        rows = {(r["task"], r["strategy"]): r for r in csv.DictReader(f)}
    assert (rows["like", "joint"]["test_auc_last_mean"], rows["like", "joint"]["winner"]) == ("", "True")
    assert rows["like", "reinit"]["val_auc_last_mean"] == "" and rows["a/b", "delayed"]["decided_on"] == "test"
    assert os.path.getsize(exp / "compare" / "test_auc.png") > 10_000
    _, scalars = hparams_sessions(exp)
    assert "compare/deployed_test_auc_like" not in scalars["joint-s0"]  # undefined: not written, never sorts
    assert scalars["joint-s0"]["compare/deployed_val_auc_like"] == f32(0.71)
    assert scalars["delayed-s0"]["compare/deployed_test_auc_a/b"] == f32(0.62)


def test_a_tag_is_split_by_the_recorded_split_and_task_names():
    assert metric_key("test/a/b/auc") == ("test", "a/b", "auc")
    assert metric_key("test.unseen_user/like/ne") == ("test.unseen_user", "like", "ne")
    assert [metric_key(t) for t in ("train/loss", "freeze/tables/auc", "test/auc", "compare/best_test_auc_x")] == [None] * 4
    # With summary.json's names, a slice of a column named a/b is read exactly.
    known = {"test.unseen_a/b/like/auc": ("test.unseen_a/b", "like", "auc")}
    assert metric_key("test.unseen_a/b/like/auc", known) == ("test.unseen_a/b", "like", "auc")
    assert metric_key("test/like/auc", known) is None
