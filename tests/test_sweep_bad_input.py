"""Bad sweep input, generated: sweep arguments and damaged experiment folders are handled as documented
or refused before any run, naming what is wrong (the style of tests/test_bad_input.py).

- Sweep arguments (strategies, free strategies' flags, ``--epochs``, ``--seeds``, ``--windows``, ``-j``,
  ``-s``, ``--env``, ``-cfg``, ``--group``, common flags), as a dry run: exit 0 having written nothing,
  or argparse's exit code 2 whose message names the flag, strategy, run or file; never a traceback.
- Damaged experiment folders (a finished 2-run experiment with ``sweep.json``, ``summary.json``,
  checkpoints and lock files damaged, removed or changed): the checks refuse naming the file or flag,
  or every run gets a state (``new``/``running``/``finished``/``resumable``/``stale``) that matches
  what is on disk: a run with a live trainer is ``running``, an intact finished run is ``finished``;
  and nothing on disk is changed or deleted.

Deterministic (``derandomize``) and bounded; ``DLRM_BAD_INPUT_EXAMPLES`` for longer runs
(docs/RELIABILITY.md lists the counts).
"""

import contextlib
import io
import json
import os
import re
import shutil
import socket
import time
from pathlib import Path
from typing import Dict

from hypothesis import event, given
from hypothesis import strategies as st

from dlrm_multiepoch.lock_holder import STALE_AFTER_S
from dlrm_multiepoch.run_files import LOCK_FILE
from dlrm_multiepoch.sweep import build_plan, parse_strategy, run_state
from dlrm_multiepoch.sweep.command import main as sweep_main
from dlrm_multiepoch.sweep.manifest import check_experiment, update_manifest
from dlrm_multiepoch.train.config import parse_config
from tests.fuzz_settings import CASES, folder_bytes

# -- sweep arguments ------------------------------------------------------------------

_APP_FLAGS = ["--learning_rate", "--freeze_schedule", "--max_rows", "--batch_size", "--seed", "--epochs", "--run_name",
              "--embedding_dim", "--val_fraction", "--model", "--no-checkpoint", "--nosuch_flag"]  # fmt: skip
_VALUES = st.sampled_from(["0.01", "-1", "0", "abc", "", "delayed", "joint", "auto", "1e400", "nan", "multipath", "3"])
_FLAGS = st.lists(st.tuples(st.sampled_from(_APP_FLAGS), _VALUES), max_size=3).map(
    lambda pairs: [t for flag, value in pairs for t in ([flag] if flag.startswith("--no-") else [flag, value])]
)
_NAMES = st.sampled_from(["x", "y2", "a b", "", "-x", "ü", "late", "x/y"])
_STRATEGY = st.one_of(
    st.sampled_from(["joint-1ep", "joint", "delayed"]),  # mostly valid sweeps, with one thing wrong at a time
    st.sampled_from(["joint-1ep", "joint", "early", "delayed", "auto", "no-cross-grad", "nosuch", "falr"]),
    st.builds(lambda name, flags: f"{name}={' '.join(flags)}", _NAMES, _FLAGS),
    st.builds(lambda name, text: f"{name}={text}", _NAMES, st.sampled_from(["'unclosed", "delayed", "--x 'a b'"])),
)
_OPTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("--epochs"), st.sampled_from(["1", "2", "0", "-1", "x", "3"])),
        st.tuples(st.just("--seeds"), st.sampled_from(["0", "0,1", "a", "", "1,,2", "-1"])),
        st.tuples(st.just("--windows"), st.sampled_from(["0,1", "x", "5", "0.5", "-1"])),
        st.tuples(st.just("-j"), st.sampled_from(["1x2", "abc", "1x0", "2", "0x1", "1:2x1", "x2"])),
        st.tuples(st.just("-s"), st.sampled_from(["local_cwd", "slurm", "nosuch", "kubernetes"])),
        st.tuples(st.just("--env"), st.sampled_from(["A=1", "FOO", "A=1,FOO", "=1", ""])),
        st.tuples(st.just("-cfg"), st.sampled_from(["foo", "log_dir=/tmp/x", "partition=cpu", "queue=q", ""])),
        st.tuples(st.just("--group"), st.sampled_from(["g1", "a/b", "", "-g"])),
        st.tuples(st.sampled_from(["--cpu", "--gpu", "--memMB", "--max_retries"]), st.sampled_from(["0", "-1", "4", "x"])),
        st.tuples(st.just("--mounts"), st.sampled_from(["type=bind,src=/a,dst=/b", "src=/a", "bogus=1", ""])),
        st.tuples(st.just("--image"), st.sampled_from(["", "reg/dlrm:1"])),
    ),
    max_size=3,
)


