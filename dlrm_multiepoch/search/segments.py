"""A search's branch segments trained by one job on ``local_cwd``: :mod:`~dlrm_multiepoch.search.worker`.

A search trains short segments (a branch up to a rung, then on); launched one job each, a
segment pays torchrun, the imports, the process group and the data before its first step
(about 11 s on the 2-core machine, more than an epoch of MovieLens-100k). On ``local_cwd``
the search instead keeps one training job, the *worker*, and posts each segment to it:
:class:`SegmentLauncher` is the sweep's launcher (run states, following another trainer, the
console, failures and interruptions as for any run) whose launch posts the run's flags to
the worker and waits for its answer. The worker is started at the first segment and again
after one that failed (a failed segment ends its job, as a failed launch does); it stops
when the search ends or is gone. On other schedulers each segment stays a job of its own.

Example::

    with SegmentWorker("runs/search", options) as worker:
        failed = SegmentLauncher(plan, options, worker, runner=runner).run()
"""

import os
import time
from typing import Any, Dict, Optional, TextIO

import torchx.components.dist as dist_components
from torchx.runner import Runner
from torchx.schedulers.local_scheduler import SignalException
from torchx.specs import AppDef

from dlrm_multiepoch.command_faults import signal_of
from dlrm_multiepoch.json_io import write_json
from dlrm_multiepoch.launch_options import LOCAL, TRAIN_MODULE, LaunchOptions
from dlrm_multiepoch.lock_holder import process_start
from dlrm_multiepoch.run_files import LOGS_DIR
from dlrm_multiepoch.search.worker import DRIVER_ENV, STOP_FILE, request_path
from dlrm_multiepoch.sweep.follow import EvaluationFollower
from dlrm_multiepoch.sweep.jobs import SweepInterrupted, combined_log, job_state, launch_log_dir
from dlrm_multiepoch.sweep.launch import SweepLauncher
from dlrm_multiepoch.sweep.plan import RunSpec, SweepPlan

WORKER_MODULE = "dlrm_multiepoch.search.worker"
_POLL_S = 0.1  # a segment can take a second: its end is noticed at once
_STOP_WAIT_S = 60.0


class SegmentWorker:
    """The worker job of one search (see the module docstring): started on demand, one request per segment.

    Args:
        experiment_dir: the search's folder; the job's queue and logs go to ``logs/worker/``.
        options: the launch options of every branch (``-j``, ``--env``, ...).
    """

    def __init__(self, experiment_dir: str, options: LaunchOptions) -> None:
        self.options = options
        self.folder = os.path.join(experiment_dir, LOGS_DIR, "worker")
        self.runner: Optional[Runner] = None
        self.handle: Optional[str] = None
        self.queue = ""
        self.number = 0
        self.starts = 0  # jobs started: each pays torchrun, the imports and the data once

    def app(self) -> AppDef:
        """The worker's job: this process's launch options, the worker module instead of the training app's."""
        kwargs = {k: v for k, v in self.options.component_kwargs().items() if k not in ("script", "m")}
        env = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **self.options.env, DRIVER_ENV: _this_process()}
        kwargs["env"] = env
        return dist_components.ddp(self.queue, m=WORKER_MODULE, name="search-worker", **kwargs)

    def _cfg(self) -> Dict[str, Any]:
        return {**self.options.scheduler_cfg, "log_dir": os.path.join(self.folder, "jobs")}

    def ensure(self, runner: Runner) -> None:
        """Start the job unless it runs."""
        if self.handle is not None:
            status, _ = job_state(runner, self.handle)
            if status is not None and not status.is_terminal():
                return
        self.runner = runner
        self.starts += 1
        self.queue = os.path.join(self.folder, f"queue-{self.starts}-{os.getpid()}-{time.time_ns()}")
        os.makedirs(self.queue)
        self.number = 0
        self.handle = runner.schedule(runner.dryrun(self.app(), LOCAL, cfg=self._cfg()))

    def post(self, run: RunSpec) -> int:
        """Hand ``run``'s flags to the job; returns the request's number."""
        self.number += 1
        write_json(request_path(self.queue, self.number), {"run": run.name, "flags": list(run.flags)})
        return self.number

    def done(self, number: int) -> bool:
        """Whether the job has trained request ``number``."""
        return os.path.isfile(request_path(self.queue, number, "done"))

    def log(self) -> Optional[str]:
        """The job's combined log (every segment it trained)."""
        return combined_log(launch_log_dir(str(self._cfg()["log_dir"]), self.handle)) if self.handle else None

    def cancel(self) -> None:
        """Stop the job now (an interrupted search: the segment in progress resumes from its checkpoint)."""
        if self.runner is not None and self.handle is not None:
            self.runner.cancel(self.handle)
        self.handle = None

    def __enter__(self) -> "SegmentWorker":
        return self

    def __exit__(self, *_: object) -> None:
        """Let the job end (the stop file), or cancel it if it does not within a minute."""
        if self.runner is None or self.handle is None:
            return
        try:
            write_json(os.path.join(self.queue, STOP_FILE), {"why": "the search is done"})
        except OSError:  # a full disk, a read-only folder: the job cannot be told, so it is stopped
            self.cancel()
            return
        deadline = time.monotonic() + _STOP_WAIT_S
        while time.monotonic() < deadline:
            status, _ = job_state(self.runner, self.handle)
            if status is None or status.is_terminal():
                self.handle = None
                return
            time.sleep(_POLL_S)
        self.cancel()


