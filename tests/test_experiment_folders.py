"""Issue 35, deliverables 2 and 3 and rows 2, 3, 13, 15, 16, 18: experiment folders that travel, deploys that
verify, and the records of the sweep and the search.

On simulated launches (``tests/search_sim.py``: run folders as the app writes them, checkpoints with a shard
whose size and sha256 the state file records, the app's refusal of a ``--start_from`` that is not there);
the same paths on real launches: ``tests/test_search_runs.py``.
"""

import io
import json
import math
import os
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from dlrm_multiepoch.launch_options import TRAIN_MODULE
from dlrm_multiepoch.report import compare_experiment
from dlrm_multiepoch.report.tables import to_markdown
from dlrm_multiepoch.sweep.command import main as sweep_main
from dlrm_multiepoch.sweep.jobs import failure_reason
from dlrm_multiepoch.sweep.manifest import update_manifest
from dlrm_multiepoch.sweep.plan import build_plan
from dlrm_multiepoch.sweep.strategies import parse_strategy
from dlrm_multiepoch.train.config import parse_config
from tests.fuzz_settings import folder_bytes
from tests.search_sim import COMMON, SHARD, interrupt_at, no_step_twice, run_search, train

ARGS = ["--epochs", "3", "--", *COMMON]


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A finished simulated search (deploys reinit after epoch 3), never moved."""
    exp = tmp_path_factory.mktemp("searched") / "exp"
    code, out, _ = run_search([str(exp), *ARGS])
    assert code == 0, out
    return exp


def _copy(searched, tmp_path):
    exp = tmp_path / "exp"
    shutil.copytree(searched, exp)
    return exp


def _seed(exp):
    return json.loads((exp / "search.json").read_text())["seeds"]["0"]


def _view(exp):
    """What compare says of a search folder, without its paths."""
    view = compare_experiment(str(exp)).search
    return view.deployed, {r.candidate: (r.status, r.epochs) for r in view.rows}, view.cut, view.passed_over


# -- deliverable 2, row 3: folders that travel -----------------------------------------


def test_a_search_folder_moved_mid_search_continues_and_compares_as_in_place(searched, tmp_path):
    exp = tmp_path / "there" / "exp"
    code, out, sim = run_search([str(exp), *ARGS], on_launch=interrupt_at(7))  # early and reinit started at 1.3
    assert code == 130, out
    trained = list(sim.trained)
    moved = tmp_path / "here" / "exp"
    shutil.move(str(exp.parent), str(moved.parent))
    code, out, sim = run_search([str(moved), *ARGS])
    assert code == 0 and "Traceback" not in out, out
    assert no_step_twice(trained + sim.trained) and ("early-s0", 13, 20) in sim.trained  # early continued here
    deploy = _seed(moved)["deploy"]
    assert deploy["checkpoint"] == f"{moved}/reinit-s0/checkpoints/step_30"
    assert deploy["val_metric"] == _seed(searched)["deploy"]["val_metric"]
    assert _view(moved) == _view(searched)
    assert to_markdown(compare_experiment(str(moved))).replace(str(moved), "EXP") == to_markdown(
        compare_experiment(str(searched))
    ).replace(str(searched), "EXP")


def test_a_sweep_folder_moved_reruns_and_compares_as_in_place(tmp_path):
    exp = tmp_path / "there" / "exp"
    plan = build_plan(str(exp), [parse_strategy("joint"), parse_strategy("early")], [0], 2, COMMON)
    update_manifest(plan)
    for run in plan.runs:
        train(str(exp / run.name), run.strategy, run.flags, [])
    before = to_markdown(compare_experiment(str(exp))).replace(str(exp), "EXP")
    moved = tmp_path / "here" / "exp"
    shutil.move(str(exp.parent), str(moved.parent))
    out = io.StringIO()
    with redirect_stdout(out):
        assert sweep_main([str(moved), "joint", "early", "--epochs", "2", "--", *COMMON]) == 0
    assert out.getvalue().count("finished earlier") == 2 and "training" not in out.getvalue()
    assert to_markdown(compare_experiment(str(moved))).replace(str(moved), "EXP") == before


def test_a_launch_the_app_refuses_for_a_path_is_one_line_naming_it(tmp_path):
    """What a moved folder's launch would meet (a --start_from left where the folder was): the app's parser
    refuses it; the sweep's failure line is that refusal, not torchrun's ChildFailedError block."""
    gone = tmp_path / "old" / "joint-s0" / "checkpoints" / "step_10"
    err = io.StringIO()
    with pytest.raises(SystemExit) as refused, redirect_stderr(err):  # what the app runs first on each rank
        parse_config(["--dataset", "movielens", "--start_from", str(gone)], check_paths=True, prog=f"python -m {TRAIN_MODULE}")
    log = tmp_path / "combined.log"
    log.write_text("".join(f"[default0]:{line}\n" for line in err.getvalue().splitlines()) + (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    ))  # fmt: skip
    assert refused.value.code == 2 and failure_reason(str(log)) == (
        f"the training app refused its flags: --start_from '{gone}': no such checkpoint folder (a run's "
        "checkpoints/step_N)"
    )


# -- deliverable 3, row 2: deploy only what verifies ------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "emptied", "deleted", "state"])
def test_a_damaged_deploy_checkpoint_is_passed_over_saying_why_in_search_and_compare(searched, tmp_path, damage):
    exp = _copy(searched, tmp_path)
    folder = exp / "reinit-s0" / "checkpoints" / "step_30"
    shard, size = folder / SHARD, (folder / SHARD).stat().st_size
    why = {
        "truncated": f"file {SHARD} has 100 bytes, the save wrote {size} (truncated?)",
        "emptied": f"file {SHARD} has 0 bytes, the save wrote {size} (truncated?)",
        "deleted": f"file {SHARD} is missing", "state": "trainer_state.json is not valid JSON",
    }[damage]  # fmt: skip
    if damage == "deleted":
        shard.unlink()
    elif damage == "state":
        (folder / "trainer_state.json").write_text("{trunc")
    else:
        with open(shard, "r+b") as f:
            f.truncate(100 if damage == "truncated" else 0)
    code, out, sim = run_search([str(exp), *ARGS])
    assert code == 0 and sim.trained == [] and "Traceback" not in out, out
    line = next(li for li in out.splitlines() if "not deployed:" in li)
    assert line.startswith(f"search seed 0: not deployed: reinit after epoch 3 (checkpoint {folder}") and why in line
    assert line.endswith(f"the next best is taken. Move {exp}/reinit-s0 aside and rerun the same command to train "
                         "that branch again")  # fmt: skip
    deploy = _seed(exp)["deploy"]
    assert (deploy["branch"], deploy["epoch"]) == ("joint", 1) and why in deploy["passed_over"][0]["problem"]
    deployed, rows, _, passed = _view(exp)
    assert deployed == {0: ("joint", 1, deploy["val_metric"])} and why in passed[0][0]["problem"]
    assert rows["reinit"][0] == {0: "finished, its checkpoint fails verification"}
    assert f"Seed 0: not deployed: reinit after epoch 3 (checkpoint {folder}" in to_markdown(compare_experiment(str(exp)))


# -- rows 13, 15, 16, 18: the records -----------------------------------------------------


def test_a_rerun_on_other_ranks_is_refused_naming_j(searched, tmp_path, capsys):
    """Row 13: -j is recorded in search.json and sweep.json; another number of ranks is refused naming -j (the
    same number on other nodes is the same training); without the record, each run's own world_size refuses it."""
    exp = _copy(searched, tmp_path)
    assert json.loads((exp / "search.json").read_text())["j"] == "1x2"
    before = folder_bytes(exp)
    code, message, _ = run_search([str(exp), "-j", "1x1", *ARGS])
    assert folder_bytes(exp) == before
    assert code == 2 and message.startswith(f"{exp}/search.json records -j 1x2 (2 ranks), this launch has -j 1x1 "
                                            "(1 rank): a run continued on other ranks reads its rows")  # fmt: skip
    assert message.endswith("Rerun with -j 1x2, or search this configuration in a new experiment folder")
    code, out, sim = run_search([str(exp), "-j", "2x1", *ARGS])
    assert code == 0 and sim.trained == [], out
    sweep = tmp_path / "sweep"
    plan = build_plan(str(sweep), [parse_strategy("joint")], [0], 2, COMMON)
    update_manifest(plan, j="1x2")
    train(str(sweep / "joint-s0"), "joint", plan.runs[0].flags, [])
    argv = [str(sweep), "joint", "--epochs", "2", "-j", "1x1", "--", *COMMON]
    for record in ("sweep.json", "summary.json"):
        if record == "summary.json":  # no -j recorded: the run's own world size speaks
            manifest = json.loads((sweep / "sweep.json").read_text())
            del manifest["j"]
            (sweep / "sweep.json").write_text(json.dumps(manifest))
            summary = json.loads((sweep / "joint-s0" / "summary.json").read_text())
            (sweep / "joint-s0" / "summary.json").write_text(json.dumps({**summary, "world_size": 2}))
        with pytest.raises(SystemExit):
            sweep_main(argv)
        message = capsys.readouterr().err.strip().splitlines()[-1]
        expected = "sweep.json records -j 1x2 (2 ranks)" if record == "sweep.json" else "run joint-s0 trained on 2 ranks"
        assert expected in message and "this launch has -j 1x1" in message, message


