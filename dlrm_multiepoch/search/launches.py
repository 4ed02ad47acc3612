"""How the search trains a branch up to a point: its flags, the checkpoint it starts from, its launch.

Every launch goes through the sweep's :class:`~dlrm_multiepoch.sweep.launch.SweepLauncher`
(so a branch is a sweep run: the same lock, follow, resume and failure handling): on
``local_cwd`` one segment after another, stopping at the first that fails, each trained by
the search's one training job (:mod:`~dlrm_multiepoch.search.segments`: torchrun, imports,
process group and data paid once; ``shared=False``: one job per segment); elsewhere one job
per branch, a wave of jobs the search waits for. Each segment is recorded on its branch
(``to_epoch``, ``started_at``, ``wall_s``, ``before_first_step_s``, ``new_job``: whether it
started a job) and the record is saved before and after it, so an interrupted or killed
search keeps what its launches cost.

Example::

    launcher = BranchLauncher("runs/search", tree, 3, ["--dataset", "movielens"], LaunchOptions(), rungs=6)
    failed = launcher.launch(0, [(joint, 1.3)], branches, save=lambda: None)
"""

import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO, Tuple

from torchx.runner import Runner, get_runner

from dlrm_multiepoch.data.fetch import default_cache_dir
from dlrm_multiepoch.run_files import checkpoint_problem, checkpoints_dir, complete_checkpoints, epoch_end
from dlrm_multiepoch.run_files import read_manifest, read_summary
from dlrm_multiepoch.search.candidates import Candidate
from dlrm_multiepoch.search.branches import BranchRecord, SearchError, run_name
from dlrm_multiepoch.search.segments import SegmentLauncher, SegmentWorker, worker_launches
from dlrm_multiepoch.sweep.jobs import job_state
from dlrm_multiepoch.sweep.launch import LOCAL, LaunchOptions, SweepLauncher
from dlrm_multiepoch.sweep.manifest import recorded_handle
from dlrm_multiepoch.sweep.plan import build_plan
from dlrm_multiepoch.sweep.strategies import Strategy, flag_value

_POLL_S = 5.0