class SegmentLauncher(SweepLauncher):
    """The sweep's launcher whose launch of a run posts it to a :class:`SegmentWorker` (``local_cwd`` only).

    Args:
        plan: the runs (a search's branch segments: each a run with its ``--stop_at_epoch``).
        options: how they are launched.
        worker: the job that trains them.
        out: the console.
        runner: a TorchX runner.
    """

    def __init__(
        self, plan: SweepPlan, options: LaunchOptions, worker: SegmentWorker, out: Optional[TextIO] = None,
        runner: Optional[Runner] = None,
    ) -> None:  # fmt: skip
        super().__init__(plan, options, out=out, runner=runner)
        self.worker = worker

    def _launch_and_wait(self, runner: Runner, run: RunSpec, tag: str) -> str:
        """As a launch: ``done``, ``failed``, ``data`` (its data failed to load) or ``busy`` (another trainer
        holds its folder); the worker trains it instead of a job of its own."""
        start = time.perf_counter()
        self.worker.ensure(runner)
        number = self.worker.post(run)
        follower = EvaluationFollower(os.path.join(self.plan.experiment_dir, run.name), self._print)
        ended = False
        try:
            while not ended:
                follower.poll()
                if self.worker.done(number):
                    break
                status, _ = job_state(runner, self.worker.handle)  # type: ignore[arg-type]
                ended = status is None or status.is_terminal()
                time.sleep(0 if ended else _POLL_S)
        except (KeyboardInterrupt, SignalException, SweepInterrupted) as e:
            self.worker.cancel()
            name = e.signal_name if isinstance(e, SweepInterrupted) else signal_of(e)
            raise SweepInterrupted(name, run.name) from None
        follower.poll()
        seconds = time.perf_counter() - start
        if not ended:
            self._print(f"    done in {seconds:.0f} s")
            return "done"
        log = self.worker.log()
        self.worker.handle = None  # the job ended with this segment: the next one starts another
        return self._failed(run, tag, log, f"(its search's training job ended) after {seconds:.0f} s")


def _this_process() -> str:
    """``PID:START`` of this process, which the worker watches."""
    start = process_start(os.getpid())
    return f"{os.getpid()}:{start if start not in (None, -1) else ''}"


def worker_launches(options: LaunchOptions) -> bool:
    """Whether a search trains its segments in a worker job: on ``local_cwd``, not in a dry run, and only
    when each segment runs the package's training app (the worker runs its Trainer, not a user's ``--script``)."""
    return options.scheduler == LOCAL and not options.dryrun and not options.script and options.m == TRAIN_MODULE