@pytest.mark.parametrize(
    "field, value, damage",
    [
        ("budget", "-1", "budget is -1, expected a positive integer"),
        ("rung_fraction", "NaN", "rung_fraction is NaN, expected a number"),
        ("eta", "1", "eta is 1, expected an integer >= 2"),
        ("candidates", '["joint", "nosuch"]', "candidates holds 'nosuch', expected candidates of the search"),
        ("metric", '"accuracy"', "metric is 'accuracy', expected one of auc, logloss, ne, cal_ne"),
    ],
)
def test_impossible_values_in_search_json_are_damage_rebuilt_from_the_run_folders(searched, tmp_path, field, value,
                                                                                 damage):  # fmt: skip
    """Row 15: values of the right type that no search can have are rebuilt, never "rerun it with --epochs -1"."""
    exp = _copy(searched, tmp_path)
    record = json.loads((exp / "search.json").read_text())
    record[field] = json.loads(value)  # Python's json reads (and writes) NaN, as a hand edit leaves it
    (exp / "search.json").write_text(json.dumps(record))
    code, out, sim = run_search([str(exp), *ARGS])
    assert code == 0 and sim.trained == [] and "Rerun it with" not in out, out
    assert f"search: {exp}/search.json: {damage}" in out and "rebuilt from the run folders" in out
    rebuilt = json.loads((exp / "search.json").read_text())
    assert rebuilt[field] == json.loads((searched / "search.json").read_text())[field]
    assert rebuilt["seeds"]["0"]["deploy"]["val_metric"] == _seed(searched)["deploy"]["val_metric"]
    assert not isinstance(rebuilt[field], float) or math.isfinite(rebuilt[field])


