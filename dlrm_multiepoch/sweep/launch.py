"""Launch a sweep's runs through TorchX: one after another on ``local_cwd``, one job each elsewhere.

Each run is the ``dlrm_multiepoch.train`` component (``torchrun -m
dlrm_multiepoch.train``, or ``--script``) with the run's flags, submitted with TorchX's ``Runner`` to the chosen
scheduler. Finished runs are skipped; unfinished ones resume from their last
checkpoint (every run gets ``--resume auto``) or start over in their folder; a run
folder a live trainer holds (its lock, :mod:`dlrm_multiepoch.train.lock`: a trainer
left by a killed sweep, or another sweep's) is never launched into: on ``local_cwd``
the sweep waits for that trainer and follows it, elsewhere it skips the run. On
``local_cwd`` the sweep waits for each run and prints its evaluations as they land;
on a cluster scheduler it submits every unfinished run as its own job and records
each job's handle in the manifest at once; a later call skips runs whose job is
still alive and treats a job whose state cannot be read as stopped.

Example::

    launcher = SweepLauncher(plan, LaunchOptions(scheduler="local_cwd", j="1x2"))
    failed = launcher.run()
"""

import os
import sys
import time
from typing import Dict, List, Optional, TextIO

from torchx.runner import Runner, get_runner
from torchx.schedulers.local_scheduler import SignalException
from torchx.specs import AppDef, AppState

from dlrm_multiepoch import components
from dlrm_multiepoch.command_faults import signal_of
from dlrm_multiepoch.launch_options import LOCAL, LaunchOptions
from dlrm_multiepoch.lock_holder import live_holder
from dlrm_multiepoch.run_files import LOGS_DIR, read_manifest
from dlrm_multiepoch.sweep.follow import EvaluationFollower
from dlrm_multiepoch.sweep.jobs import SweepInterrupted, combined_log, data_failed, disk_full, failure_reason
from dlrm_multiepoch.sweep.jobs import holder_is_job, job_state, launch_log_dir
from dlrm_multiepoch.sweep.manifest import recorded_handle, update_manifest
from dlrm_multiepoch.sweep.plan import RunSpec, RunState, SweepPlan, run_state
from dlrm_multiepoch.sweep.strategies import flag_value
from dlrm_multiepoch.train.lock import RunFolderBusy

_POLL_S = 2.0
_MAX_TURNS = 5  # per run: trainers waited for (another sweep's) before its own launch


