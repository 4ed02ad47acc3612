"""Undefined metrics (an empty slice, labels of one class) on the sweep's console and in ``compare``.

The end to end runs ``dlrm-multiepoch sweep`` on a random split where every test user was
seen in train (the ``test.unseen_user`` slice is empty) with a task named ``a/b`` whose
labels are all 0, one 1-epoch run under TorchX ``local_cwd``, then ``compare``.
"""

import csv
import io
import json
from contextlib import redirect_stdout

import numpy as np
import pytest

from dlrm_multiepoch.report.command import main as compare_main
from dlrm_multiepoch.sweep.command import main as sweep_main
from dlrm_multiepoch.sweep.follow import EvaluationFollower, auc_line
from dlrm_multiepoch.train.evaluate import undefined_metrics

NAN = float("nan")
TERMINAL = 80


def test_auc_line_shows_validation_and_test_per_task_and_n_a_when_undefined():
    evaluation = {
        "epoch": 1, "step": 7,
        "test": {"like": {"auc": 0.74081, "logloss": 0.5}, "a/b": {"auc": None}},
        "test.unseen_user": {"like": {"auc": None, "rows": 0.0}},
        "train_sample": {"like": {"auc": 0.9}},
        "val": {"like": {"auc": 0.7}, "a/b": {"auc": NAN}},
    }  # fmt: skip
    assert auc_line(evaluation) == "val like 0.7000 a/b n/a | test like 0.7408 a/b n/a"
    assert auc_line({"epoch": 1, "test.unseen_user": {"like": {"auc": None}}}) == "no validation or test evaluation"


def test_the_follower_prints_new_whole_epochs_and_the_restored_best(tmp_path):
    path = tmp_path / "summary.json"
    lines = []
    follower = EvaluationFollower(str(tmp_path), lines.append)
    follower.poll()  # no summary yet: nothing
    path.write_text("{not json")
    follower.poll()  # caught mid-write: nothing
    evaluations = [{"epoch": 0.5, "val": {"like": {"auc": 0.6}}}, {"epoch": 1, "test": {"like": {"auc": None}}}]
    path.write_text(json.dumps({"evaluations": evaluations}))
    follower.poll()
    follower.poll()
    path.write_text(json.dumps({"evaluations": evaluations, "best": {"epoch": 0.5, "val": {"like": {"auc": 0.6}}}}))
    follower.poll()
    assert lines == ["    epoch 1: test like n/a", "    kept its best-validation weights (epoch 0.50): val like 0.6000"]
    # A resumed run's earlier epochs are not news.
    resumed = []
    EvaluationFollower(str(tmp_path), resumed.append).poll()
    assert resumed == ["    kept its best-validation weights (epoch 0.50): val like 0.6000"]


def test_an_empty_slice_is_named_as_such():
    empty = {"auc": NAN, "logloss": NAN, "ne": NAN, "positive_rate": NAN, "rows": 0.0}
    one_class = {"auc": NAN, "logloss": 0.1, "ne": NAN, "positive_rate": 0.0, "rows": 87.0}
    assert undefined_metrics({"test.unseen_user": {"like": empty}, "test": {"love": one_class}}) == {
        ("test.unseen_user", "like"): "test.unseen_user/like: it has no rows, so auc, logloss, ne undefined "
        "(TensorBoard gets NaN, summary.json null)",
        ("test", "love"): "test/love: all 87 labels are 0, so auc, ne undefined (TensorBoard gets NaN, summary.json null)",
    }


def _ratings(path):
    """1200 ratings 1-4 of 30 users (40 each) and 20 items: a random split sees every user and item in train."""
    rng = np.random.default_rng(0)
    users, items = np.arange(1200) % 30, rng.integers(0, 20, 1200)
    ratings = np.clip(np.round(2.5 + 0.4 * (users % 5) + 0.3 * (items % 4) + rng.normal(0, 0.8, 1200)), 1, 4)
    path.write_text("user_id,item_id,rating\n" + "".join(f"{u},{i},{int(r)}\n" for u, i, r in zip(users, items, ratings)))


@pytest.mark.launch
def test_a_sweep_on_a_split_where_every_user_was_seen_prints_and_compares(tmp_path):
    _ratings(tmp_path / "ratings.csv")
    exp = tmp_path / "exp"
    out = io.StringIO()
    with redirect_stdout(out):
        code = sweep_main([
            str(exp), "joint-1ep", "--epochs", "1", "-j", "1x1", "--",
            "--dataset", "interactions", "--data_path", str(tmp_path / "ratings.csv"), "--label_col", "rating",
            "--task_thresholds", "like:3,a/b:5", "--val_fraction", "0.1", "--cache_dir", str(tmp_path / "cache"),
            "--batch_size", "128", "--no-progress_bar",
        ])  # fmt: skip
    console = out.getvalue()
    assert code == 0, console
    summary = json.loads((exp / "joint-1ep-s0" / "summary.json").read_text())
    (evaluation,) = summary["evaluations"]
    assert evaluation["test.unseen_user"]["like"] == {
        "auc": None, "logloss": None, "ne": None, "cal_ne": None, "positive_rate": None, "rows": 0.0,
        "auc_error_bound": None,
    }  # fmt: skip
    assert evaluation["test"]["a/b"]["auc"] is None and evaluation["test"]["a/b"]["positive_rate"] == 0.0
    val, test = evaluation["val"]["like"]["auc"], evaluation["test"]["like"]["auc"]
    line = f"    epoch 1: val like {val:.4f} a/b n/a | test like {test:.4f} a/b n/a"
    assert line in console.splitlines()
    assert all(len(row) <= TERMINAL for row in console.splitlines() if row.startswith("    epoch")), console
    out = io.StringIO()
    with redirect_stdout(out):
        assert compare_main([str(exp)]) == 0
    report = out.getvalue()
    # One strategy: no winner (issue 35, row 17), its figures said.
    assert (
        f"like: no winner: joint-1ep is the only strategy with a figure (validation AUC {val:.4f}, test AUC {test:.4f}): "
        "nothing to compare it with."
    ) in report
    assert "a/b: no winner: no strategy has a defined test AUC, nor a defined validation AUC" in report
    with open(exp / "compare" / "comparison.csv") as f:
        rows = {r["task"]: r for r in csv.DictReader(f)}
    assert float(rows["like"]["val_auc_last_mean"]) == np.float32(val) and float(rows["like"]["test_auc_last_mean"]) == np.float32(test)
    assert (rows["a/b"]["test_auc_last_mean"], rows["a/b"]["winner"]) == ("", "False")
