"""Bad search input, generated: search arguments and damaged search folders are handled as documented or
refused naming what is wrong (the style of tests/test_sweep_bad_input.py).

- Search arguments (``--epochs``, ``--seeds``, ``--candidates``, ``--eta``, ``--rung_fraction``, ``-j``,
  ``-s``, ``--env``, ``-cfg``, common flags, flags the search sets per branch), as a dry run: exit 0
  having written nothing, or argparse's exit code 2 whose message names the flag, candidate, run or
  file; never a traceback.
- Damaged search folders (a finished simulated search of 6 candidates, ``tests/search_sim.py``, whose
  ``search.json``, ``sweep.json``, branches' ``summary.json``, checkpoints or run folders are deleted,
  truncated, replaced by other JSON or changed to other flags, 1-3 damages at once), rerun: refused
  before anything runs (exit 2, nothing on disk changed) naming the file, field or flag; or stopped with
  one line naming it (exit 1); or done (exit 0), deploying what the undamaged search deployed (or the next
  best, naming the damaged checkpoint it passed over: issue 35). Never a
  traceback, never a step trained twice, and only branches whose checkpoints were lost train again.

Deterministic (``derandomize``) and bounded; ``DLRM_BAD_INPUT_EXAMPLES`` for longer runs
(docs/RELIABILITY.md lists the counts).
"""

import contextlib
import io
import json
import re
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from dlrm_multiepoch.search.command import main as search_main
from tests.fuzz_settings import CASES, folder_bytes
from tests.search_sim import COMMON, no_step_twice, run_search

# -- search arguments ------------------------------------------------------------------

_APP_FLAGS = ["--learning_rate", "--freeze_schedule", "--max_rows", "--batch_size", "--seed", "--epochs", "--reinit",
              "--start_from", "--auto_metric", "--auto_task_weights", "--val_fraction", "--nosuch_flag"]  # fmt: skip
_VALUES = st.sampled_from(["0.01", "-1", "0", "abc", "", "delayed", "auc", "like:1", "1e400", "nan", "0.2", "3"])
_COMMON = st.lists(st.tuples(st.sampled_from(_APP_FLAGS), _VALUES), max_size=2).map(
    lambda pairs: [t for flag, value in pairs for t in (flag, value)]
)
_OPTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("--epochs"), st.sampled_from(["1", "2", "3", "0", "-1", "x"])),
        st.tuples(st.just("--seeds"), st.sampled_from(["0", "0,1", "a", "", "1,1", "-1"])),
        st.tuples(st.just("--candidates"), st.sampled_from(["joint,early", "early", "nosuch", "", "window@2", "auto"])),
        st.tuples(st.just("--eta"), st.sampled_from(["1", "2", "3", "x", "-2"])),
        st.tuples(st.just("--rung_fraction"), st.sampled_from(["0", "0.3", "1", "1.5", "nan", "x", "-0.1"])),
        st.tuples(st.just("-j"), st.sampled_from(["1x2", "abc", "1x0"])),
        st.tuples(st.just("-s"), st.sampled_from(["local_cwd", "slurm", "nosuch"])),
        st.tuples(st.just("--env"), st.sampled_from(["A=1", "FOO"])),
        st.tuples(st.just("-cfg"), st.sampled_from(["foo", "log_dir=/tmp/x"])),
    ),
    max_size=3,
)


def _names_something(error: str) -> bool:
    """A refusal names the flag, candidate, run, field or file it is about."""
    return re.search(r"(^|[\s'(\[])--?[a-z]|candidate|branch|run \S|\.json|experiment_dir|field", error) is not None


@CASES
@given(_OPTIONS, _COMMON)
def test_search_arguments_are_accepted_or_refused_naming_the_flag(tmp_path: Path, options, common) -> None:
    exp = tmp_path / f"exp{time.monotonic_ns()}"
    argv = [str(exp), *[t for option in options for t in option], "--dryrun", "--", "--dataset", "movielens", *common]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = search_main(argv)
        except SystemExit as e:
            code = e.code
    assert code in (0, 2), f"{argv}: exit code {code}\n{err.getvalue()}"
    if code == 2:
        event("refused")
        last = err.getvalue().strip().splitlines()[-1]
        assert last.startswith("dlrm-multiepoch search: error: "), (argv, last)
        assert _names_something(last.split("error: ", 1)[1]), (argv, last)
    else:
        event("accepted")
        assert out.getvalue().count("=== run ") >= 1
    assert not exp.exists()  # a dry run, or a refusal: nothing written


# -- damaged search folders -------------------------------------------------------------

ARGS = ["--epochs", "3", "--", *COMMON]
_BRANCHES = ["joint-s0", "delayed-s0", "auto-s0", "early-s0", "reinit-s0", "window@1-s0"]


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    exp = tmp_path_factory.mktemp("searched") / "exp"
    code, out, _ = run_search([str(exp), *ARGS])
    assert code == 0, out
    return exp, json.loads((exp / "search.json").read_text())["seeds"]["0"]["deploy"]


