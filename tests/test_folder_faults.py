"""Faults of the world, generated (issue 35, deliverable 6; the style of ``tests/test_search_bad_input.py``): every
file of a search folder and of its branches' run folders (and of a sweep folder) damaged; a disk that fills at
any write; a folder made read-only.

- **Damaged files** (1-2 at once): any file deleted, truncated at any offset, emptied, replaced by JSON of the
  wrong shape (``{}``, ``[]``, a string, a number, ``null``), or one field anywhere in it replaced by ``{}``,
  ``[]``, a string for a number, ``NaN``, a negative or an unknown name. ``compare`` on the folder, then the
  same search again: never a traceback; ``compare`` names what the search deployed only where the run folders
  still give it (else it says why), leaves out what it cannot read naming it, or refuses in one line; the
  search is refused before anything runs (exit 2, nothing on disk changed) naming the file or flag, or stops
  with one line naming it (exit 1), or ends deploying what the undamaged search deployed (or, when that
  checkpoint fails verification, the next best, saying so). Never a step saved before trained again.
- **A full disk** at the N-th file a search writes (an injected ``ENOSPC``: ``tests/fs_faults.py``; the real
  tmpfs is in ``tests/test_environment_faults.py``), for N over every write of a whole search: one line
  naming the file; the disk freed, the rerun deploys what the undamaged search deploys, nothing saved trained
  twice. Likewise every write of ``compare``: its table printed, one line naming the file.
- **A read-only folder**: the experiment folder, a branch's folder or its checkpoints: refused before
  anything runs, or one line naming the folder, or done (nothing needed writing there); made writable again,
  the rerun ends as the undamaged search.

Searches run on simulated launches (``tests/search_sim.py``), one finished search made per module and copied
per case. Deterministic (``derandomize``) and bounded; ``DLRM_BAD_INPUT_EXAMPLES`` for longer runs
(docs/RELIABILITY.md lists the counts).
"""

import json
import math
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from dlrm_multiepoch.report import compare_experiment
from dlrm_multiepoch.run_files import checkpoints_dir, complete_checkpoints
from tests.fs_faults import FullDiskAt, read_only
from tests.fuzz_settings import CASES, EXAMPLES, folder_bytes
from tests.run_writer import manifest, run_compare, write_run
from tests.search_sim import ARGS, deployed, finished_search, interrupt_at, no_step_twice, read_state, run_search

