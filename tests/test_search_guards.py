"""A search as safe as the sweep (issue 29's table, rows 1-4, 7, 8, 10-13, 15), on simulated launches.

Each test runs ``dlrm-multiepoch search`` with the search's own checks, driver and launch
records, its launches simulated by ``tests/search_sim.py`` (run folders as the training app
writes them, on fixed curves; 6 candidates, 3 epochs, 10 steps per epoch). The same
paths on real TorchX launches: ``tests/test_search_runs.py``.
"""

import json
import os
import shutil
import time

import pytest

from dlrm_multiepoch.auto.objective import undefined_tasks, weighted_objective
from dlrm_multiepoch.auto.policy import AutoSchedulePolicy
from dlrm_multiepoch.auto.config import AutoScheduleConfig
from dlrm_multiepoch.report import compare_experiment
from dlrm_multiepoch.report.tables import to_markdown
from tests.fuzz_settings import folder_bytes
from tests.search_sim import COMMON, interrupt_at, no_step_twice, run_search

ARGS = ["--epochs", "3", "--", *COMMON]


def _search(exp, **launcher):
    return run_search([str(exp), *ARGS], **launcher)


def _record(exp):
    return json.loads((exp / "search.json").read_text())


def _deploy(exp):
    """The seed's deploy, its checkpoint relative to the experiment (the tests copy experiments)."""
    deploy = dict(_record(exp)["seeds"]["0"]["deploy"])
    deploy["checkpoint"] = os.path.relpath(deploy["checkpoint"], exp)
    return deploy


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A finished simulated search (deploys reinit after epoch 3), and its console."""
    exp = tmp_path_factory.mktemp("searched") / "exp"
    code, out, sim = _search(exp)
    assert code == 0 and no_step_twice(sim.trained), out
    return exp, out


def _copy(searched, tmp_path):
    exp = tmp_path / "exp"
    shutil.copytree(searched[0], exp)
    return exp


def test_the_record_says_what_the_console_says_and_a_rerun_trains_nothing(searched, tmp_path):
    exp, out = searched
    deploy = _record(exp)["seeds"]["0"]["deploy"]
    # Row 15: the metric as measured (cal_ne, lower is better), as the console and the branch's curve show it.
    assert (deploy["branch"], deploy["epoch"], deploy["metric"]) == ("reinit", 3, "cal_ne")
    assert deploy["val_metric"] == _record(exp)["seeds"]["0"]["branches"]["reinit"]["curve"]["3"] == pytest.approx(0.374)
    assert f"validation cal_ne {deploy['val_metric']:.4f};" in out
    exp = _copy(searched, tmp_path)
    code, again, sim = _search(exp)
    assert code == 0 and sim.trained == [] and sim.launch_count == 0, again
    assert _deploy(exp) == _deploy(searched[0])


def test_a_rerun_with_other_flags_is_refused_naming_the_flag_before_anything_runs(searched, tmp_path):
    exp = _copy(searched, tmp_path)
    before = folder_bytes(exp)
    for extra, common, expected in [
        (["--epochs", "4"], [], "search.json records a search with --epochs 3, this one has 4 (a schedule is laid out"),
        (["--eta", "2"], [], "search.json records a search with --eta 3, this one has 2"),
        (["--rung_fraction", "0.5"], [], "with --rung_fraction 0.3, this one has 0.5"),
        ([], ["--max_rows", "5000"], "trained with other flags after --: --max_rows (not set) -> 5000"),
    ]:
        code, message, _ = run_search([str(exp), "--epochs", "3", *extra, "--", *COMMON, *common])
        assert code == 2 and expected in message, message
    # Without search.json and sweep.json, each run folder's own record speaks for its branch (rows 1, 2).
    (exp / "search.json").unlink()
    (exp / "sweep.json").unlink()
    before = folder_bytes(exp)
    code, message, _ = run_search([str(exp), "--epochs", "4", "--", *COMMON])
    assert code == 2 and "run joint-s0 in" in message and "(joint-s0/summary.json): --epochs 4 -> 5" in message
    code, message, _ = run_search([str(exp), "--epochs", "3", "--", *COMMON, "--max_rows", "5000"])
    assert code == 2 and "--max_rows None -> 5000" in message and "search this configuration in a new" in message
    assert folder_bytes(exp) == before  # nothing launched, written or deleted


def test_a_branch_of_a_parent_trained_again_is_never_ranked(searched, tmp_path):
    exp = _copy(searched, tmp_path)
    shutil.move(exp / "joint-s0", tmp_path / "joint-s0")  # row 3: the parent deleted; rerun
    code, message, _ = _search(exp)
    assert code == 2 and f"branch {exp}/early-s0 started from {exp}/joint-s0's checkpoint after step 10" in message
    assert "is gone" in message and "Put joint-s0 back, or move early-s0 aside too" in message
    shutil.move(tmp_path / "joint-s0", exp / "joint-s0")
    summary = json.loads((exp / "joint-s0" / "summary.json").read_text())
    summary["evaluations"][0]["val"]["like"]["auc"] = 0.7  # the parent trained again on other data
    (exp / "joint-s0" / "summary.json").write_text(json.dumps(summary))
    code, message, _ = _search(exp)
    assert code == 2 and "the parent was trained again since" in message and "Move early-s0 aside" in message


def test_an_undefined_objective_never_wins_and_the_search_says_why(tmp_path):
    exp = tmp_path / "exp"
    code, out, sim = _search(exp, one_class=["love"])  # row 4: love's validation labels are of one class
    assert code == 1 and "Traceback" not in out
    reason = (
        "no decision: validation cal_ne is undefined for task(s) love in every branch compared after epoch 1.3 "
        "(labels of one class, or no rows, in the validation split): nothing to decide on. Give such a task weight 0"
    )
    assert f"search seed 0: {reason}" in out
    assert out.rstrip().endswith(f"(the reason is above and in {exp}/search.json)")
    seed = _record(exp)["seeds"]["0"]
    assert seed["deploy"] is None and seed["no_decision"].startswith(reason[len("no decision: ") :])
    trained = len(sim.trained)
    code, again, sim = _search(exp, one_class=["love"])  # a rerun says the same and trains nothing
    assert code == 1 and sim.trained == [] and reason in again and trained == 5
    # A task of weight 0 is not read (one rule with the automatic schedule): the search decides on like.
    code, out, sim = run_search(
        [str(tmp_path / "weighted"), *ARGS, "--auto_task_weights", "like:1,love:0"], one_class=["love"]
    )
    assert code == 0 and _record(tmp_path / "weighted")["seeds"]["0"]["deploy"]["branch"] == "reinit", out


def test_one_objective_for_the_automatic_schedule_and_the_search() -> None:
    """Weight-0 tasks are not read; a weighted task's undefined metric makes the objective NaN, in both."""
    val = {"like": {"cal_ne": 0.86, "auc": 0.7}, "love": {"cal_ne": None, "auc": float("nan")}}
    assert weighted_objective(val, "cal_ne", {"like": 1.0, "love": 0.0}) == -0.86
    assert weighted_objective(val, "cal_ne", {}) != weighted_objective(val, "cal_ne", {})  # NaN
    assert undefined_tasks(val, "auc", {}) == ["love"] and undefined_tasks(val, "auc", {"like": 1, "love": 0}) == []
    for weights, text in (("like:1,love:0", {"like": 1.0, "love": 0.0}), ("like:2,love:1", {"like": 2.0, "love": 1.0})):
        policy = AutoSchedulePolicy(10, 3, ["like", "love"], AutoScheduleConfig(auto_task_weights=weights))
        defined = {"like": {"cal_ne": 0.86}, "love": {"cal_ne": 0.91}}
        for metrics in (val, defined):
            a, b = policy.objective(metrics), weighted_objective(metrics, "cal_ne", text)
            assert (a == b) or (a != a and b != b)  # bitwise equal, or both undefined


