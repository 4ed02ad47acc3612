"""Launch a sweep's runs through TorchX: one after another on ``local_cwd``, one job each elsewhere.

Each run is the ``dlrm_multiepoch.train`` component (``apps/train.py`` under
``torchrun``) with the run's flags, submitted with TorchX's ``Runner`` to the chosen
scheduler. Finished runs are skipped; unfinished ones with a checkpoint resume
(every run gets ``--resume auto``); an unfinished folder without a checkpoint starts
over. On ``local_cwd`` the sweep waits for each run and prints its evaluations as they
land; on a cluster scheduler it submits every unfinished run as its own job, records
the job handles in the manifest, and a later call skips runs whose job is still alive.

Example::

    launcher = SweepLauncher(plan, LaunchOptions(scheduler="local_cwd", j="1x2"))
    failed = launcher.run()
"""

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, TextIO

from torchx.runner import Runner, get_runner
from torchx.specs import AppDef, AppState

from dlrm_multiepoch import components
from dlrm_multiepoch.sweep.follow import EvaluationFollower
from dlrm_multiepoch.sweep.plan import SUMMARY, RunSpec, RunState, SweepPlan, read_manifest, run_state, update_manifest

LOCAL = "local_cwd"
_POLL_S = 2.0


@dataclass
class LaunchOptions:
    """How each run is launched (the ``dlrm_multiepoch.train`` component's job parameters).

    Args:
        scheduler: TorchX scheduler (``local_cwd``, ``slurm``, ``kubernetes``, ...).
        scheduler_cfg: its run options (``-cfg``), e.g. ``{"queue": "default"}``.
        j: ``{nnodes}x{nproc_per_node}`` of every run.
        dryrun: print each run's scheduler request instead of submitting it.
        script, cpu, gpu, memMB, h, image, env, max_retries, mounts: as in the component.
    """

    scheduler: str = LOCAL
    scheduler_cfg: Dict[str, object] = field(default_factory=dict)
    j: str = "1x2"
    dryrun: bool = False
    script: str = "apps/train.py"
    cpu: int = 2
    gpu: int = 0
    memMB: int = 8192
    h: Optional[str] = None
    image: str = ""
    env: Dict[str, str] = field(default_factory=dict)
    max_retries: int = 0
    mounts: List[str] = field(default_factory=list)


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

    def app(self, run: RunSpec) -> AppDef:
        """The run's job: the ``train`` component with the run's flags."""
        o = self.options
        env = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **o.env} if o.scheduler == LOCAL else dict(o.env)
        extra = {"image": o.image} if o.image else {}
        return components.train(
            *run.flags, script=o.script, j=o.j, cpu=o.cpu, gpu=o.gpu, memMB=o.memMB, h=o.h,
            name=f"{os.path.basename(os.path.normpath(self.plan.experiment_dir))}/{run.name}",
            env=env, max_retries=o.max_retries, mounts=o.mounts or None, **extra,
        )  # fmt: skip

    def run(self) -> List[str]:
        """Launch every unfinished run; return the names of runs that failed (local) or could not be submitted."""
        if not self.options.dryrun:
            update_manifest(self.plan)
        runner = self._runner or get_runner()
        try:
            if self.options.dryrun:
                for run in self.plan.runs:
                    self._print(f"=== run {run.name} ({run.epochs} epochs) ===")
                    self._print(str(runner.dryrun(self.app(run), self.options.scheduler, cfg=self._cfg(run))))
                return []
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
        failed = []
        total = len(self.plan.runs)
        for i, run in enumerate(self.plan.runs, 1):
            tag = f"[{i}/{total}] {run.name}"
            state = run_state(self.plan.experiment_dir, run)
            if state.status == "finished":
                self._print(f"{tag}: finished earlier ({_epochs(state.epochs_done)}), skipped")
                continue
            self._clear_if_stale(run, state, tag)
            how = f"resuming after epoch {state.epochs_done}" if state.status == "resumable" else "training"
            self._print(f"{tag}: {how}, {_epochs(run.epochs)}, {self.options.j} ranks under TorchX {LOCAL}")
            if not self._launch_and_wait(runner, run, tag):
                failed.append(run.name)
        return failed

    def _launch_and_wait(self, runner: Runner, run: RunSpec, tag: str) -> bool:
        start = time.perf_counter()
        cfg = self._cfg(run)
        handle = runner.schedule(runner.dryrun(self.app(run), LOCAL, cfg=cfg))
        follower = EvaluationFollower(os.path.join(self.plan.experiment_dir, run.name, SUMMARY), self._print)
        try:
            while True:
                status = runner.status(handle)
                follower.poll()
                if status is None or status.is_terminal():
                    break
                time.sleep(_POLL_S)
        except KeyboardInterrupt:
            runner.cancel(handle)
            raise
        follower.poll()
        seconds = time.perf_counter() - start
        if status is not None and status.state == AppState.SUCCEEDED:
            self._print(f"    done in {seconds:.0f} s")
            return True
        log = _combined_log(str(cfg["log_dir"]))
        state = status.state.name if status is not None else "LOST"
        self._print(f"{tag}: FAILED ({state}) after {seconds:.0f} s; its log: {log}")
        if log and os.path.isfile(log):
            with open(log, errors="replace") as f:
                tail = f.readlines()[-25:]
            self._print("    " + "    ".join(tail).rstrip())
        return False

    # -- clusters: one job per run ------------------------------------------------------

    def _submit(self, runner: Runner) -> List[str]:
        known = read_manifest(self.plan.experiment_dir).get("runs", {})
        handles: Dict[str, str] = {}
        failed = []
        for run in self.plan.runs:
            state = run_state(self.plan.experiment_dir, run)
            if state.status == "finished":
                self._print(f"{run.name}: finished earlier, skipped")
                continue
            handle = known.get(run.name, {}).get("handle")
            if handle:
                status = runner.status(handle)
                if status is not None and not status.is_terminal():
                    self._print(f"{run.name}: job {handle} is still {status.state.name}, skipped")
                    continue
            self._clear_if_stale(run, state, run.name)
            try:
                handles[run.name] = runner.schedule(runner.dryrun(self.app(run), self.options.scheduler, cfg=self._cfg(run)))
            except Exception as e:  # one refused submission must not lose the others' handles
                self._print(f"{run.name}: submission failed: {e}")
                failed.append(run.name)
                continue
            self._print(f"{run.name}: submitted as {handles[run.name]} ({state.status})")
        update_manifest(self.plan, handles)
        if handles:
            self._print(f"when the jobs are done: dlrm-multiepoch compare {self.plan.experiment_dir}")
        return failed

    def _clear_if_stale(self, run: RunSpec, state: RunState, tag: str) -> None:
        if state.status != "stale":
            return
        # Nothing to resume from: clear what the interrupted launch logged, so its curves
        # do not mix with the new run's in TensorBoard.
        self._print(f"{tag}: unfinished and without a checkpoint, starting over")
        shutil.rmtree(os.path.join(self.plan.experiment_dir, run.name))

    def _cfg(self, run: RunSpec) -> Dict[str, object]:
        cfg = dict(self.options.scheduler_cfg)
        if self.options.scheduler == LOCAL:
            cfg.setdefault("log_dir", os.path.join(self.plan.experiment_dir, "logs", run.name))
        return cfg

    def _print(self, line: str) -> None:
        print(line, file=self.out or sys.stdout, flush=True)


def _epochs(n: int) -> str:
    return f"{n} epoch{'' if n == 1 else 's'}"


def _combined_log(log_dir: str) -> Optional[str]:
    """The first replica's combined stdout/stderr under a local scheduler's ``log_dir``."""
    found = []
    for root, _, files in os.walk(log_dir):
        if "combined.log" in files:
            found.append(os.path.join(root, "combined.log"))
    return max(found, key=os.path.getmtime) if found else None
