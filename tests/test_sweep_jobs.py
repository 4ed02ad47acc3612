"""A sweep safe to kill and share: a killed sweep's trainer is followed, never doubled; Ctrl-C prints one
line; job states TorchX cannot read count as stopped. Real TorchX ``local_cwd`` launches of one tiny run
(1 rank, MovieLens subset); the cluster path's status guard with a fake runner beside a real local one."""

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from torchx.runner import get_runner
from torchx.specs import AppDef, AppState, AppStatus, Role

from dlrm_multiepoch.lock_holder import live_holder, read_holder
from dlrm_multiepoch.run_files import LOCK_FILE
from dlrm_multiepoch.sweep import build_plan, parse_strategy
from dlrm_multiepoch.sweep.command import main as sweep_main
from dlrm_multiepoch.sweep.jobs import job_state
from dlrm_multiepoch.sweep.launch import LaunchOptions, SweepLauncher
from dlrm_multiepoch.sweep.manifest import update_manifest
from dlrm_multiepoch.train.config import parse_config
from dlrm_multiepoch.train.lock import RunFolderBusy, RunLock
from dlrm_multiepoch.train.run_folder import open_run_folder

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "--dataset", "movielens", "--max_rows", "3000", "--batch_size", "256", "--limit_train_batches", "4",
    "--train_eval_rows", "200", "--no-progress_bar",
]  # fmt: skip
SWEEP = ["j=--freeze_schedule joint", "--epochs", "1", "-j", "1x1", "--", *TINY]


class _Trigger(io.StringIO):
    """Captures a sweep's output and sends ``signum`` to ``pid`` once a line with ``line`` was printed."""

    def __init__(self, line: str, pid: int, signum: int):
        super().__init__()
        self.line, self.pid, self.signum, self.fired = line, pid, signum, False

    def write(self, text: str) -> int:
        if self.line in text and not self.fired:
            self.fired = True
            threading.Timer(0.5, os.kill, (self.pid, self.signum)).start()
        return super().write(text)


def _launches(exp: Path) -> list:
    return sorted(p.name for p in (exp / "logs" / "j-s0" / "torchx").iterdir())


