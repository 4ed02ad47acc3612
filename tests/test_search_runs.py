"""End to end on real runs: ``dlrm-multiepoch search`` over joint and its ``early`` branch, launched through
TorchX (``local_cwd``, 2 gloo ranks, a MovieLens subset of 4 steps per epoch), interrupted by Ctrl-C during
its first launch, rerun to its end, then rerun with the same and with other flags, and compared.

With ``--rung_fraction 0.5`` both are first compared after 1.5 epochs (step 6, a pause
inside epoch 2: same cohort, tables trained from step 0), where halving keeps one."""

import io
import json
import os
import re
import shutil
import signal
import threading
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from dlrm_multiepoch.data.identity import IDENTITY, changed_since, data_identity
from dlrm_multiepoch.report import compare_experiment
from dlrm_multiepoch.lock_holder import live_holder
from dlrm_multiepoch.search.command import main as search_main
from dlrm_multiepoch.search.pruning import objective
from dlrm_multiepoch.train.config import parse_config
from dlrm_multiepoch.train.trainer import pause_step

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


class _CtrlC(io.StringIO):
    """Captures the console and sends this process SIGINT once a branch's trainer is launched."""

    def write(self, text: str) -> int:
        if ": training, " in text and not getattr(self, "fired", False):
            self.fired = True
            threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        return super().write(text)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """The search, Ctrl-C'd during its first launch (its console and record then), then rerun to its end."""
    exp = tmp_path_factory.mktemp("search") / "exp"
    out = _CtrlC()
    with redirect_stdout(out):
        code = search_main([str(exp), *SEARCH])
    interrupted = (code, out.getvalue(), json.loads((exp / "search.json").read_text()))
    return exp, _search(exp), interrupted


def test_ctrl_c_stops_the_trainer_in_one_line_and_the_rerun_keeps_its_cost(searched):
    exp, _, (code, text, record) = searched
    assert code == 130 and "Traceback" not in text and "SignalException" not in text
    assert text.rstrip().splitlines()[-1] == (
        "search: interrupted (SIGINT); stopped branch joint-s0, which resumes from its last checkpoint. "
        "Rerun the same command to continue."
    )
    assert live_holder(str(exp / "joint-s0")) is None  # its trainer stopped
    cost = record["seeds"]["0"]["cost"]
    assert cost["launches"] == 1 and cost["wall_s"] > 0
    assert record["seeds"]["0"]["branches"]["joint"]["launches"][0]["wall_s"] > 0
    after = json.loads((exp / "search.json").read_text())["seeds"]["0"]["cost"]
    # The rerun's 3 segments (one training job trains them), and the first.
    assert (after["segments"], after["launches"]) == (1 + 3, 1 + 1) and after["wall_s"] > cost["wall_s"]


def _summary(exp, run):
    return json.loads((exp / run / "summary.json").read_text())


def test_the_branch_starts_from_its_parent_and_the_record_holds_every_curve(searched):
    exp, output, _ = searched
    record = json.loads((exp / "search.json").read_text())
    seed = record["seeds"]["0"]
    joint, early = _summary(exp, "joint-s0"), _summary(exp, "early-s0")
    assert early["started_from"]["path"] == str(exp / "joint-s0" / "checkpoints" / f"step_{STEPS}")
    assert early["evaluations"][0] == joint["evaluations"][0]  # epoch 1 is the parent's, bitwise
    assert early["config"]["freeze_schedule"] == "early" and early["config"]["start_from"]
    # Issue 35: every branch records the data it trained on, as the search's checks read it before any launch.
    data = data_identity(parse_config([*SEARCH[SEARCH.index("--") + 1 :], "--val_fraction", "0.1"]).data)
    assert joint[IDENTITY] == early[IDENTITY] == json.loads(json.dumps(data)) and changed_since(data, None) == []
    assert joint["world_size"] == 2 and record["j"] == "1x2"
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
    # val_metric is the metric as measured (cal_ne: lower is better), the console's and the curves' figure.
    assert (deploy["branch"], deploy["epoch"], deploy["val_metric"]) == (best_branch, best_epoch, -best)
    assert deploy["metric"] == "cal_ne" and f"validation cal_ne {-best:.4f};" in output
    assert deploy["checkpoint"] == str(exp / f"{best_branch}-s0" / "checkpoints" / f"step_{int(best_epoch) * STEPS}")
    assert os.path.isfile(os.path.join(deploy["checkpoint"], "trainer_state.json"))
    assert f"deploy: {deploy['checkpoint']}" in output


def test_each_launch_says_how_far_it_trains_and_a_branch_shows_only_its_own_epochs(searched):
    """Issue 35, row 20: a launch that pauses at a rung said "training, 3 epochs"; a branch's first launch repeated
    its parent's ``epoch 1:`` line."""
    _, output, (_, first, _) = searched
    assert "[1/1] joint-s0: training, to epoch 1.5 of 3, 1x2 ranks under TorchX local_cwd" in first
    start = output.index(f"[1/1] early-s0: starting from joint-s0's step_{STEPS}, to epoch 1.5 of 2, 1x2 ranks")
    assert "epoch 1:" not in output[start : output.index("done in", start)], output