BRANCHES = ["joint-s0", "delayed-s0", "auto-s0", "early-s0", "reinit-s0", "window@1-s0"]
# What a field is replaced by: other shapes, a string for a number, NaN, a negative, an unknown name.
FIELD_VALUES = [{}, [], "abc", math.nan, -1, "nosuch"]
FILE_VALUES = ["{}", "[]", '"x"', "3", "null"]
# The cases that rerun a whole search (about a second each) run a share of DLRM_BAD_INPUT_EXAMPLES.
HALF, QUARTER = settings(CASES, max_examples=max(EXAMPLES // 2, 1)), settings(CASES, max_examples=max(EXAMPLES // 4, 1))


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A finished simulated search, its deploy, and its files (relative paths)."""
    exp = finished_search(tmp_path_factory)
    return exp, deployed(exp), sorted(str(p.relative_to(exp)) for p in exp.rglob("*") if p.is_file())


def _names_something(line: str) -> bool:
    """A refusal or a stop names the file, field, folder, flag, run or branch it is about."""
    return re.search(r"(/|\.json|--[a-z]|branch|run \S|field|EXPERIMENT_DIR)", line) is not None


# -- damaged files --------------------------------------------------------------------------


def _json_paths(value: Any, path: Tuple[Any, ...] = ()) -> List[Tuple[Any, ...]]:
    """Every path to a value inside a JSON document (the document itself excluded)."""
    found: List[Tuple[Any, ...]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        found.append((*path, key))
        found += _json_paths(child, (*path, key))
    return found


def _kind(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    return "events" if base.startswith("events.out") else base


@st.composite
def _damage(draw, files: List[str]) -> Tuple[str, str, Any]:
    """``(file, how, detail)``: a file of the folder and what happens to it (each kind of file as likely: the
    record, the manifest, a summary, a checkpoint's state, an event file, the manifest's lock)."""
    kinds = sorted({_kind(f) for f in files})
    kind = draw(st.sampled_from(kinds))
    name = draw(st.sampled_from([f for f in files if _kind(f) == kind]))
    kinds = ["delete", "truncate", "empty"] + (["file", "field"] if name.endswith(".json") else [])
    how = draw(st.sampled_from(kinds))
    if how == "truncate":
        return name, how, draw(st.floats(0, 1, exclude_max=True))
    if how == "file":
        return name, how, draw(st.sampled_from(FILE_VALUES))
    if how == "field":
        return name, how, (draw(st.integers(0, 10**6)), draw(st.sampled_from(range(len(FIELD_VALUES)))))
    return name, how, None


def _apply(exp: Path, name: str, how: str, detail: Any) -> str:
    """Damage one file; returns what was done (for the statistics), or "" when an earlier damage left nothing."""
    path = exp / name
    if not path.is_file():
        return ""
    if how == "delete":
        path.unlink()
    elif how in ("truncate", "empty"):
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * detail)] if how == "truncate" else b"")
    elif how == "file":
        path.write_text(detail)
    else:
        try:
            document = json.loads(path.read_text())
        except ValueError:
            return ""
        paths = _json_paths(document)
        if not paths:
            return ""
        # A top-level field, then a path inside it: each field as likely, whatever its size (config is large).
        tops = sorted({p[0] for p in paths}, key=str)
        top = tops[detail[0] % len(tops)]
        inside = [p for p in paths if p[0] == top]
        where, value = inside[(detail[0] // len(tops)) % len(inside)], FIELD_VALUES[detail[1]]
        parent = document
        for key in where[:-1]:
            parent = parent[key]
        parent[where[-1]] = value
        path.write_text(json.dumps(document))  # NaN as Python's json writes it: a token strict readers refuse
    return f"{_kind(name)}: {how}"


def _saved(exp: Path) -> Dict[str, int]:
    """Branch -> the step of its newest intact checkpoint (what a rerun must not train again)."""
    found = {}
    for run in BRANCHES:
        intact = [s for s, p in complete_checkpoints(checkpoints_dir(str(exp / run))) if read_state(p) is not None]
        found[run] = max(intact, default=0)
    return found


def _check_compare(exp: Path, deploy: Tuple[Any, ...], damages) -> None:
    """``compare`` on a damaged search folder: no traceback; what it says the search deployed is what it did, or
    it says why not; a refusal is one line naming the file or field."""
    code, out, err = run_compare(str(exp), "--no-hparams")
    assert "Traceback" not in out + err and code in (0, 1, 2), (damages, code, err)
    if code == 2:
        event("compare: refused naming it")
        assert _names_something(err.rstrip().splitlines()[-1]), (damages, err)
        return
    passed_over = f"Seed 0: not deployed: {deploy[0]} after epoch {deploy[1]:g} ("  # its checkpoint fails verification
    if f"The search deployed {deploy[0]}** in seed(s) 0 (seed 0: after epoch {deploy[1]:g}," in out:
        event("compare: names the same deploy")
    elif "The search deployed " in out:
        event("compare: names the next deploy, saying why")
        assert passed_over in out, (damages, out)
    else:
        event("compare: says why it names no deploy")
        assert re.search(r"Seed 0: no decision: .+|record is damaged|search.json is damaged", out), (damages, out)


@HALF
@given(st.data())
def test_a_damaged_search_folder_is_compared_and_searched_again_or_named(searched, tmp_path, data):
    exp, deploy, files = searched
    damages = data.draw(st.lists(_damage(files), min_size=1, max_size=2), label="damages")
    case = tmp_path / f"exp{time.monotonic_ns()}"
    shutil.copytree(exp, case)
    for damage in damages:
        done = _apply(case, *damage)
        if done:
            event(done)
    _check_compare(case, deploy, damages)
    before, saved = folder_bytes(case, skip=("events.out",)), _saved(case)
    code, out, sim = run_search([str(case), *ARGS])
    assert "Traceback" not in out and code in (0, 1, 2), (damages, code, out)
    last = out.rstrip().splitlines()[-1]
    if code == 2:
        event("search: refused before anything runs")
        assert _names_something(last) and folder_bytes(case, skip=("events.out",)) == before, (damages, out)
        return
    if code == 1:
        event("search: stopped with one line")
        assert last.startswith("search: ") and _names_something(last), (damages, out)
    elif deployed(case) == deploy:
        event("search: deployed as the undamaged search")
    else:
        event("search: deployed the next, saying why")  # the undamaged deploy's checkpoint fails verification
        assert f"not deployed: {deploy[0]} after epoch {deploy[1]:g} (" in out, (damages, out)
    assert no_step_twice(sim.trained), (damages, sim.trained)
    assert all(a >= saved[run] for run, a, _ in sim.trained), (damages, sim.trained, saved)  # nothing saved trained again


def _sweep_folder(exp: Path) -> None:
    """A finished sweep of three strategies (delayed wins on validation), as the app and ``sweep`` write it."""
    runs = [("joint-s0", "joint", 0, 2), ("delayed-s0", "delayed", 0, 2), ("reinit-s0", "reinit", 0, 2)]
    for i, (name, *_) in enumerate(runs):
        write_run(exp / name, [0.70 + 0.005 * i, 0.71 + 0.01 * i], val_auc=[0.69 + 0.01 * (i % 2), 0.70 + 0.02 * (i % 2)])
    manifest(exp, runs)


@CASES
@given(st.data())
def test_a_damaged_sweep_folder_is_compared_naming_what_it_leaves_out(tmp_path, data):
    """A sweep's folder (run folders and ``sweep.json``): ``compare`` never a traceback; its winner is the
    undamaged one's unless it names a run it left out (or refuses in one line)."""
    exp = tmp_path / f"exp{time.monotonic_ns()}"
    _sweep_folder(exp)
    files = sorted(str(p.relative_to(exp)) for p in exp.rglob("*") if p.is_file())
    damages = data.draw(st.lists(_damage(files), min_size=1, max_size=2), label="damages")
    for damage in damages:
        done = _apply(exp, *damage)
        if done:
            event(done)
    code, out, err = run_compare(str(exp), "--no-hparams")
    assert "Traceback" not in out + err and code in (0, 1, 2), (damages, code, err)
    if code == 2:
        event("refused naming it")
        assert _names_something(err.rstrip().splitlines()[-1]), (damages, err)
        return
    comparison = compare_experiment(str(exp))
    winners = {r.name for task in comparison.tasks for r in comparison.runs if r.strategy == task.winner}
    if winners == {"delayed-s0"}:
        event("the same winner")
    else:
        event("another verdict, saying why")
        assert "Runs left out:" in out or "no winner" in out, (damages, out)


# -- a full disk at any write ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def search_writes(tmp_path_factory) -> int:
    """How many files a whole search opens for writing (the writes the disk may fill at)."""
    exp = tmp_path_factory.mktemp("counted") / "exp"
    with FullDiskAt(exp) as disk:
        code, out, _ = run_search([str(exp), *ARGS])
    assert code == 0 and disk.opened > 50, out
    return disk.opened


@QUARTER
@given(st.data())
def test_a_disk_that_fills_at_any_write_of_a_search_is_one_line_and_the_rerun_continues(searched, search_writes, tmp_path, data):
    at = data.draw(st.integers(1, search_writes), label="the write the disk fills at")
    exp = tmp_path / f"exp{time.monotonic_ns()}"
    with FullDiskAt(exp, at=at):
        code, out, sim = run_search([str(exp), *ARGS])
    assert "Traceback" not in out and code == 1, (at, out)
    last = out.rstrip().splitlines()[-1]
    assert last.startswith("search: ") and "the disk is full (No space left on device); free space" in last, (at, out)
    event("named " + re.sub(r"^search: .*/(\S+?): the disk.*", r"\1", last))
    first = list(sim.trained) if sim is not None else []
    code, out, sim = run_search([str(exp), *ARGS])
    assert code == 0 and deployed(exp) == searched[1], (at, out)
    assert no_step_twice(first + sim.trained), (at, first, sim.trained)


def test_a_disk_that_fills_at_any_write_of_compare_prints_the_table_and_one_line(tmp_path):
    """Every file compare writes (its report under ``--out``, the HParams beside the runs), the disk full from it."""
    exp, out = tmp_path / "exp", tmp_path / "report"
    _sweep_folder(exp)
    with FullDiskAt(tmp_path) as disk:
        assert run_compare(str(exp), "--out", str(out))[0] == 0
    assert disk.opened == 3 + 1 + 3  # comparison.md, .csv, test_auc.png; HParams: the experiment, each run
    for at in range(1, disk.opened + 1):
        with FullDiskAt(tmp_path, at=at):
            code, table, err = run_compare(str(exp), "--out", str(out))
        assert code == 1 and "delayed wins on validation" in table and "Traceback" not in err, (at, err)
        full = rf"compare: {tmp_path}/\S+: the disk is full \(No space left on device\); free space, then rerun the same command\n"
        assert re.fullmatch(full, err), (at, err)


# -- a read-only folder ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A search stopped by Ctrl-C at its sixth launch (what a rerun has left to train), and what it trained."""
    exp = tmp_path_factory.mktemp("interrupted") / "exp"
    code, out, sim = run_search([str(exp), *ARGS], on_launch=interrupt_at(6))
    assert code == 130, out
    return exp, list(sim.trained)


@QUARTER
@given(st.sampled_from(["", *BRANCHES]), st.sampled_from(["", "checkpoints"]))
def test_a_read_only_folder_is_refused_named_or_needs_no_write_and_the_rerun_continues(
    searched, interrupted, tmp_path, run, under
):  # fmt: skip
    """An interrupted search's folder, a branch's folder or its checkpoints made read-only, then rerun."""
    exp = tmp_path / f"exp{time.monotonic_ns()}"
    shutil.copytree(interrupted[0], exp)
    folder = exp / run / under if run else exp
    if not folder.is_dir():
        folder.mkdir(parents=True)  # a branch not trained yet: its folder made (read-only) before it
    with read_only(folder):
        before = folder_bytes(exp, skip=("events.out",))
        code, out, sim = run_search([str(exp), *ARGS])
    assert "Traceback" not in out and code in (0, 1, 2), out
    last = out.rstrip().splitlines()[-1]
    if code == 2:
        event("refused before anything runs")
        assert _names_something(last) and folder_bytes(exp, skip=("events.out",)) == before, out
    elif code == 1:
        event("one line")
        assert last.startswith("search: ") and _names_something(last), out
    else:
        event("done: nothing to write there")
    trained = interrupted[1] + (list(sim.trained) if sim is not None else [])
    code, out, sim = run_search([str(exp), *ARGS])
    assert code == 0 and deployed(exp) == searched[1], out
    assert no_step_twice(trained + sim.trained), (trained, sim.trained)