class SweepLauncher:
    """Runs (or submits) every unfinished run of a :class:`SweepPlan`.

    Args:
        plan: the runs.
        options: how to launch them.
        out: where progress lines go (default: stdout).
        runner: a TorchX runner (default: a new one, closed when done).
    """

    def __init__(
        self, plan: SweepPlan, options: LaunchOptions, out: Optional[TextIO] = None, runner: Optional[Runner] = None
    ):
        self.plan = plan
        self.options = options
        self.out = out
        self._runner = runner
        self.data_failure: Optional[str] = None  # the run whose data failed to load (local): the others' too

    def app(self, run: RunSpec) -> AppDef:
        """The run's job: the ``train`` component with the run's flags."""
        o = self.options
        env = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **o.env} if o.scheduler == LOCAL else dict(o.env)
        # TorchX names the job {experiment}/{run}; the run's part may hold no "/" (a --group run's does): the app id
        # would, and its handle (scheduler://session/app_id) would never read back.
        name = f"{os.path.basename(os.path.normpath(self.plan.experiment_dir))}/{run.name.replace('/', '-')}"
        return components.train(*run.flags, name=name, **{**o.component_kwargs(), "env": env})

    def run(self) -> List[str]:
        """Launch every unfinished run; return the names of runs that failed (local) or could not be submitted.

        Raises:
            SweepInterrupted: Ctrl-C, SIGTERM or SIGHUP; the local run it stopped is named.
        """
        runner = self._runner or get_runner()
        try:
            if self.options.dryrun:
                for run in self.plan.runs:
                    self._print(f"=== run {run.name} ({run.epochs} epochs) ===")
                    self._print(str(runner.dryrun(self.app(run), self.options.scheduler, cfg=self.scheduler_cfg(run))))
                return []
            update_manifest(self.plan, j=self.options.j)
            if self.options.scheduler == LOCAL:
                return self._run_local(runner)
            return self._submit(runner)
        finally:
            if self._runner is None:
                runner.close()

    # -- local: one run after another ----------------------------------------------

    def _run_local(self, runner: Runner) -> List[str]:
        # Each run's `bash -c torchrun ...` finds torchrun beside this interpreter.
        os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
        total, failed, data_failure, spared = len(self.plan.runs), [], None, []
        for i, run in enumerate(self.plan.runs, 1):
            if data_failure is not None and _same_data(data_failure, run):
                failed.append(run.name)
                spared.append(run.name)
                continue
            result = self._run_one(runner, run, f"[{i}/{total}] {run.name}")
            if result != "done":
                failed.append(run.name)
            if result == "data":
                data_failure = run
                self.data_failure = run.name
        if data_failure is not None and spared:
            self._print(
                f"sweep: {data_failure.name}'s data failed to load, and {len(spared)} other run(s) read the same data "
                f"(the same data flags): not launched ({', '.join(spared)}). Fix the data, then rerun the same command"
            )
        return failed

    def _run_one(self, runner: Runner, run: RunSpec, tag: str) -> str:
        """``done``, ``failed``, or ``data`` (it failed loading its data)."""
        waited = False
        for _ in range(_MAX_TURNS):
            state = run_state(self.plan.experiment_dir, run)
            if state.status == "finished":
                by = "by the trainer it waited for" if waited else "earlier"
                self._print(f"{tag}: finished {by} ({_epochs(state.epochs_done)}), skipped")
                return "done"
            if state.status == "running":
                self._print(f"{tag}: a trainer already runs in its folder ({state.detail}); following it until it ends")
                self._follow(run)
                waited = True
                continue
            self._print(f"{tag}: {_how(run, state)}, {self.options.j} ranks under TorchX {LOCAL}")
            result = self._launch_and_wait(runner, run, tag)
            if result != "busy":
                return result
            waited = True  # another sweep's trainer took the folder first: follow it, then look again
        self._print(f"{tag}: FAILED: other trainers kept taking its folder; rerun the same command")
        return "failed"

    def _follow(self, run: RunSpec) -> None:
        """Print the evaluations of the trainer that holds ``run``'s folder until it lets go."""
        run_dir = os.path.join(self.plan.experiment_dir, run.name)
        follower = EvaluationFollower(run_dir, self._print)
        try:
            while live_holder(run_dir) is not None:
                follower.poll()
                time.sleep(_POLL_S)
        except (KeyboardInterrupt, SignalException) as e:
            raise SweepInterrupted(signal_of(e)) from None  # not ours to stop: that trainer keeps running
        follower.poll()

    def _launch_and_wait(self, runner: Runner, run: RunSpec, tag: str) -> str:
        """``done``, ``failed``, ``data`` (it failed loading its data), or ``busy`` (its trainer found another
        live one in the folder, or lost the race for it to one that has finished since)."""
        start = time.perf_counter()
        cfg = self.scheduler_cfg(run)
        handle = runner.schedule(runner.dryrun(self.app(run), LOCAL, cfg=cfg))
        follower = EvaluationFollower(os.path.join(self.plan.experiment_dir, run.name), self._print)
        try:
            while True:
                status, _ = job_state(runner, handle)
                follower.poll()
                if status is None or status.is_terminal():
                    break
                time.sleep(_POLL_S)
        except (KeyboardInterrupt, SignalException, SweepInterrupted) as e:
            runner.cancel(handle)
            name = e.signal_name if isinstance(e, SweepInterrupted) else signal_of(e)
            raise SweepInterrupted(name, run.name) from None
        follower.poll()
        seconds = time.perf_counter() - start
        if status is not None and status.state == AppState.SUCCEEDED:
            self._print(f"    done in {seconds:.0f} s")
            return "done"
        log = combined_log(launch_log_dir(str(cfg["log_dir"]), handle))  # this launch's, not another sweep's
        state = status.state.name if status is not None else "LOST"
        return self._failed(run, tag, log, f"({state}) after {seconds:.0f} s")

    def _failed(self, run: RunSpec, tag: str, log: Optional[str], how: str) -> str:
        """A launch of ``run`` that did not succeed, from its log: ``busy`` (another trainer holds or held its
        folder: the caller looks again), ``data`` (its data failed to load) or ``failed``, with one line."""
        reason = failure_reason(log) or disk_full(os.path.join(self.plan.experiment_dir, run.name))
        holder = live_holder(os.path.join(self.plan.experiment_dir, run.name))
        if holder is not None or (reason or "").startswith(f"{RunFolderBusy.__name__}:"):
            who = f" ({holder.describe()})" if holder is not None else ""
            self._print(f"{tag}: another trainer took its folder first{who}; following it")
            return "busy"  # the loop looks again: follows it while it runs, skips the run once it finished
        self._print(f"{tag}: FAILED {how}: {reason or 'see its log'}\n    its log: {log}")
        if reason is None and log and os.path.isfile(log):
            with open(log, errors="replace") as f:
                tail = f.readlines()[-25:]
            self._print("    " + "    ".join(tail).rstrip())
        return "data" if data_failed(log) else "failed"

    # -- clusters: one job per run ------------------------------------------------------

    def _submit(self, runner: Runner) -> List[str]:
        known = read_manifest(self.plan.experiment_dir)
        submitted, failed = 0, []
        for run in self.plan.runs:
            state = run_state(self.plan.experiment_dir, run)
            if state.status == "finished":
                self._print(f"{run.name}: finished earlier, skipped")
                continue
            handle = recorded_handle(known, run.name)
            holder = live_holder(os.path.join(self.plan.experiment_dir, run.name))
            if handle:
                status, why = job_state(runner, handle)
                if status is not None and not status.is_terminal():
                    self._print(f"{run.name}: job {handle} is still {status.state.name}, skipped")
                    continue
                stopped = why or f"it ended {status.state.name}"
                self._print(f"{run.name}: job {handle}: {stopped}; the run counts as stopped")
                if holder is not None and holder_is_job(holder, handle):
                    holder = None  # that job's lock outlived it (killed before releasing)
            if holder is not None:
                self._print(f"{run.name}: a trainer runs in its folder ({holder.describe()}), skipped")
                continue
            try:
                new = runner.schedule(runner.dryrun(self.app(run), self.options.scheduler, cfg=self.scheduler_cfg(run)))
            except Exception as e:  # one refused submission must not lose the others' handles
                self._print(f"{run.name}: submission failed: {e}")
                failed.append(run.name)
                continue
            # At once: an interrupted sweep keeps every handle.
            update_manifest(self.plan, {run.name: new}, j=self.options.j)
            submitted += 1
            how = {"resumable": "resumes", "stale": "starts over"}.get(state.status, "new")
            self._print(f"{run.name}: submitted as {new} ({how})")
        if submitted:
            self._print(f"when the jobs are done: dlrm-multiepoch compare {self.plan.experiment_dir}")
        return failed

    def scheduler_cfg(self, run: RunSpec) -> Dict[str, object]:
        """The scheduler options of ``run``'s job (``local_cwd``: its logs under ``<experiment>/logs/<run>``)."""
        cfg = dict(self.options.scheduler_cfg)
        if self.options.scheduler == LOCAL:
            cfg.setdefault("log_dir", os.path.join(self.plan.experiment_dir, LOGS_DIR, run.name))
        return cfg

    def _print(self, line: str) -> None:
        print(line, file=self.out or sys.stdout, flush=True)