@pytest.mark.parametrize("how", ["SIGINT", "SIGHUP", "SIGTERM"])
def test_an_interrupted_search_says_one_line_keeps_its_cost_and_the_rerun_continues(searched, tmp_path, how):
    exp = tmp_path / "exp"
    code, out, sim = _search(exp, on_launch=interrupt_at(3, how))  # rows 7, 8: Ctrl-C, a closed terminal, SIGTERM
    assert code == 130 and "Traceback" not in out
    assert out.rstrip().splitlines()[-1].startswith(f"search: interrupted ({how})") and "Rerun the same command" in out
    seed = _record(exp)["seeds"]["0"]
    cost, launches = seed["cost"], [launch for b in seed["branches"].values() for launch in b["launches"]]
    assert cost["launches"] == len(launches) == 3  # row 13: the interrupted invocation's launches and time
    assert all(isinstance(launch["wall_s"], float) and launch["started_at"] > 0 for launch in launches)
    trained = list(sim.trained)
    code, out, sim = _search(exp)
    assert code == 0 and no_step_twice(trained + sim.trained), out
    seed = _record(exp)["seeds"]["0"]
    assert _deploy(exp) == _deploy(searched[0])
    assert seed["cost"]["launches"] == 3 + sim.launch_count and seed["cost"]["wall_s"] >= cost["wall_s"]