def test_two_searches_into_one_folder_count_both_writers_launches(searched, tmp_path):
    """Row 16: a second search (seeds 0 and 1) runs to its end while the first is in its first launch; the
    first then finishes: search.json keeps both writers' launches of seed 0, and the second's seed 1."""
    exp = tmp_path / "exp"
    second = {}

    def other_search(n, run):
        if n == 1:
            code, out, sim = run_search([str(exp), "--seeds", "0,1", *ARGS])
            assert code == 0, out
            second["seed0"] = _seed(exp)["cost"]["launches"]

    code, out, sim = run_search([str(exp), *ARGS], on_launch=other_search)
    assert code == 0, out
    record = json.loads((exp / "search.json").read_text())
    assert sorted(record["seeds"]) == ["0", "1"]
    launches = [launch for b in record["seeds"]["0"]["branches"].values() for launch in b["launches"]]
    assert record["seeds"]["0"]["cost"]["launches"] == len(launches) == second["seed0"] + sim.launch_count - 1
    assert len({(launch["started_at"], launch["to_epoch"]) for launch in launches}) == len(launches)
    assert record["seeds"]["0"]["deploy"]["val_metric"] == _seed(searched)["deploy"]["val_metric"]


def test_a_sweep_into_a_search_folder_is_refused_saying_it_is_a_search(searched, tmp_path, capsys):
    """Row 18: refused naming the folder as a search's, not a flag the user never gave."""
    exp = _copy(searched, tmp_path)
    before = folder_bytes(exp)
    with pytest.raises(SystemExit) as refused:
        sweep_main([str(exp), "joint", "--epochs", "3", "--", *COMMON])
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert refused.value.code == 2 and message.endswith(
        f"{exp} is a schedule search's folder (it holds search.json): its run folders are the search's branches, "
        f"not a sweep's runs. Sweep into another experiment folder; rerun the search with dlrm-multiepoch search, "
        f"or compare it with dlrm-multiepoch compare {exp}"
    ) and "--keep_checkpoints" not in message  # fmt: skip
    assert folder_bytes(exp) == before