class BranchLauncher:
    """Launches branches of one search (see the module docstring).

    Args:
        experiment_dir: the search's folder.
        tree: its candidates.
        budget: the epoch budget E.
        common_flags: the app flags of every branch.
        options: how runs are launched (the sweep's).
        rungs: how many rungs the search has: a branch keeps a checkpoint of each whole epoch and each rung.
        out: console (default stdout).
        shared: on ``local_cwd``, train the segments in one job (False: one job each, as on clusters).
    """

    def __init__(
        self,
        experiment_dir: str,
        tree: Sequence[Candidate],
        budget: int,
        common_flags: Sequence[str],
        options: LaunchOptions,
        rungs: int,
        out: Optional[TextIO] = None,
        shared: bool = True,
    ) -> None:
        self.dir = experiment_dir
        self.by_name = {c.name: c for c in tree}
        self.budget = budget
        self.common = list(common_flags)
        self.options = options
        self.rungs = rungs
        self.out = out
        self.shared = shared and worker_launches(options)
        self.runner: Optional[Runner] = None
        self.worker: Optional[SegmentWorker] = None
        self.cache_dir = flag_value(tuple(common_flags), "cache_dir") or default_cache_dir()  # checkpoint digests

    def __enter__(self) -> "BranchLauncher":
        self.runner = get_runner()
        self.worker = SegmentWorker(self.dir, self.options) if self.shared else None
        return self

    def __exit__(self, *_: object) -> None:
        if self.worker is not None:
            self.worker.__exit__()
            self.worker = None
        if self.runner is not None:
            self.runner.close()
            self.runner = None

    def strategy(self, c: Candidate, seed: int, stop: float) -> Strategy:
        """The sweep strategy of one launch of ``c``: its schedule, paused at ``stop`` epochs, from its fork."""
        keep = c.epochs + 1 + self.rungs  # every whole epoch (the deployables) and every rung it pauses at
        flags = [*c.flags, "--stop_at_epoch", f"{stop:g}", "--keep_checkpoints", str(keep)]
        if c.parent is not None:
            flags += ["--start_from", self.fork_checkpoint(c, seed)]
        return Strategy(c.name, tuple(flags), help=f"search branch of {c.parent or 'nothing'}", epochs=c.epochs)

    def fork_checkpoint(self, c: Candidate, seed: int) -> str:
        """The parent's checkpoint after ``c.fork`` whole epochs (a branch with a checkpoint of its own resumes
        from that: the one it started from then, which pruning may have removed since), in the folder where
        the experiment is now: a folder moved or copied continues (its recorded path is where it was).

        Raises:
            SearchError: a branch without a checkpoint whose parent holds none after its fork, naming the folder.
        """
        own = os.path.join(self.dir, run_name(c.name, seed))
        folder = checkpoints_dir(os.path.join(self.dir, run_name(str(c.parent), seed)))
        if complete_checkpoints(checkpoints_dir(own)):
            try:
                started = read_summary(own).get("started_from")
            except ValueError:
                started = None
            if isinstance(started, dict) and isinstance(started.get("path"), str):
                return os.path.join(folder, os.path.basename(os.path.normpath(started["path"])))
        problems = []
        for _, path in complete_checkpoints(folder):
            if epoch_end(path) == c.fork:  # a damaged one is not one to start from (its trainer would refuse it)
                problem = checkpoint_problem(path, self.cache_dir)
                if problem is None:
                    return path
                problems.append(problem)
        held = f"holds none intact ({problems[0]})" if problems else "holds none (deleted?)"
        raise SearchError(
            f"branch {run_name(c.name, seed)} starts from its parent's checkpoint after epoch {c.fork}, but {folder} "
            f"{held}: move {os.path.dirname(folder)} aside to train the parent again"
        )

    def launch(
        self, seed: int, items: List[Tuple[Candidate, float]], branches: Dict[str, BranchRecord], save: Callable[[], None]
    ) -> List[str]:
        """Train each ``(branch, stop epoch)``; returns the runs that failed (local: the first, then it stops)."""
        strategies = [self.strategy(c, seed, stop) for c, stop in items]
        if self.options.scheduler == LOCAL or self.options.dryrun:
            for (c, stop), strategy in zip(items, strategies):
                failed = self._timed([branches[c.name]], stop, save, lambda: self._launcher([strategy], seed).run())
                self._first_step(branches[c.name].launches[-1], os.path.join(self.dir, run_name(c.name, seed)))
                if failed:
                    return failed
            return []
        launcher = self._launcher(strategies, seed)

        def run_wave() -> List[str]:
            failed = launcher.run()
            return failed + self._wait([r.name for r in launcher.plan.runs if r.name not in failed])

        return self._timed([branches[c.name] for c, _ in items], items[0][1], save, run_wave, stops=[s for _, s in items])

    def _timed(
        self,
        records: List[BranchRecord],
        stop: float,
        save: Callable[[], None],
        run: Callable[[], List[str]],
        stops: Optional[List[float]] = None,
    ) -> List[str]:
        """Run ``run`` with a launch entry on each record, saved before (``wall_s`` None) and after."""
        entries = []
        for record, to in zip(records, stops or [stop]):
            entry: Dict[str, Any] = {"to_epoch": to, "wall_s": None, "started_at": round(time.time(), 3)}
            if stops is not None:
                entry["parallel"] = True
            record.launches.append(entry)
            entries.append(entry)
        save()
        start, jobs = time.perf_counter(), self.worker.starts if self.worker is not None else None
        try:
            return run()
        finally:
            for entry in entries:
                entry["wall_s"] = round(time.perf_counter() - start, 1)
                entry["new_job"] = jobs is None or self.worker is None or self.worker.starts > jobs
            save()

    @staticmethod
    def _first_step(entry: Dict[str, Any], run_dir: str) -> None:
        """The seconds from the segment's launch to its training's start (its trainer records when it began)."""
        try:
            began = read_summary(run_dir).get("train_started_at")
        except ValueError:
            return
        if isinstance(began, (int, float)) and began >= entry["started_at"]:
            entry["before_first_step_s"] = round(began - entry["started_at"], 2)

    def _launcher(self, strategies: List[Strategy], seed: int) -> SweepLauncher:
        plan = build_plan(self.dir, strategies, [seed], self.budget, self.common)
        if self.worker is not None:
            return SegmentLauncher(plan, self.options, self.worker, out=self.out, runner=self.runner)
        return SweepLauncher(plan, self.options, out=self.out, runner=self.runner)

    def _wait(self, names: List[str]) -> List[str]:
        """Wait for the submitted jobs of ``names`` (cluster schedulers); return those that did not succeed."""
        assert self.runner is not None
        manifest = read_manifest(self.dir)
        pending = {n: h for n in names if (h := recorded_handle(manifest, n))}
        failed = []
        while pending:
            for name, handle in list(pending.items()):
                status, why = job_state(self.runner, handle)
                if status is None or status.is_terminal():
                    del pending[name]
                    if status is None or status.state.name != "SUCCEEDED":
                        failed.append(name)
                        self._say(f"{name}: job {handle} ended {status.state.name if status else why}")
            time.sleep(_POLL_S if pending else 0)
        return failed

    def _say(self, line: str) -> None:
        print(line, file=self.out or sys.stdout, flush=True)
