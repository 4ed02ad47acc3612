"""A messy world, generated (issue 35, deliverable 6 for data, folders and checkpoints): a search folder, finished
or interrupted, whose data source changed in place, which was moved, or whose checkpoints lost a file, were
truncated at any offset or emptied; rerun (the style of ``tests/test_search_bad_input.py``).

Each case (1-3 faults at once) ends one of three ways, never with a traceback:

- **refused before anything runs** (exit 2, nothing on disk changed) naming the file, flag or run; a change of
  the data every branch trained on is always refused so;
- **stopped with one line** (exit 1) naming what it is about;
- **done** (exit 0), deploying what the search of the undamaged folder deploys, or the next best with a line
  naming each better checkpoint it passed over and why: never another deploy unsaid.

And never a step trained twice: a rerun trains no step up to a branch's newest intact checkpoint (steps after
a damaged one are lost work, trained again). The launches are simulated (``tests/search_sim.py``: the app's
records, its checkpoint verification, its refusal to resume onto other data), the data a tiny CSV.

Deterministic (``derandomize``) and bounded (``tests/fuzz_settings.py``); ``DLRM_BAD_INPUT_EXAMPLES`` for the
long run whose counts docs/RELIABILITY.md gives.
"""

import json
import re
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from dlrm_multiepoch.run_files import checkpoint_problem, checkpoints_dir, complete_checkpoints
from tests.fuzz_settings import CASES, folder_bytes
from tests.search_sim import interrupt_at, no_step_twice, run_search
from tests.test_data_identity import write_events

BRANCHES = ["joint-s0", "delayed-s0", "auto-s0", "early-s0", "reinit-s0", "window@1-s0"]
_INTERRUPTED_AT = {"finished": None, "after 4 launches": 4, "after 8 launches": 8}


def _argv(exp: Path, data: Path) -> list:
    return [str(exp), "--epochs", "3", "--", "--dataset", "interactions", "--data_path", str(data),
            "--val_fraction", "0.1", "--cache_dir", str(data.parent / "cache")]  # fmt: skip


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """Search folders of one CSV: finished, and interrupted at two points; and the undamaged search's deploy."""
    root = tmp_path_factory.mktemp("faults")
    data = root / "events.csv"
    write_events(data)
    folders = {}
    for name, at in _INTERRUPTED_AT.items():
        exp = root / name.replace(" ", "_") / "exp"
        code, out, _ = run_search(_argv(exp, data), **({"on_launch": interrupt_at(at)} if at else {}))
        assert code == (0 if at is None else 130), out
        folders[name] = exp
    deploy = json.loads((folders["finished"] / "search.json").read_text())["seeds"]["0"]["deploy"]
    return data, folders, deploy


_DATA_CHANGES = ["labels", "rows added", "rows removed", "ids"]
_FILE_DAMAGE = ["deleted", "emptied", "truncated"]
_FAULT = st.one_of(
    st.tuples(st.just("data"), st.sampled_from(_DATA_CHANGES), st.integers(1, 50)),
    st.tuples(st.just("moved"), st.just(""), st.just(0)),
    st.tuples(st.sampled_from(BRANCHES), st.sampled_from(_FILE_DAMAGE), st.integers(0, 10**6)),
    st.tuples(st.just("deploy"), st.sampled_from(_FILE_DAMAGE), st.integers(0, 10**6)),  # the checkpoint deployed
)


def _change_data(data: Path, how: str, n: int) -> None:
    head, *rows = data.read_text().splitlines()
    picked = sorted({(n * 7919 * (k + 1)) % len(rows) for k in range(max(1, n % 9))})  # rows n decides
    if how == "labels":
        for i in picked:
            rows[i] = rows[i][:-1] + ("1" if rows[i][-1] == "0" else "0")
    elif how == "rows added":
        rows += [f"u{n},i{n},{n % 2}"]
    elif how == "rows removed":
        rows = [r for i, r in enumerate(rows) if i not in picked]
    else:  # one user's id renamed everywhere: the same rows and labels, other ids
        user = rows[picked[0]].split(",")[0]
        rows = [re.sub(rf"^{user},", f"{user}x,", r) for r in rows]
    data.write_text("\n".join([head, *rows]) + "\n")