def test_a_killed_invocations_launch_is_kept_in_the_cost(searched, tmp_path):
    exp = _copy(searched, tmp_path)
    record = _record(exp)
    launch = record["seeds"]["0"]["branches"]["reinit"]["launches"][-1]
    launch["wall_s"], launch["started_at"] = None, time.time() - 5.0  # what kill -9 during that launch leaves
    (exp / "search.json").write_text(json.dumps(record))
    os.utime(exp / "reinit-s0" / "summary.json")  # its trainer wrote until now
    code, out, _ = _search(exp)
    assert code == 0, out
    restored = _record(exp)["seeds"]["0"]["branches"]["reinit"]["launches"][-1]
    assert restored["estimated"] is True and 5.0 <= restored["wall_s"] < 60
    assert _record(exp)["seeds"]["0"]["cost"]["wall_s"] >= record["seeds"]["0"]["cost"]["wall_s"] + 5.0


@pytest.mark.parametrize(
    "damage, field",
    [
        (lambda r: r.update(seeds=[]), "seeds is [], expected an object"),
        (lambda r: r["seeds"]["0"].update(branches=[1]), "seeds.0.branches is [1], expected an object"),
        (lambda r: r["seeds"]["0"]["branches"]["joint"].update(launches=3), "seeds.0.branches.joint.launches is 3"),
        (lambda r: r["seeds"]["0"]["cost"].update(wall_s="abc"), "seeds.0.cost.wall_s is 'abc', expected a number"),
        (lambda r: r.update(seeds={"x": {}}), "seeds has the key 'x', expected a seed"),
        (lambda r: r.update(budget="3"), "budget is '3', expected an integer"),
    ],
)
def test_a_damaged_record_is_named_and_rebuilt_from_the_run_folders(searched, tmp_path, damage, field):
    exp = _copy(searched, tmp_path)
    record = _record(exp)
    damage(record)
    (exp / "search.json").write_text(json.dumps(record))
    code, out, sim = _search(exp)  # row 12
    assert code == 0 and sim.trained == [], out
    assert f"search: {exp}/search.json: {field}" in out and "rebuilt from the run folders" in out
    assert (exp / "search.json.damaged").read_text() == json.dumps(record)
    assert _deploy(exp) == _deploy(searched[0])


