"""The environment's faults at the commands' boundary (issue 35, part B): a full disk, a read-only folder, a path
that is a file, a name that is not UTF-8, a signal before the first launch; and the rows of its table that are
the sweep's and the search's own (4, 9, 10, 11, 19, 20).

Each fault ends in one line naming the path and what to do, never a traceback; nothing finished is lost and
the rerun continues. The search runs on simulated launches (``tests/search_sim.py``); the disk that fills and
the read-only folder are the kernel's (a tmpfs, a read-only bind mount: root only, skipped elsewhere), besides
an injected ``ENOSPC`` (``tests/fs_faults.py``); ``--group`` is a real TorchX ``local_cwd`` launch.
"""

import io
import json
import os
import re
import shutil
import signal
import threading
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from dlrm_multiepoch.command_faults import fault_line, guarded
from dlrm_multiepoch.data.command import main as preprocess_main
from dlrm_multiepoch.search.command import main as search_main
from dlrm_multiepoch.sweep import checks as sweep_checks
from dlrm_multiepoch.sweep.command import main as sweep_main
from tests.fs_faults import NOT_UTF8, FullDiskAt, fill, read_only, small_disk
from tests.fuzz_settings import folder_bytes
from tests.search_sim import ARGS, deployed, finished_search, no_step_twice, run_search

TINY = [
    "--dataset", "movielens", "--max_rows", "3000", "--batch_size", "256", "--limit_train_batches", "4",
    "--train_eval_rows", "200", "--no-progress_bar",
]  # fmt: skip


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """The reference: what the undisturbed search deploys."""
    return finished_search(tmp_path_factory)


def _last(out: str) -> str:
    return out.rstrip().splitlines()[-1]


# -- a full disk --------------------------------------------------------------------------


def test_a_disk_that_fills_during_a_search_names_the_file_and_the_rerun_continues(searched, tmp_path):
    """Row 10, on a real disk that fills (a 1 MiB tmpfs, filled before the third launch trains)."""
    with small_disk(tmp_path / "disk") as disk:
        exp, filler = disk / "exp", []
        code, out, sim = run_search([str(exp), *ARGS], on_launch=lambda n, _: filler.append(fill(disk)) if n == 3 else 0)
        assert code == 1 and "Traceback" not in out, out
        assert "early-s0: FAILED (FAILED) after 0 s: OSError: [Errno 28] No space left on device" in out  # its launch
        assert _last(out) == (
            f"search: {exp}/search.json: the disk is full (No space left on device); free space, then rerun the same "
            "command to continue (what was trained is kept)"
        )
        assert json.loads((exp / "search.json").read_text())["seeds"]["0"]["cost"]["launches"] == 3  # the last one saved
        assert not list(exp.rglob("*.tmp"))  # no half-written record
        filler[0].unlink()
        code, again, rerun = run_search([str(exp), *ARGS])
        assert code == 0 and deployed(exp) == deployed(searched), again
        assert no_step_twice(sim.trained + rerun.trained)


def test_a_full_disk_at_a_write_fails_with_the_path_and_leaves_the_record_whole(tmp_path):
    """Unit: an injected full disk (beside the real one above) at ``search.json``'s first write: one line naming
    it, the earlier record and no temp file left; ``fault_line`` for the other causes."""
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "search.json").write_text("{}")
    with FullDiskAt(exp, at=1):
        code, out, sim = run_search([str(exp), *ARGS])
    assert code == 1 and sim.launch_count == 0 and "Traceback" not in out
    assert _last(out).startswith(f"search: {exp}/search.json: the disk is full (No space left on device); free space")
    assert (exp / "search.json").read_text() == "{}" and not (exp / "search.json.tmp").exists()
    for number, text in [(13, "permission denied (Permission denied); make it writable"),
                         (30, "the file system is read-only (Read-only file system); make it writable"),
                         (20, "a part of the path is a file, not a folder (Not a directory); move that file")]:  # fmt: skip
        line = fault_line("sweep", OSError(number, os.strerror(number), "a/b"), "then rerun")
        assert line.startswith(f"sweep: a/b: {text}") and line.endswith(", then rerun")