def _edit_json(path: Path, how: str, edit) -> None:
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        path.write_text(path.read_text()[:40])
    elif how == "[]":
        path.write_text("[]")
    else:
        value = json.loads(path.read_text())
        edit(value)
        path.write_text(json.dumps(value))


_RECORD_EDITS = {
    "seeds_list": lambda r: r.update(seeds=[]), "seed_list": lambda r: r["seeds"].update({"0": [1]}),
    "launches": lambda r: r["seeds"]["0"]["branches"]["joint"].update(launches=3),
    "wall": lambda r: r["seeds"]["0"]["cost"].update(wall_s="abc"), "budget": lambda r: r.update(budget=5),
    "budget_text": lambda r: r.update(budget="3"), "eta": lambda r: r.update(eta=2),
    "candidates": lambda r: r.update(candidates=["joint"]), "common": lambda r: r.update(common_flags=["--x", "1"]),
    "deploy": lambda r: r["seeds"]["0"].update(deploy="x"),
    "curve": lambda r: r["seeds"]["0"]["branches"]["auto"].update(curve=[]),
    "rungs": lambda r: r["seeds"]["0"].update(rungs={}),
    "status": lambda r: r["seeds"]["0"]["branches"]["auto"].update(status=1),
}  # fmt: skip
_SUMMARY_EDITS = {
    "epochs": lambda s: s["config"].update(epochs=7), "data_path": lambda s: s["config"]["data"].update(data_path="/else"),
    "evaluations": lambda s: s.update(evaluations=[{"epoch": "x"}, 3]), "unfinished": lambda s: s.pop("wall_time_s", None),
    "started_from": lambda s: s.update(started_from={"step": "x"}), "config_str": lambda s: s.update(config="x"),
}  # fmt: skip
_DAMAGE = st.one_of(
    st.tuples(st.just("search.json"), st.sampled_from(["delete", "truncate", "[]", *_RECORD_EDITS])),
    st.tuples(st.just("sweep.json"), st.sampled_from(["delete", "truncate", "[]"])),
    st.tuples(st.sampled_from(_BRANCHES), st.sampled_from(["summary:delete", "summary:truncate", "summary:[]",
                                                           *[f"summary:{k}" for k in _SUMMARY_EDITS],
                                                           "checkpoints:delete", "checkpoint:newest", "folder:delete"])),
)  # fmt: skip


def _damage(exp: Path, target: str, how: str) -> None:
    if target == "search.json":
        _edit_json(exp / target, how, _RECORD_EDITS.get(how, lambda r: None))
    elif target == "sweep.json":
        _edit_json(exp / target, how, lambda r: None)
    else:
        kind, _, what = how.partition(":")
        folder = exp / target
        if kind == "summary":
            _edit_json(folder / "summary.json", what, _SUMMARY_EDITS.get(what, lambda s: None))
        elif kind == "checkpoints":
            shutil.rmtree(folder / "checkpoints")
        elif kind == "checkpoint":
            newest = max((folder / "checkpoints").glob("step_*"), key=lambda p: int(p.name.split("_")[1]))
            shutil.rmtree(newest)
        else:
            shutil.rmtree(folder)


def _checkpointed(exp: Path):
    """Run -> its newest checkpoint step (what a rerun must not train again)."""
    found = {}
    for run in _BRANCHES:
        steps = [int(p.name.split("_")[1]) for p in (exp / run / "checkpoints").glob("step_*")]
        found[run] = max(steps, default=0)
    return found


@CASES
@given(st.lists(_DAMAGE, min_size=1, max_size=3))
def test_damaged_search_folders_are_refused_named_or_searched_again_to_the_same_decision(searched, tmp_path, damages):
    exp = tmp_path / f"exp{time.monotonic_ns()}"
    shutil.copytree(searched[0], exp)
    for target, how in damages:
        try:
            _damage(exp, target, how)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass  # an earlier damage left nothing of that kind to damage
    before, saved = folder_bytes(exp, skip=("events.out",)), _checkpointed(exp)
    code, out, sim = run_search([str(exp), *ARGS])
    assert "Traceback" not in out
    if code == 2:
        event("refused before any launch")
        assert _names_something(out.splitlines()[-1]), (damages, out)
        assert folder_bytes(exp, skip=("events.out",)) == before
        return
    if code == 1:
        event("stopped with one line")
        last = out.rstrip().splitlines()[-1]
        assert last.startswith("search: ") and _names_something(last), (damages, out)
    else:
        assert code == 0, (damages, out)
        event("searched again")
        deploy = json.loads((exp / "search.json").read_text())["seeds"]["0"]["deploy"]
        keys = ("branch", "epoch", "val_metric")
        if tuple(deploy[k] for k in keys) != tuple(searched[1][k] for k in keys):  # never another deploy unsaid
            assert f"not deployed: {searched[1]['branch']} after epoch {searched[1]['epoch']:g}" in out, (damages, out)
    assert no_step_twice(sim.trained), (damages, sim.trained)
    assert all(a >= saved[run] for run, a, _ in sim.trained), (damages, sim.trained, saved)  # nothing trained again
