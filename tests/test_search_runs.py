"""End to end on real runs: ``dlrm-multiepoch search`` over joint and its ``early`` branch, launched through
TorchX (``local_cwd``, 2 gloo ranks, a MovieLens subset of 4 steps per epoch), then rerun.

With ``--rung_fraction 0.5`` both are first compared after 1.5 epochs (step 6, a pause
inside epoch 2: same cohort, tables trained from step 0), where halving keeps one."""

import io
import json
import os
from contextlib import redirect_stdout

import pytest

from dlrm_multiepoch.search.command import main as search_main
from dlrm_multiepoch.search.pruning import objective

pytestmark = pytest.mark.launch  # every test here reads real runs the module's fixture launches

STEPS = 4  # per epoch (--limit_train_batches)
SEARCH = [
    "--epochs", "2", "--candidates", "joint,early", "--rung_fraction", "0.5", "-j", "1x2", "--",
    "--dataset", "movielens", "--max_rows", "3000", "--batch_size", "256", "--limit_train_batches", str(STEPS),
    "--train_eval_rows", "0", "--no-progress_bar",
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
        assert [e["epoch"] for e in summary["evaluations"]][:3] == [1, 1.5, 2][: len(summary["evaluations"])]
        assert summary["evaluations"][1]["step"] == 6  # the pause at the rung: round(1.5 * 4)
        assert branch["curve"] == {
            f"{e['epoch']:g}": -objective(e["val"], "cal_ne", {}) for e in summary["evaluations"]
        }
        whole = [e for e in summary["evaluations"] if float(e["epoch"]).is_integer()]
        assert branch["test_auc"] == {str(int(e["epoch"])): {t: m["auc"] for t, m in e["test"].items()} for e in whole}
    assert (seed["branches"]["early"]["parent"], seed["branches"]["early"]["fork"]) == ("joint", 1)
    assert "decides on validation cal_ne (--auto_metric)" in output and record["metric"] == "cal_ne"
    # The rung at 1.5 epochs: one cohort (tables trained from step 0), the lower cal_ne goes on, the other is cut.
    first = seed["rungs"][0]
    assert first["epoch"] == 1.5 and first["judged"] == ["joint", "early"]
    at = {n: seed["branches"][n]["curve"]["1.5"] for n in ("joint", "early")}
    loser = max(at, key=at.get) if at["joint"] != at["early"] else "early"  # ties: the earlier candidate goes on
    assert list(first["cuts"]) == [loser] and first["cuts"][loser].startswith("halving within its cohort")
    assert seed["branches"][loser]["status"] == "cut" and seed["branches"][loser]["cut_at"] == 1.5
    curve = seed["branches"]["joint"]["curve"]
    # Cost: each trained its own steps only (early from joint's epoch 1); a sweep trains joint 3 epochs, early 2.
    own = {n: max(e["step"] for e in s["evaluations"]) for n, s in (("joint", joint), ("early", early))}
    assert seed["cost"]["trained_steps"] == own["joint"] + own["early"] - STEPS
    assert (seed["cost"]["sweep_steps"], seed["cost"]["steps_per_epoch"]) == (5 * STEPS, STEPS)
    # The deployed checkpoint is the best validation one of joint's whole epochs and early's epoch 2 if it got there.
    points = {("joint", float(e)): -v for e, v in curve.items() if float(e).is_integer()}
    if "2" in seed["branches"]["early"]["curve"]:
        points[("early", 2.0)] = -seed["branches"]["early"]["curve"]["2"]
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
    assert {n: b["curve"] for n, b in after["branches"].items()} == {
        n: b["curve"] for n, b in before["branches"].items()
    }