def test_a_killed_sweeps_trainer_is_followed_not_doubled_and_ctrl_c_prints_one_line(tmp_path):
    exp = tmp_path / "exp"
    run_dir = exp / "j-s0"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen(
        [sys.executable, "-m", "dlrm_multiepoch.cli", "sweep", str(exp), *SWEEP],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while live_holder(str(run_dir)) is None:  # its trainer has the folder
            assert time.monotonic() < deadline and first.poll() is None, "the first sweep's trainer never started"
            time.sleep(0.05)
        trainer = read_holder(str(run_dir))
        os.kill(trainer.pid, signal.SIGSTOP)  # paused (alive, no CPU) until the reruns below look at it
        first.kill()  # SIGKILL: the sweep cannot stop its trainer, which runs on
        first.wait()
        # A second trainer in the folder is refused before it reads or writes anything (the trainer's first step).
        second = parse_config([*TINY, "--tensorboard_dir", str(exp), "--run_name", "j-s0", "--resume", "auto"])
        busy = f"run folder {run_dir} is in use by a live trainer ({trainer.describe()}; lock file {run_dir / LOCK_FILE})"
        with pytest.raises(RunFolderBusy, match=re.escape(busy)):
            open_run_folder(second)
        # A rerun finds the live trainer and follows it; Ctrl-C while following prints one line.
        out = _Trigger("following it until it ends", os.getpid(), signal.SIGINT)
        with redirect_stdout(out):
            code = sweep_main([str(exp), *SWEEP])
        assert code == 130, out.getvalue()
        text = out.getvalue()
        assert f"[1/1] j-s0: a trainer already runs in its folder ({trainer.describe()}); following it until it ends" in text
        assert text.rstrip().endswith("sweep: interrupted (SIGINT). Rerun the same command to continue.")
        assert "Traceback" not in text and "SignalException" not in text
        assert live_holder(str(run_dir)) == trainer  # not ours to stop
        out = _Trigger("following it until it ends", os.getpid(), signal.SIGHUP)  # a closed terminal: the same
        with redirect_stdout(out):
            assert sweep_main([str(exp), *SWEEP]) == 130
        assert out.getvalue().rstrip().endswith("sweep: interrupted (SIGHUP). Rerun the same command to continue.")
        assert live_holder(str(run_dir)) == trainer
        # Rerun again: it follows the trainer (resumed once followed) to its end and launches nothing.
        out = _Trigger("following it until it ends", trainer.pid, signal.SIGCONT)
        with redirect_stdout(out):
            assert sweep_main([str(exp), *SWEEP]) == 0
        assert "[1/1] j-s0: finished by the trainer it waited for (1 epoch), skipped" in out.getvalue()
    finally:
        first.kill()
        holder = live_holder(str(run_dir))
        if holder is not None:  # never leave the trainer behind a failed assertion
            os.kill(holder.pid, signal.SIGCONT)
            while live_holder(str(run_dir)) is not None:
                time.sleep(0.5)
    assert len(_launches(exp)) == 1  # one trainer in all
    assert not (run_dir / LOCK_FILE).exists()  # released at the end
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["config"]["epochs"] == 1 and "wall_time_s" in summary
    # A finished run is never retrained nor deleted: another --epochs is refused naming it (no checkpoint needed).
    before = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")}
    err = io.StringIO()
    with pytest.raises(SystemExit), redirect_stdout(io.StringIO()), redirect_stderr(err):
        sweep_main([str(exp), SWEEP[0], "--epochs", "2", *SWEEP[3:]])
    assert f"run j-s0 in {exp} was trained with other flags (sweep.json): --epochs 1 -> 2 (a schedule" in err.getvalue()
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")} == before
    # A moved experiment folder is the same experiment: the rerun skips the finished run.
    moved = tmp_path / "moved"
    exp.rename(moved)
    out = io.StringIO()
    with redirect_stdout(out):
        assert sweep_main([str(moved), *SWEEP]) == 0
    assert "[1/1] j-s0: finished earlier (1 epoch), skipped" in out.getvalue()
    exp = moved
    # As its own group it is a new run, in its own folder.
    out = io.StringIO()
    with redirect_stdout(out):
        assert sweep_main([str(exp), SWEEP[0], "--epochs", "2", *SWEEP[3:5], "--group", "e2", "--dryrun", *SWEEP[5:]]) == 0
    assert "=== run e2/j-s0 (2 epochs) ===" in out.getvalue()


def test_local_job_states_are_read_without_raising(tmp_path):
    """The real local scheduler: a finished job, and a job it never ran (forgotten)."""
    runner = get_runner()
    try:
        app = AppDef("ok", roles=[Role("r", image=str(tmp_path), entrypoint="true")])
        handle = runner.run(app, "local_cwd", cfg={"log_dir": str(tmp_path / "logs")})
        runner.wait(handle, wait_interval=0.2)
        status, why = job_state(runner, handle)
        assert (status.state, why) == (AppState.SUCCEEDED, "")
        assert job_state(runner, "local_cwd://torchx/never-ran") == (None, "the scheduler no longer knows it")
    finally:
        runner.close()


class _FakeSlurm:
    """A runner whose states are given: TorchX 0.7.0's assertion on ``CANCELLED by 0``, a forgotten job, a running one."""

    def __init__(self, states):
        self.states, self.scheduled = states, []

    def status(self, handle):
        state = self.states[handle]
        if isinstance(state, Exception):
            raise state
        return None if state is None else AppStatus(state)

    def dryrun(self, app, scheduler, cfg):
        return app

    def schedule(self, app):
        self.scheduled.append(app.roles[0].name)
        return f"slurm://torchx/new-{len(self.scheduled)}"


def test_cluster_jobs_whose_state_cannot_be_read_count_as_stopped(tmp_path):
    exp = str(tmp_path / "exp")
    names = ["cancelled", "forgotten", "running", "lost", "held"]
    plan = build_plan(exp, [parse_strategy(f"{n}=--learning_rate 0.01") for n in names], [0], 1, ["--dataset", "movielens"])
    update_manifest(plan, {
        "cancelled-s0": "slurm://torchx/41", "forgotten-s0": "slurm://torchx/42", "running-s0": "slurm://torchx/43",
        "held-s0": "slurm://torchx/44",
    })  # fmt: skip
    manifest = json.loads((tmp_path / "exp" / "sweep.json").read_text())
    del manifest["runs"]["lost-s0"]  # a lost entry
    (tmp_path / "exp" / "sweep.json").write_text(json.dumps(manifest))
    # cancelled-s0's trainer was killed with its job on another host: its lock names job 41, heartbeat fresh.
    os.makedirs(f"{exp}/cancelled-s0")
    with open(f"{exp}/cancelled-s0/{LOCK_FILE}", "w") as f:
        json.dump({"job_id": "41", "host": "node-b", "pid": 7, "pid_start": 1, "started": "2026-12-01T10:00:00Z"}, f)
    held = RunLock.acquire(f"{exp}/held-s0", "another-job", log=lambda _: None)  # a live trainer of another job
    runner = _FakeSlurm({
        "slurm://torchx/41": AssertionError("failed to translate slurm state CANCELLED by 0 to torchx state"),
        "slurm://torchx/42": None, "slurm://torchx/43": AppState.RUNNING, "slurm://torchx/44": AppState.FAILED,
    })  # fmt: skip
    out = io.StringIO()
    try:
        failed = SweepLauncher(plan, LaunchOptions(scheduler="slurm"), out=out, runner=runner).run()
    finally:
        held.release()
    lines = out.getvalue().splitlines()
    assert failed == [] and runner.scheduled == ["train", "train", "train"]
    assert lines[:2] == [
        "cancelled-s0: job slurm://torchx/41: its state cannot be read (AssertionError: failed to translate slurm state "
        "CANCELLED by 0 to torchx state); the run counts as stopped",
        "cancelled-s0: submitted as slurm://torchx/new-1 (new)",
    ]
    assert lines[2:7] == [
        "forgotten-s0: job slurm://torchx/42: the scheduler no longer knows it; the run counts as stopped",
        "forgotten-s0: submitted as slurm://torchx/new-2 (new)",
        "running-s0: job slurm://torchx/43 is still RUNNING, skipped",
        "lost-s0: submitted as slurm://torchx/new-3 (new)",
        "held-s0: job slurm://torchx/44: it ended FAILED; the run counts as stopped",
    ]
    assert lines[7].startswith("held-s0: a trainer runs in its folder (job another-job, pid ") and lines[7].endswith(", skipped")
    handles = {k: v.get("handle") for k, v in json.loads((tmp_path / "exp" / "sweep.json").read_text())["runs"].items()}
    assert handles == {
        "cancelled-s0": "slurm://torchx/new-1", "forgotten-s0": "slurm://torchx/new-2", "running-s0": "slurm://torchx/43",
        "lost-s0": "slurm://torchx/new-3", "held-s0": "slurm://torchx/44",
    }  # fmt: skip


class _FakeLocal(_FakeSlurm):
    """A local runner whose job fails at once: another sweep's trainer took the folder in between."""

    def __init__(self, states, on_schedule):
        super().__init__(states)
        self.on_schedule = on_schedule

    def schedule(self, app):
        self.scheduled.append(app.name)
        self.on_schedule()
        return "local_cwd://torchx/lost-race"


def test_a_launch_that_lost_the_race_for_its_folder_follows_the_winner(tmp_path):
    exp = tmp_path / "exp"
    plan = build_plan(str(exp), [parse_strategy("j=--learning_rate 0.01")], [0], 1, ["--dataset", "movielens"])
    (run,) = plan.runs
    config = json.loads(json.dumps(parse_config(list(run.flags)).to_dict()))
    winner = []

    def other_sweep_starts():  # its trainer takes the folder, trains, ends the run
        winner.append(RunLock.acquire(str(exp / run.name), "other-sweeps-job", log=lambda _: None))
        threading.Timer(3.0, finish).start()

    def finish():
        (exp / run.name / "summary.json").write_text(json.dumps({"config": config, "evaluations": [], "wall_time_s": 1.0}))
        winner[0].release()

    runner = _FakeLocal({"local_cwd://torchx/lost-race": AppState.FAILED}, other_sweep_starts)
    out = io.StringIO()
    failed = SweepLauncher(plan, LaunchOptions(), out=out, runner=runner).run()
    lines = out.getvalue().splitlines()
    assert failed == [] and len(runner.scheduled) == 1  # launched once; the winner's run is not launched again
    assert lines[0] == "[1/1] j-s0: training, 1 epoch, 1x2 ranks under TorchX local_cwd"
    assert lines[1] == f"[1/1] j-s0: another trainer took its folder first ({winner[0].holder.describe()}); following it"
    assert lines[-1] == "[1/1] j-s0: finished by the trainer it waited for (0 epochs), skipped"


def test_a_launch_that_lost_the_race_to_a_trainer_that_has_ended_reads_its_own_log(tmp_path):
    """Two sweeps into one experiment (issue 29, row 9): the other sweep's trainer took the folder and finished
    before this launch's trainer failed on its lock; the run is done (exit 0), and its own log is read, not the
    other launch's (same log folder, newer, successful)."""
    exp = tmp_path / "exp"
    plan = build_plan(str(exp), [parse_strategy("j=--learning_rate 0.01")], [0], 1, ["--dataset", "movielens"])
    (run,) = plan.runs
    config = json.loads(json.dumps(parse_config(list(run.flags)).to_dict()))
    logs = exp / "logs" / "j-s0" / "torchx"

    def other_sweep_trains_it():
        (exp / run.name).mkdir(parents=True)
        (exp / run.name / "summary.json").write_text(json.dumps({"config": config, "evaluations": [], "wall_time_s": 1.0}))
        own = logs / "lost-race" / "train" / "0"
        own.mkdir(parents=True)
        (own / "combined.log").write_text(f"[0]:dlrm_multiepoch.train.lock.RunFolderBusy: run folder {exp / run.name} is busy\n")
        winner = logs / "winner" / "train" / "0"
        winner.mkdir(parents=True)
        (winner / "combined.log").write_text("[0]:eval after epoch 1 (step 4): ...\n")

    runner = _FakeLocal({"local_cwd://torchx/lost-race": AppState.FAILED}, other_sweep_trains_it)
    out = io.StringIO()
    failed = SweepLauncher(plan, LaunchOptions(), out=out, runner=runner).run()
    lines = out.getvalue().splitlines()
    assert failed == [] and len(runner.scheduled) == 1, out.getvalue()
    assert lines[1:] == [
        "[1/1] j-s0: another trainer took its folder first; following it",
        "[1/1] j-s0: finished by the trainer it waited for (0 epochs), skipped",
    ]


@pytest.mark.launch
def test_a_data_error_every_run_would_hit_stops_the_sweep_after_the_first_run(tmp_path):
    """Issue 29, row 14: an empty CSV (a header, no rows) in a sweep of 2 strategies x 2 seeds: one launch fails
    loading the data, the 3 other runs read the same data and are not launched."""
    data = tmp_path / "empty.csv"
    data.write_text("user,item,clicked\n")
    exp = tmp_path / "exp"
    app = ["--dataset", "interactions", "--data_path", str(data), "--user_col", "user", "--item_col", "item",
           "--label_col", "clicked", "--no-progress_bar"]  # fmt: skip
    out = io.StringIO()
    with redirect_stdout(out):
        code = sweep_main([str(exp), "j=--freeze_schedule joint", "k=--learning_rate 0.01", "--epochs", "1",
                           "--seeds", "0,1", "-j", "1x1", "--", *app])  # fmt: skip
    text = out.getvalue()
    assert code == 1 and len(list((exp / "logs").iterdir())) == 1, text
    assert "[1/4] j-s0: FAILED (FAILED) after" in text and ": ValueError: " in text and "no usable rows" in text
    assert (
        "sweep: j-s0's data failed to load, and 3 other run(s) read the same data (the same data flags): not "
        "launched (k-s0, j-s1, k-s1). Fix the data, then rerun the same command"
    ) in text
    # Issue 35, row 20: the last line agrees (it said "4 run(s) failed ...; rerun the same command to retry them").
    assert text.rstrip().splitlines()[-1] == (
        "sweep: 4 run(s) not done (j-s0, k-s0, j-s1, k-s1): j-s0's data failed to load (its error is above); fix the "
        "data, then rerun the same command"
    )