def test_a_truncated_record_and_a_missing_summary_are_rebuilt_without_training_twice(searched, tmp_path):
    exp = _copy(searched, tmp_path)
    (exp / "search.json").write_text((exp / "search.json").read_text()[:100])
    (exp / "window@1-s0" / "summary.json").unlink()  # its next launch rewrites it from its checkpoint
    (exp / "joint-s0" / "summary.json").write_text("{trunc")
    code, out, sim = _search(exp)
    assert code == 0 and "is not valid JSON (100 bytes" in out, out
    assert all(a == b for _, a, b in sim.trained) and len(sim.trained) == 0 and sim.launch_count == 2
    assert _record(exp)["seeds"]["0"]["rungs"] == _record(searched[0])["seeds"]["0"]["rungs"]


def test_a_deleted_deploy_checkpoint_is_passed_over_saying_why_and_a_damaged_summary_is_one_line(searched, tmp_path):
    exp = _copy(searched, tmp_path)
    shutil.rmtree(exp / "reinit-s0" / "checkpoints" / "step_30")  # row 11; issue 35, row 2: never deployed unsaid
    code, out, sim = _search(exp)
    assert code == 0 and "Traceback" not in out and sim.trained == [], out
    assert (
        f"search seed 0: not deployed: reinit after epoch 3 (checkpoint {exp}/reinit-s0/checkpoints/step_30 is missing "
        f"(deleted?)); the next best is taken. Move {exp}/reinit-s0 aside and rerun the same command to train that "
        "branch again"
    ) in out
    deploy = _deploy(exp)
    assert (deploy["branch"], deploy["epoch"], deploy["checkpoint"]) == ("joint", 1, "joint-s0/checkpoints/step_10")
    assert [(p["branch"], p["epoch"]) for p in deploy["passed_over"]] == [("reinit", 3)]
    summary = json.loads((exp / "auto-s0" / "summary.json").read_text())
    summary["evaluations"][1] = {"epoch": "x"}
    (exp / "auto-s0" / "summary.json").write_text(json.dumps(summary))
    code, out, _ = _search(exp)
    assert code == 1 and out.rstrip().splitlines()[-1].startswith(f"search: {exp}/auto-s0/summary.json: evaluations.1 has")


def test_a_missing_data_path_is_refused_before_anything_runs(tmp_path):
    code, message, _ = run_search([str(tmp_path / "exp"), *ARGS, "--data_path", str(tmp_path / "nope.csv")])
    assert code == 2 and f"--data_path {tmp_path}/nope.csv does not exist" in message  # row 10
    assert not (tmp_path / "exp").exists()


def test_compare_reads_a_search_folder_as_the_search_decided(searched):
    comparison = compare_experiment(str(searched[0]))  # row 6
    view = comparison.search
    assert view.deployed == {0: ("reinit", 3, pytest.approx(0.374))}
    status = {row.candidate: row.status[0] for row in view.rows}
    assert status == {
        "joint": "cut at 1.3", "delayed": "cut at 2.3", "auto": "cut at 2", "early": "cut at 2", "reinit": "deployed",
        "window@1": "cut at 1.3",
    }  # fmt: skip
    assert {p.name for p in comparison.cut} == {"joint-s0", "delayed-s0", "auto-s0", "early-s0", "window@1-s0"}
    assert comparison.problems == [] and all(t.winner is None for t in comparison.tasks)
    reinit = next(r for r in comparison.runs if r.name == "reinit-s0")
    assert reinit.shared_epochs == [1] and reinit.curve("val", "like", "auc") == pytest.approx({1: 0.61, 2: 0.625, 3: 0.636})
    report = to_markdown(comparison)
    assert "**The search deployed reinit** in seed(s) 0 (seed 0: after epoch 3, validation cal_ne 0.3740)" in report
    assert "- joint-s0: cut by the search after epoch 1.3: halving within its cohort (joint, early" in report
    assert "| joint | cut at 1.3 | 1 | 0.4000 |" in report  # joint still deploys its best validation epoch