def test_rerunning_the_same_search_trains_nothing_and_decides_the_same(searched):
    exp = searched[0]
    before = json.loads((exp / "search.json").read_text())["seeds"]["0"]
    again = _search(exp)
    assert "training" not in again and "resuming" not in again
    after = json.loads((exp / "search.json").read_text())["seeds"]["0"]
    assert after["deploy"] == before["deploy"] and after["rungs"] == before["rungs"]
    assert {n: b["curve"] for n, b in after["branches"].items()} == {
        n: b["curve"] for n, b in before["branches"].items()
    }
    # Another --epochs, or other data: refused naming the flag, before anything runs (issue 29, rows 1, 2).
    for argv, expected in [
        ([str(exp), "--epochs", "3", *SEARCH[2:]], "search.json records a search with --epochs 2, this one has 3"),
        ([str(exp), *SEARCH, "--data_path", "other.csv"], "--data_path (not set) -> other.csv"),
    ]:
        err = io.StringIO()
        with pytest.raises(SystemExit), redirect_stdout(io.StringIO()), redirect_stderr(err):
            search_main(argv)
        assert expected in err.getvalue()


def test_compare_names_what_the_search_deployed(searched):
    exp = searched[0]
    deploy = json.loads((exp / "search.json").read_text())["seeds"]["0"]["deploy"]
    comparison = compare_experiment(str(exp))  # issue 29, row 6
    assert comparison.search.deployed == {0: (deploy["branch"], deploy["epoch"], deploy["val_metric"])}
    cut = {row.candidate for row in comparison.search.rows if row.status[0].startswith("cut")}
    assert [p.name for p in comparison.cut] == [f"{c}-s0" for c in cut] and comparison.problems == []
    if "early" not in cut:  # a branch's first epoch is its parent's: read from its summary.json
        early = next(r for r in comparison.runs if r.name == "early-s0")
        assert early.shared_epochs == [1] and early.curve("val", "like", "auc")[1] == _summary(exp, "joint-s0")[
            "evaluations"][0]["val"]["like"]["auc"]  # fmt: skip


def test_a_damaged_record_is_rebuilt_and_a_damaged_deploy_checkpoint_is_passed_over(searched, tmp_path):
    exp = tmp_path / "exp"
    shutil.copytree(searched[0], exp)
    deploy = json.loads((exp / "search.json").read_text())["seeds"]["0"]["deploy"]
    (exp / "search.json").write_text('{"seeds": {"0": [1]}}')  # issue 29, row 12
    again = _search(exp)
    assert f"search: {exp}/search.json: budget is missing (and 7 more damaged field(s)): rebuilt" in again
    assert "training" not in again and "resuming" not in again
    rebuilt = json.loads((exp / "search.json").read_text())["seeds"]["0"]["deploy"]
    keys = ("branch", "epoch", "val_metric")
    assert tuple(rebuilt[k] for k in keys) == tuple(deploy[k] for k in keys)
    shutil.rmtree(rebuilt["checkpoint"])  # issue 29, row 11
    # Issue 35, row 2: the deploy deleted, then the next one's shard truncated: each passed over, said, never deployed.
    out = io.StringIO()
    with redirect_stdout(out):
        assert search_main([str(exp), *SEARCH]) == 0
    first = f"{rebuilt['branch']} after epoch {rebuilt['epoch']:g} (checkpoint {rebuilt['checkpoint']} is missing"
    assert f"search seed 0: not deployed: {first} (deleted?)); the next best is taken" in out.getvalue()
    second = json.loads((exp / "search.json").read_text())["seeds"]["0"]["deploy"]
    assert second["checkpoint"] != rebuilt["checkpoint"] and second["passed_over"][0]["problem"].endswith("(deleted?)")
    shard = sorted(Path(second["checkpoint"]).glob("*.distcp"))[0]
    size = shard.stat().st_size
    with open(shard, "r+b") as f:
        f.truncate(100)
    out = io.StringIO()
    with redirect_stdout(out):
        code = search_main([str(exp), *SEARCH])
    truncated = f"file {shard.name} has 100 bytes, the save wrote {size} (truncated?)"
    assert f"not deployed: {second['branch']} after epoch {second['epoch']:g} (checkpoint {second['checkpoint']}: " \
           f"{truncated}); the next best is taken" in out.getvalue()
    third = json.loads((exp / "search.json").read_text())["seeds"]["0"]
    assert code == (0 if third["deploy"] else 1) and "Traceback" not in out.getvalue()
    view = compare_experiment(str(exp)).search  # compare names the same deploy, and what it passed over
    if third["deploy"]:
        deployed = third["deploy"]
        assert view.deployed == {0: (deployed["branch"], deployed["epoch"], deployed["val_metric"])}
        assert view.passed_over[0][-1]["problem"].endswith(truncated)
    else:  # no other deployable: no decision, and why
        assert view.deployed == {} and "no deployable model whose checkpoint verifies" in view.undecided[0]


def test_too_few_steps_per_epoch_for_a_rung_are_refused_before_training(tmp_path):
    """Issue 29, row 5: with 1 step per epoch, a pause at 1.5 epochs rounds to the end of epoch 2."""
    assert pause_step(1.5, 4) == 6 and pause_step(2, 1) == 2 and pause_step(0, 1) == 0
    with pytest.raises(ValueError, match=r"--stop_at_epoch 1.3 pauses inside epoch 2, but with 1 step\(s\) per epoch"):
        pause_step(1.3, 1)
    one_step = [t if t != str(STEPS) else "1" for t in SEARCH]
    out = io.StringIO()
    with redirect_stdout(out):
        code = search_main([str(tmp_path / "exp"), *one_step])
    text = out.getvalue()
    assert code == 1 and text.count(": training, ") == 1, text  # one launch, stopped before its first step
    assert "ValueError: --stop_at_epoch 1.5 pauses inside epoch 2" in text and "--rung_fraction 1" in text
    assert not list((tmp_path / "exp").glob("joint-s0/checkpoints/step_*"))
