"""End to end on real runs: ``dlrm-multiepoch search`` over joint and its ``early`` branch, launched through
TorchX (``local_cwd``, 2 gloo ranks, a MovieLens subset of 4 steps per epoch), then rerun."""

import io
import json
import os
from contextlib import redirect_stdout

import pytest

from dlrm_multiepoch.search.pruning import objective
from dlrm_multiepoch.search.command import main as search_main

pytestmark = pytest.mark.launch  # every test here reads real runs the module's fixture launches

STEPS = 4  # per epoch (--limit_train_batches)
SEARCH = [
    "--epochs", "2", "--candidates", "joint,early", "-j", "1x2", "--",
    "--dataset", "movielens", "--max_rows", "3000", "--batch_size", "256", "--limit_train_batches", str(STEPS),
    "--train_eval_rows", "0", "--no-progress_bar", "--auto_metric", "auc",
]  # fmt: skip


def _search(exp) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        code = search_main([str(exp), *SEARCH])
    assert code == 0, out.getvalue()
    return out.getvalue()


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    exp = tmp_path_factory.mktemp("search") / "exp"
    return exp, _search(exp)


def _summary(exp, run):
    return json.loads((exp / run / "summary.json").read_text())


def test_the_branch_starts_from_its_parent_and_the_record_holds_every_curve(searched):
    exp, output = searched
    record = json.loads((exp / "search.json").read_text())
    seed = record["seeds"]["0"]
    joint, early = _summary(exp, "joint-s0"), _summary(exp, "early-s0")
    assert early["started_from"]["path"] == str(exp / "joint-s0" / "checkpoints" / f"step_{STEPS}")
    assert early["evaluations"][0] == joint["evaluations"][0]  # epoch 1 is the parent's, bitwise
    assert early["config"]["freeze_schedule"] == "early" and early["config"]["start_from"]
    for name, summary in (("joint", joint), ("early", early)):
        branch = seed["branches"][name]
        whole = [e for e in summary["evaluations"] if float(e["epoch"]).is_integer()]
        assert branch["curve"] == {str(int(e["epoch"])): objective(e["val"], "auc", {}) for e in whole}
        assert branch["test_auc"] == {str(int(e["epoch"])): {t: m["auc"] for t, m in e["test"].items()} for e in whole}
    assert (seed["branches"]["early"]["parent"], seed["branches"]["early"]["fork"]) == ("joint", 1)
    # joint is judged after epoch 2 (the only rung where anything could be cut): past its peak or not.
    (rung,) = seed["rungs"]
    assert rung["epoch"] == 2 and rung["judged"] == ["joint"]
    curve = seed["branches"]["joint"]["curve"]
    assert (rung["cuts"] != {}) == (curve["2"] < curve["1"])
    assert seed["branches"]["joint"]["status"] == ("cut" if rung["cuts"] else "finished")
    # Cost: early trained its own epoch only; a sweep trains joint (3 epochs) and early (2) from scratch.
    joint_steps = STEPS * len(curve)
    assert seed["cost"]["trained_steps"] == joint_steps + STEPS
    assert (seed["cost"]["sweep_steps"], seed["cost"]["steps_per_epoch"]) == (5 * STEPS, STEPS)
    # The deployed checkpoint is the best validation one of joint's epochs and early's own epoch 2.
    points = {("joint", float(e)): v for e, v in curve.items()}
    points[("early", 2.0)] = seed["branches"]["early"]["curve"]["2"]
    (best_branch, best_epoch), best = max(points.items(), key=lambda kv: kv[1])
    deploy = seed["deploy"]
    assert (deploy["branch"], deploy["epoch"], deploy["val_objective"]) == (best_branch, best_epoch, best)
    assert deploy["checkpoint"] == str(exp / f"{best_branch}-s0" / "checkpoints" / f"step_{int(best_epoch) * STEPS}")
    assert os.path.isfile(os.path.join(deploy["checkpoint"], "trainer_state.json"))
    assert f"deploy: {deploy['checkpoint']}" in output


def test_rerunning_the_same_search_trains_nothing_and_decides_the_same(searched):
    exp, _ = searched
    before = json.loads((exp / "search.json").read_text())["seeds"]["0"]
    again = _search(exp)
    assert "training" not in again and "resuming" not in again
    after = json.loads((exp / "search.json").read_text())["seeds"]["0"]
    assert after["deploy"] == before["deploy"] and after["rungs"] == before["rungs"]
    assert {n: b["curve"] for n, b in after["branches"].items()} == {n: b["curve"] for n, b in before["branches"].items()}