def _names_something(error: str) -> bool:
    """A refusal names the flag, strategy, run or file it is about."""
    return re.search(r"(^|[\s'(\[])--?[a-z]|strateg|run \S|\.json|experiment_dir", error) is not None


@CASES
@given(st.lists(_STRATEGY, max_size=3), _OPTIONS, _FLAGS)
def test_sweep_arguments_are_accepted_or_refused_naming_the_flag(tmp_path: Path, strategies, options, common) -> None:
    exp = tmp_path / "exp"
    argv = [str(exp), *strategies, *[t for option in options for t in option], "--dryrun"]
    if common:
        argv += ["--", *common]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = sweep_main(argv)
        except SystemExit as e:
            code = e.code
    assert code in (0, 2), f"{argv}: exit code {code}\n{err.getvalue()}"
    if code == 2:
        event("refused")
        last = err.getvalue().strip().splitlines()[-1]
        assert last.startswith("dlrm-multiepoch sweep: error: "), (argv, last)
        assert _names_something(last.split("error: ", 1)[1]), (argv, last)
    else:
        event("accepted")
        assert out.getvalue().count("=== run ") >= 1
    assert not exp.exists()  # a dry run, or a refusal: nothing written


# -- damaged experiment folders ---------------------------------------------------------

_COMMON = ["--dataset", "movielens"]


def _experiment(exp: Path):
    """A finished 2-run experiment as the app and the sweep leave it (summary, a checkpoint, the manifest)."""
    plan = build_plan(str(exp), [parse_strategy("joint-1ep"), parse_strategy("delayed")], [0], 2, _COMMON)
    update_manifest(plan)
    for run in plan.runs:
        config = json.loads(json.dumps(parse_config(list(run.flags)).to_dict()))
        folder = exp / run.name
        (folder / "checkpoints" / "step_8").mkdir(parents=True)
        evaluations = [{"epoch": e} for e in range(1, run.epochs + 1)]
        (folder / "summary.json").write_text(json.dumps({"config": config, "evaluations": evaluations, "wall_time_s": 1.0}))
        state = {"format": 2, "config": config, "parts": {"progress": {"epoch": run.epochs}}}
        (folder / "checkpoints" / "step_8" / "trainer_state.json").write_text(json.dumps(state))
    return plan


def _lock(holder: Dict[str, object]) -> str:
    return json.dumps({"job_id": "j", "started": "2026-12-01T10:00:00Z", **holder})


_DAMAGE = st.sampled_from([
    ("sweep.json", "delete"), ("sweep.json", "truncate"), ("sweep.json", "[]"), ("sweep.json", "{}"),
    ("sweep.json", '{"runs": []}'), ("sweep.json", "epochs"), ("sweep.json", "drop_entry"), ("sweep.json", "entry_str"),
    ("sweep.json", "common"), ("sweep.json", "groups"), ("sweep.json", "flags_garbage"),
    ("summary.json", "delete"), ("summary.json", "truncate"), ("summary.json", "[]"), ("summary.json", "epochs"),
    ("summary.json", "data_path"), ("summary.json", "evaluations"), ("summary.json", "unfinished"),
    ("summary.json", "config_str"),
    ("checkpoint", "delete_state"), ("checkpoint", "format1"), ("checkpoint", "garbage"), ("checkpoint", "tmp"),
    ("checkpoint", "progress"), ("checkpoint", "delete_all"),
    ("lock", "garbage"), ("lock", "empty"), ("lock", "dead_pid"), ("lock", "live_pid"), ("lock", "other_host_fresh"),
    ("lock", "other_host_stale"), ("folder", "delete"),
])  # fmt: skip