# -- a read-only folder, a path that is a file, a name that is not UTF-8 -----------------------------


def test_a_search_into_a_read_only_folder_is_refused_before_anything_runs(searched, tmp_path):
    exp = tmp_path / "exp"
    shutil.copytree(searched, exp)
    before = folder_bytes(exp)
    with read_only(exp):
        code, out, sim = run_search([str(exp), *ARGS])
    assert code == 2 and sim is None and "Traceback" not in out
    assert _last(out).startswith(f"EXPERIMENT_DIR {exp}: cannot write into {exp}: it is read-only or not yours")
    assert folder_bytes(exp) == before


def test_a_path_that_is_a_file_is_refused_before_anything_runs(tmp_path, capsys):
    """Row 9: search and sweep into a file, or under a file; a folder whose name is not UTF-8."""
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    for exp, says in [(file, f"{file} is a file, not a folder; use another path"),
                      (file / "exp", f"{file} is a file, not a folder, and {file}/exp would be under it"),
                      (tmp_path / NOT_UTF8, r"run\xff-s0 is not UTF-8 text")]:  # fmt: skip
        code, out, sim = run_search([str(exp), *ARGS])
        assert code == 2 and sim is None and says in _last(out), out
        with pytest.raises(SystemExit) as refused:
            sweep_main([str(exp), "j=--freeze_schedule joint", "--", *TINY])
        assert refused.value.code == 2 and says in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"] and file.read_text() == "mine"


# -- seeds ---------------------------------------------------------------------------


def test_seeds_no_run_can_have_are_refused_before_anything_runs(tmp_path, capsys):
    """Row 11: ``search --seeds -1`` (it launched, and failed 20 s later) and ``sweep --seeds 0,0``."""
    code, out, sim = run_search([str(tmp_path / "s"), "--seeds", "-1", *ARGS])
    assert code == 2 and sim is None and _last(out) == (
        "--seeds '-1': -1 is not a seed (seeds are integers from 0 to 18446744073709551615)"
    )
    for seeds in ("0,0", "-1"):
        with pytest.raises(SystemExit) as refused:
            sweep_main([str(tmp_path / "w"), "j=--freeze_schedule joint", "--seeds", seeds, "--", *TINY])
        assert refused.value.code == 2 and f"--seeds '{seeds}'" in capsys.readouterr().err
    assert not (tmp_path / "s").exists() and not (tmp_path / "w").exists()


# -- a signal before the first launch ------------------------------------------------------


@pytest.mark.parametrize("how", ["SIGHUP", "SIGTERM", "SIGINT"])
@pytest.mark.parametrize("command", ["search", "sweep"])
def test_a_signal_during_the_checks_before_the_first_launch_says_one_line(tmp_path, monkeypatch, how, command):
    """Row 19: the signal arrives while the command checks the scheduler's request (the last check before a
    launch): one line naming it, exit 130, nothing launched."""
    checked = sweep_checks.check_request  # the search's checks end with the sweep's too

    def check_then_signal(*args, **kwargs):
        checked(*args, **kwargs)
        os.kill(os.getpid(), getattr(signal, how))

    monkeypatch.setattr(sweep_checks, "check_request", check_then_signal)
    exp = tmp_path / "exp"
    argv = [str(exp), *ARGS] if command == "search" else [str(exp), "j=--freeze_schedule joint", "--", *TINY]
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        code = (search_main if command == "search" else sweep_main)(argv)
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL  # the command's handler is gone with it
    nothing = "no branch was training" if command == "search" else "no run was running"
    assert code == 130 and _last(out.getvalue()) == (
        f"{command}: interrupted ({how}; {nothing}). Rerun the same command to continue."
    ), out.getvalue()
    assert not exp.exists()