def _epochs(n: int) -> str:
    return f"{n} epoch{'' if n == 1 else 's'}"


def _how(run: RunSpec, state: RunState) -> str:
    """What a launch of ``run`` does: how it starts (fresh, resuming, from another run's checkpoint: a search's
    branch) and how far it trains (its epochs, or the epoch it pauses at: ``--stop_at_epoch``)."""
    start_from, stop = flag_value(run.flags, "start_from"), flag_value(run.flags, "stop_at_epoch")
    if state.status == "resumable":
        how = f"resuming after epoch {state.epochs_done}"
    elif state.status == "stale":
        how = "starting over (no checkpoint)"
    elif start_from:
        checkpoint = os.path.normpath(start_from)  # <run folder>/checkpoints/step_S
        how = f"starting from {os.path.basename(os.path.dirname(os.path.dirname(checkpoint)))}'s "
        how += os.path.basename(checkpoint)
    else:
        how = "training"
    return f"{how}, {f'to epoch {stop} of {run.epochs}' if stop else _epochs(run.epochs)}"


def _same_data(a: RunSpec, b: RunSpec) -> bool:
    """Whether two runs read the same data (their app flags give the same data section)."""
    from dlrm_multiepoch.train.config import parse_config  # the sweep planned its runs with it: loaded

    return parse_config(list(a.flags)).data == parse_config(list(b.flags)).data