def _damage(exp: Path, run: str, target: str, how: str) -> None:
    folder = exp / run
    manifest_file = exp / "sweep.json"
    if target == "folder":
        shutil.rmtree(folder)
    elif target == "sweep.json":
        manifest = json.loads(manifest_file.read_text())
        entry = manifest["runs"][run]
        text = {
            "truncate": manifest_file.read_text()[:40],
            "epochs": None, "drop_entry": None, "entry_str": None, "common": None, "groups": None, "flags_garbage": None,
        }.get(how, how)  # fmt: skip
        if how == "epochs":
            i = entry["flags"].index("--epochs")
            entry["flags"][i + 1] = "5"
        elif how == "drop_entry":
            del manifest["runs"][run]
        elif how == "entry_str":
            manifest["runs"][run] = "x"
        elif how == "common":
            manifest["common_flags"] = [*_COMMON, "--max_rows", "10"]
        elif how == "groups":
            manifest["groups"] = ["x"]
        elif how == "flags_garbage":
            entry["flags"] = [1, None]
        if how == "delete":
            manifest_file.unlink()
        else:
            manifest_file.write_text(text if text is not None else json.dumps(manifest))
    elif target == "summary.json":
        summary_file = folder / "summary.json"
        summary = json.loads(summary_file.read_text())
        if how == "delete":
            summary_file.unlink()
            return
        if how == "epochs":
            summary["config"]["epochs"] = 7
        elif how == "data_path":
            summary["config"]["data"]["data_path"] = "/elsewhere"
        elif how == "evaluations":
            summary["evaluations"] = [{"epoch": "x"}, 3, None]
        elif how == "unfinished":
            del summary["wall_time_s"]
        elif how == "config_str":
            summary["config"] = "x"
        text = {"truncate": summary_file.read_text()[:30], "[]": "[]"}.get(how, json.dumps(summary))
        summary_file.write_text(text)
    elif target == "checkpoint":
        state_file = folder / "checkpoints" / "step_8" / "trainer_state.json"
        if how == "delete_state":
            state_file.unlink()
        elif how == "format1":
            state_file.write_text(json.dumps({**json.loads(state_file.read_text()), "format": 1}))
        elif how == "garbage":
            state_file.write_text("{not json")
        elif how == "tmp":
            (folder / "checkpoints" / "step_9.tmp").mkdir()
        elif how == "progress":
            state_file.write_text(json.dumps({**json.loads(state_file.read_text()), "parts": {"progress": "x"}}))
        elif how == "delete_all":
            shutil.rmtree(folder / "checkpoints")
    elif target == "lock":
        me = socket.gethostname()
        text = {
            "garbage": "\x00{]", "empty": "",
            "dead_pid": _lock({"host": me, "pid": 2**22 + 17, "pid_start": 1}),
            "live_pid": _lock({"host": me, "pid": os.getpid(), "pid_start": None}),
            "other_host_fresh": _lock({"host": "node-b", "pid": 1, "pid_start": 1}),
            "other_host_stale": _lock({"host": "node-b", "pid": 1, "pid_start": 1}),
        }[how]  # fmt: skip
        (folder / LOCK_FILE).write_text(text)
        if how in ("other_host_stale", "dead_pid", "garbage"):
            old = time.time() - STALE_AFTER_S - 5
            os.utime(folder / LOCK_FILE, (old, old))


@CASES
@given(st.lists(st.tuples(st.sampled_from(["joint-1ep-s0", "delayed-s0"]), _DAMAGE), min_size=1, max_size=3))
def test_damaged_experiment_folders_are_refused_naming_the_file_or_get_a_true_state(tmp_path: Path, damages) -> None:
    exp = tmp_path / f"exp{time.monotonic_ns()}"
    plan = _experiment(exp)
    for run, (target, how) in damages:
        if (exp / run).is_dir() and (target != "sweep.json" or (exp / "sweep.json").is_file()):
            try:
                _damage(exp, run, target, how)
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                pass  # an earlier damage left nothing of that kind to damage
    before = folder_bytes(exp)
    try:
        check_experiment(plan)
    except ValueError as e:
        event("refused")
        assert any(word in str(e) for word in ("sweep.json", "summary.json", "trainer_state.json", "--", "checkpoint")), str(e)
        assert folder_bytes(exp) == before
        return
    event("accepted")
    states = {run.name: run_state(str(exp), run) for run in plan.runs}
    for run in plan.runs:
        state, folder = states[run.name], exp / run.name
        assert state.status in ("new", "running", "finished", "resumable", "stale"), state
        lock = folder / LOCK_FILE
        text = lock.read_text() if lock.is_file() else None
        fresh = text is not None and time.time() - lock.stat().st_mtime < STALE_AFTER_S
        # Alive: this process's pid, or another host's (or a half-written) lock with a fresh heartbeat.
        live = text is not None and (f'"pid": {os.getpid()}' in text or (fresh and ('"node-b"' in text or text == "")))
        assert (state.status == "running") == live, (run.name, state, damages)
        intact = (folder / "summary.json").is_file() and '"wall_time_s"' in (folder / "summary.json").read_text()
        if not live and intact:
            try:
                summary = json.loads((folder / "summary.json").read_text())
                finished = isinstance(summary.get("config"), dict) and summary["config"].get("epochs", 0) >= run.epochs
            except (ValueError, AttributeError):
                finished = False
            assert (state.status == "finished") == finished, (run.name, state, damages)
        event(state.status)
    assert folder_bytes(exp) == before  # checks and states never change or delete anything
    update_manifest(plan)  # and the manifest can be written again