def test_a_signal_at_any_moment_of_a_command_is_one_line(capsys):
    """The boundary itself, as a process that has not loaded TorchX meets them (``compare``, ``preprocess``):
    Ctrl-C, and SIGTERM or SIGHUP, which it installs its handler for."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        for signum in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            code = guarded("compare", lambda: os.kill(os.getpid(), signum) or 0, "then rerun the same command")
            assert code == 130
            assert capsys.readouterr().err.strip() == f"compare: interrupted ({signum.name}); then rerun the same command"
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def test_a_hangup_that_nohup_ignores_stays_ignored(capsys):
    """``nohup dlrm-multiepoch search ...``: a closed terminal does not stop the command (its SIGHUP stays ignored),
    while SIGTERM still stops it in one line."""
    before = {s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM)}
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        assert guarded("search", lambda: os.kill(os.getpid(), signal.SIGHUP) or 0, "then rerun") == 0
        assert guarded("search", lambda: os.kill(os.getpid(), signal.SIGTERM) or 0, "then rerun") == 130
        assert capsys.readouterr().err.strip() == "search: interrupted (SIGTERM); then rerun"
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


# -- --group on local_cwd, and console lines --------------------------------------------------


@pytest.mark.launch
def test_a_group_sweep_on_a_disk_that_fills_names_the_disk_and_the_rerun_finishes_it(tmp_path):
    """Rows 4 and 10 on real launches (TorchX ``local_cwd``): a ``--group`` sweep (the remedy every sweep refusal
    suggests; its job's state never read back: the app id held the group's ``/``, LOST after 0 s) on a disk that
    fills once its first checkpoint is saved. Its log, on the same disk, cannot take the trainer's error, so the
    sweep names the full disk; freed, the rerun resumes from that checkpoint, ends, and reads its job back."""
    with small_disk(tmp_path / "disk", "16m") as disk:
        exp, filler = disk / "exp", []
        first = exp / "g" / "j-s0" / "checkpoints" / "step_4" / "trainer_state.json"

        def fill_after_the_first_checkpoint() -> None:
            deadline = time.monotonic() + 300
            while not first.exists() and time.monotonic() < deadline:
                time.sleep(0.005)
            filler.append(fill(disk))

        watcher = threading.Thread(target=fill_after_the_first_checkpoint)
        watcher.start()
        argv = [str(exp), "j=--freeze_schedule joint", "--epochs", "3", "-j", "1x1", "--group", "g", "--", *TINY]
        out = io.StringIO()
        with redirect_stdout(out):
            code = sweep_main(argv)
        watcher.join()
        text = out.getvalue()
        assert code == 1 and "Traceback" not in text, text
        full = rf"g/j-s0: FAILED \((FAILED|LOST)\) after \d+ s: the disk of {exp}/g/j-s0 is full \(\d+ bytes free\): free space"
        assert re.search(full, text), text
        filler[0].unlink()
        out = io.StringIO()
        with redirect_stdout(out):
            code = sweep_main(argv)
        text = out.getvalue()
        assert code == 0 and re.search(r"\[1/1\] g/j-s0: resuming after epoch [12], 3 epochs", text), text
        assert "    done in " in text
        summary = json.loads((exp / "g" / "j-s0" / "summary.json").read_text())
        assert [e["epoch"] for e in summary["evaluations"]] == [1, 2, 3] and "wall_time_s" in summary


def test_a_refused_preprocess_leaves_nothing_beside_its_output(tmp_path, capsys):
    """Row 20: a refused preprocess left ``<output>.lock``."""
    csv = tmp_path / "dup.csv"
    csv.write_text("uid,iid,label,uid\n1,2,0,3\n2,3,1,4\n")
    with pytest.raises(SystemExit) as refused:
        preprocess_main(["--dataset", "interactions", "--data_path", str(csv), "--user_col", "uid", "--item_col",
                         "iid", "--output", str(tmp_path / "out")])  # fmt: skip
    assert refused.value.code == 2 and "has 2 columns named 'uid'" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dup.csv"]