def _damage_file(exp: Path, branch: str, how: str, n: int, deploy: str) -> str:
    """Delete, empty or truncate (at an offset ``n`` decides) one file of one of ``branch``'s checkpoints (branch
    ``deploy``: of the checkpoint the undamaged search deploys, when the folder has it)."""
    saved = [Path(p) for _, p in complete_checkpoints(checkpoints_dir(str(exp / branch)))]
    saved += sorted((exp / branch / "checkpoints").glob("best_step_*"))
    if branch == "deploy":
        saved = [exp / deploy] if (exp / deploy).is_dir() else []
    files = sorted(f for folder in saved for f in folder.iterdir() if f.is_file())
    if not files:
        return "nothing to damage"
    file = files[n % len(files)]
    if how == "deleted":
        file.unlink()
    else:
        size = file.stat().st_size
        with open(file, "r+b") as f:
            f.truncate(0 if how == "emptied" else n % max(size, 1))
    return f"{file.relative_to(exp)} {how}"


def _intact_steps(exp: Path) -> dict:
    """Each branch's newest intact checkpoint step: what a rerun must never train again."""
    found = {}
    for run in BRANCHES:
        intact = [s for s, p in complete_checkpoints(checkpoints_dir(str(exp / run))) if checkpoint_problem(p) is None]
        found[run] = max(intact, default=0)
    return found


def _names_something(line: str) -> bool:
    return re.search(r"--?[a-z]|\.json|\.csv|checkpoint|branch|run \S|folder|step_", line) is not None


@CASES
@given(st.sampled_from(list(_INTERRUPTED_AT)), st.lists(_FAULT, min_size=1, max_size=3))
def test_a_search_rerun_after_its_world_changed_is_refused_named_or_deploys_what_it_should(bases, tmp_path, base,
                                                                                             faults):  # fmt: skip
    data_0, folders, reference = bases
    case = tmp_path / f"case{time.monotonic_ns()}"
    exp = case / "exp"
    shutil.copytree(folders[base], exp)
    deploy_folder = str(Path(reference["checkpoint"]).relative_to(folders["finished"]))
    original = data_0.read_bytes()  # the runs recorded data_0's path: a change is made to that file, undone after
    try:
        done, data_changed = [], False
        for target, how, n in faults:
            if target == "data":
                _change_data(data_0, how, n)
                data_changed = data_0.read_bytes() != original
                done.append(f"data {how}")
            elif target == "moved":
                moved = case / f"moved{len(done)}" / "exp"
                shutil.move(str(exp), str(moved))
                exp = moved
                done.append("moved")
            else:
                done.append(_damage_file(exp, target, how, n, deploy_folder))
        before, intact = folder_bytes(exp, skip=("events.out",)), _intact_steps(exp)
        code, out, sim = run_search(_argv(exp, data_0))
    finally:
        data_0.write_bytes(original)
    assert "Traceback" not in out, (done, out)
    last = out.rstrip().splitlines()[-1] if out.strip() else ""
    if code == 2:
        event("refused before any launch" + (" (data changed)" if data_changed else ""))
        assert _names_something(last), (done, out)
        assert folder_bytes(exp, skip=("events.out",)) == before, done
        return
    assert not data_changed, (done, code, out)  # a change of the data its branches trained on is always refused
    if code == 1:
        event("stopped with one line")
        assert last.startswith("search: ") and _names_something(last), (done, out)
    else:
        assert code == 0, (done, out)
        deploy = json.loads((exp / "search.json").read_text())["seeds"]["0"]["deploy"]
        assert checkpoint_problem(deploy["checkpoint"]) is None, (done, deploy)  # only what verifies is deployed
        same = (deploy["branch"], deploy["epoch"]) == (reference["branch"], reference["epoch"])
        event("done, the same deploy" if same else "done, the next best, saying why")
        if not same:  # never another deploy unsaid
            assert f"not deployed: {reference['branch']} after epoch {reference['epoch']:g} (" in out, (done, out)
        else:
            assert deploy["val_metric"] == reference["val_metric"], (done, out)
    assert no_step_twice(sim.trained), (done, sim.trained)
    assert all(start >= intact[run] for run, start, _ in sim.trained), (done, sim.trained, intact)
