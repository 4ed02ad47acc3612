"""The search loop: advance branches rung by rung through TorchX launches, prune, choose what to deploy.

For each seed (an independent search): at every rung (a whole epoch, or a candidate's
first judgement inside an epoch, :func:`~dlrm_multiepoch.search.pruning.rung_points`)
where the rule could cut something (:func:`~dlrm_multiepoch.search.pruning.compared_at`),
each branch compared there is trained up to it (``--stop_at_epoch``, a fraction inside an
epoch; a branch's first launch starts from its parent's checkpoint with ``--start_from``,
later ones continue with ``--resume auto``), then :func:`~dlrm_multiepoch.search.pruning.prune_rung` cuts. The
survivors are then trained to their ends, and :func:`~dlrm_multiepoch.search.pruning.choose`
picks the checkpoint to deploy. Every launch goes through the sweep's
:class:`~dlrm_multiepoch.sweep.launch.SweepLauncher`: one after another on ``local_cwd``,
one job per branch elsewhere (a wave of parents, then a wave of their branches; the
search waits for each wave's jobs). Everything it decides follows from the run
folders, so rerunning the same command after an interruption continues.

Example::

    search = ScheduleSearch("runs/search", candidate_tree(3), [0], 3, ["--dataset", "movielens"],
                            LaunchOptions(scheduler="local_cwd"))
    failed = search.run()
"""

import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, TextIO, Tuple

from torchx.runner import Runner, get_runner

from dlrm_multiepoch.auto.config import METRIC_SIGN
from dlrm_multiepoch.search.candidates import Candidate, sweep_epochs
from dlrm_multiepoch.search.pruning import DEFAULT_RUNG_FRACTION, Curve, choose, compared_at, prune_rung, rung_points
from dlrm_multiepoch.search.record import BranchRecord, branch_dict, deployable, format_curve, read_branch
from dlrm_multiepoch.search.record import read_record, run_name, write_record
from dlrm_multiepoch.sweep.launch import LOCAL, LaunchOptions, SweepLauncher
from dlrm_multiepoch.run_files import checkpoints_dir, complete_checkpoints, read_manifest, read_optional_json
from dlrm_multiepoch.run_files import read_summary, state_path
from dlrm_multiepoch.sweep.plan import RunSpec, build_plan, run_state
from dlrm_multiepoch.sweep.strategies import Strategy

_POLL_S = 5.0


@dataclass
class SearchSettings:
    """What a search decides on: the validation objective, the halving factor, where first judgements fall.

    Args:
        metric: validation metric (``cal_ne``, ``auc``, ``logloss``, ``ne``): the runs' ``--auto_metric``.
        task_weights: ``--auto_task_weights`` of the runs, e.g. ``{"like": 1.0}`` (empty: equal).
        eta: successive-halving factor: the top ``ceil(n / eta)`` judged branches go on.
        rung_fraction: a candidate is first judged this fraction of an epoch after its tables
            (and its own suffix) started (``--rung_fraction``; 1: after a whole epoch).
    """

    metric: str
    task_weights: Dict[str, float]
    eta: int
    rung_fraction: float = DEFAULT_RUNG_FRACTION

    @property
    def sign(self) -> float:
        """+1 when a higher metric is better (AUC), -1 otherwise: the objective is ``sign * metric``."""
        return METRIC_SIGN[self.metric]


class ScheduleSearch:
    """Runs the search of ``tree`` for each seed in ``experiment_dir``.

    Args:
        experiment_dir: folder of the branches' run folders, ``sweep.json`` and ``search.json``.
        tree: the candidates (:func:`~dlrm_multiepoch.search.candidates.candidate_tree`).
        seeds: one independent search per seed.
        budget: the epoch budget E.
        common_flags: training-app flags of every branch.
        options: how runs are launched (the sweep's).
        settings: objective and halving factor.
        out: console (default stdout).
    """

    def __init__(
        self,
        experiment_dir: str,
        tree: Sequence[Candidate],
        seeds: Sequence[int],
        budget: int,
        common_flags: Sequence[str],
        options: LaunchOptions,
        settings: SearchSettings,
        out: Optional[TextIO] = None,
    ) -> None:
        self.dir = experiment_dir
        self.tree = list(tree)
        self.by_name = {c.name: c for c in self.tree}
        self.seeds = list(seeds)
        self.budget = budget
        self.common = list(common_flags)
        self.options = options
        self.settings = settings
        self.out = out
        self.rungs = rung_points(self.tree, settings.rung_fraction)
        self.record: Dict[str, Any] = {
            "budget": budget, "metric": settings.metric, "task_weights": settings.task_weights, "eta": settings.eta,
            "rung_fraction": settings.rung_fraction,
            "common_flags": self.common, "candidates": [c.name for c in self.tree],
            "seeds": dict(read_record(experiment_dir).get("seeds", {})),  # other seeds' searches stay
        }  # fmt: skip
        self._runner: Optional[Runner] = None

    def run(self) -> List[str]:
        """Search every seed; returns the branches whose launch failed (empty: done)."""
        self._runner = get_runner()
        try:
            for seed in self.seeds:
                failed = self._search(seed)
                if failed:
                    return failed
        finally:
            self._runner.close()
        return []

    # -- one seed --------------------------------------------------------------------

    def _search(self, seed: int) -> List[str]:
        start = time.perf_counter()
        branches = {c.name: BranchRecord.of(c) for c in self.tree}
        before = read_record(self.dir).get("seeds", {}).get(str(seed), {})
        for name, earlier in before.get("branches", {}).items():  # an interrupted or finished earlier invocation
            if name in branches:
                branches[name].launches = list(earlier.get("launches", []))
        rungs: List[Dict[str, Any]] = []
        entry = {
            "branches": branches,
            "rungs": rungs,
            "previous_wall_s": float(before.get("cost", {}).get("wall_s", 0.0)),
        }
        self._say(
            f"search seed {seed}: {len(self.tree)} candidates, budget {self.budget} epochs, decides on validation "
            f"{self.settings.metric} (--auto_metric), eta {self.settings.eta}, first judgements "
            f"{self.settings.rung_fraction:g} epoch after a branch's tables start"
        )
        if self.options.dryrun:  # what follows depends on the results: show the roots' launches
            roots = [(c, c.epochs) for c in self.tree if c.parent is None]
            return self._launch(seed, roots, branches)
        f = self.settings.rung_fraction
        for point in self.rungs:
            judged = compared_at(point, self._live(seed, branches, point), f)
            if not judged:
                continue
            failed = self._advance(seed, [(c, point) for c in judged], branches)
            if failed:
                return self._stop(seed, entry, start, failed)
            curves = self._curves(seed, branches)
            live = self._live(seed, branches, point)
            cuts = prune_rung(point, live, curves, self.settings.eta, f, self.settings.sign)
            for name, reason in cuts.items():
                branches[name].status, branches[name].reason, branches[name].cut_at = "cut", reason, point
            kept = [c for c in judged if c.name not in cuts]
            for c in kept:
                value = f"{self.settings.sign * curves[c.name].values[point]:.4f}"
                reference = "" if c.judged_at(point, f) else f"; a reference until {c.judged_from(f):g}"
                note = f"kept after epoch {point:g} ({value}{reference})"
                branches[c.name].reason = "; ".join(filter(None, [branches[c.name].reason, note]))
            rungs.append({
                "epoch": point, "judged": [c.name for c in judged], "cuts": cuts, "kept": [c.name for c in kept],
                "references": [c.name for c in judged if not c.judged_at(point, f)],
            })  # fmt: skip
            self._say(f"rung after epoch {point:g} (seed {seed}): compared {', '.join(c.name for c in judged)}")
            for c in judged:
                verdict = f"CUT, {cuts[c.name]}" if c.name in cuts else "kept" + _reference_note(c, point, f)
                self._say(
                    f"    {c.name:<10} val {self.settings.metric} {format_curve(branches[c.name].curve)}  -> {verdict}"
                )
        live = self._live(seed, branches)
        failed = self._advance(seed, [(c, c.epochs) for c in live], branches)
        if failed:
            return self._stop(seed, entry, start, failed)
        for c in self._live(seed, branches):
            record = branches[c.name]
            record.status, record.reason = "finished", "; ".join(filter(None, [record.reason, "trained to its end"]))
        self._finish(seed, entry, start)
        return []

    def _live(self, seed: int, branches: Dict[str, BranchRecord], epoch: float = math.inf) -> List[Candidate]:
        """Branches neither cut nor ended before ``epoch`` (``auto`` may stop itself before its end).

        A branch that stopped itself after the rung ``epoch`` was live there: a rerun that
        finds it stopped must judge it at that rung as the first invocation did.
        """
        live = []
        for c in self.tree:
            record = branches[c.name]
            if record.status == "cut":
                continue
            done, finished = self._progress(c, seed)
            if finished and done < min(c.epochs, epoch):
                record.status, record.reason = (
                    "finished",
                    f"stopped itself after epoch {done} (its own validation rule)",
                )
                continue
            live.append(c)
        return live

    def _progress(self, c: Candidate, seed: int) -> Tuple[float, bool]:
        """Epochs the branch has trained (0 before its first launch; a fraction after a pause inside an epoch),
        and whether its run ended."""
        state = run_state(self.dir, RunSpec(run_name(c.name, seed), c.name, seed, c.epochs, ()))
        if state.status in ("new", "stale"):  # stale: evaluated but no checkpoint to go on from; it starts over
            return 0, False
        if state.status != "resumable":
            return state.epochs_done, state.status == "finished"
        return max(float(state.epochs_done), self._checkpointed_epochs(c, seed)), False

    def _checkpointed_epochs(self, c: Candidate, seed: int) -> float:
        """Epochs up to the branch's newest checkpoint (its step over the steps per epoch of its evaluations)."""
        run_dir = self._run_dir(c, seed)
        saved = complete_checkpoints(checkpoints_dir(run_dir))
        evaluations = read_summary(run_dir).get("evaluations", [])
        per_epoch = [e["step"] / e["epoch"] for e in evaluations if e["epoch"]]
        if not saved or not per_epoch:
            return 0.0
        epochs = saved[-1][0] / per_epoch[0]
        # A pause at a rung is at step round(rung * steps per epoch): within half a step of it.
        return next((p for p in self.rungs if abs(epochs - p) <= 0.5 / per_epoch[0] + 1e-9), epochs)

    def _curves(self, seed: int, branches: Dict[str, BranchRecord]) -> Dict[str, Curve]:
        """Every branch's validation curve (a branch not started yet: its parent's, up to the fork)."""
        curves: Dict[str, Curve] = {}
        for c in self.tree:
            curve, facts = read_branch(
                self._run_dir(c, seed), self.settings.metric, self.settings.task_weights, self.rungs
            )
            if not curve.values and c.parent is not None:
                curve = Curve({e: v for e, v in curves[c.parent].values.items() if e <= c.fork})
            curves[c.name] = curve
            record = branches[c.name]
            record.curve = {f"{e:g}": self.settings.sign * v for e, v in sorted(curve.values.items())}
            record.test_auc = {str(e): aucs for e, aucs in sorted(facts["test_auc"].items())}
            record.trained_steps = max(facts["last_step"] - facts["start_step"], 0)
        return curves

    # -- launching ---------------------------------------------------------------------

    def _advance(
        self, seed: int, targets: List[Tuple[Candidate, float]], branches: Dict[str, BranchRecord]
    ) -> List[str]:
        """Train each ``(branch, point)`` up to that point (epochs), parents first; returns the failed runs."""
        waves: List[Dict[str, float]] = [{}, {}]
        for c, epoch in targets:
            if self._progress(c, seed)[0] >= epoch:
                continue
            if c.parent is not None and self._progress(c, seed)[0] == 0:
                parent = self.by_name[c.parent]
                if self._progress(parent, seed)[0] < c.fork:
                    # Never compared before its end (delayed): trained through in one launch.
                    to = c.fork if self._compared_before_end(parent) else parent.epochs
                    waves[0][parent.name] = max(waves[0].get(parent.name, 0), to)
                    waves[1][c.name] = epoch
                    continue
            waves[0][c.name] = max(waves[0].get(c.name, 0), epoch)
        for wave in waves:
            if not wave:
                continue
            failed = self._launch(seed, [(self.by_name[n], e) for n, e in wave.items()], branches)
            if failed:
                return failed
        return []

    def _compared_before_end(self, c: Candidate) -> bool:
        """Whether a rung before its end may compare ``c`` (with every candidate still in)."""
        return any(c in compared_at(p, self.tree, self.settings.rung_fraction) for p in self.rungs if p < c.epochs)

    def _strategy(self, c: Candidate, seed: int, stop: float) -> Strategy:
        # Checkpoints kept: every whole epoch (the deployables) and every rung it pauses at.
        keep = c.epochs + 1 + len(self.rungs)
        flags = [*c.flags, "--stop_at_epoch", f"{stop:g}", "--keep_checkpoints", str(keep)]
        if c.parent is not None:
            flags += ["--start_from", self._fork_checkpoint(c, seed)]
        return Strategy(c.name, tuple(flags), help=f"search branch of {c.parent or 'nothing'}", epochs=c.epochs)

    def _fork_checkpoint(self, c: Candidate, seed: int) -> str:
        """The parent's checkpoint after ``c.fork`` whole epochs."""
        folder = checkpoints_dir(self._run_dir(self.by_name[str(c.parent)], seed))
        for _, path in complete_checkpoints(folder) if os.path.isdir(folder) else []:
            progress = read_optional_json(state_path(path)).get("parts", {}).get("progress", {})
            if progress.get("epoch") == c.fork and progress.get("batch_in_epoch") == 0:
                return path
        raise FileNotFoundError(f"branch {c.name}: {folder} holds no checkpoint after epoch {c.fork} to start from")

    def _launch(self, seed: int, items: List[Tuple[Candidate, float]], branches: Dict[str, BranchRecord]) -> List[str]:
        """Launch ``(branch, stop epoch)`` runs: one after another locally, as parallel jobs elsewhere."""
        strategies = [self._strategy(c, seed, stop) for c, stop in items]
        if self.options.scheduler == LOCAL or self.options.dryrun:
            failed = []
            for (c, stop), strategy in zip(items, strategies):
                t0 = time.perf_counter()
                failed += self._launcher([strategy], seed).run()
                branches[c.name].launches.append({"to_epoch": stop, "wall_s": round(time.perf_counter() - t0, 1)})
            return failed
        t0 = time.perf_counter()
        launcher = self._launcher(strategies, seed)
        failed = launcher.run()
        failed += self._wait([r.name for r in launcher.plan.runs if r.name not in failed])
        wall = round(time.perf_counter() - t0, 1)
        for c, stop in items:
            branches[c.name].launches.append({"to_epoch": stop, "wall_s": wall, "parallel": True})
        return failed

    def _launcher(self, strategies: List[Strategy], seed: int) -> SweepLauncher:
        plan = build_plan(self.dir, strategies, [seed], self.budget, self.common)
        return SweepLauncher(plan, self.options, out=self.out, runner=self._runner)

    def _wait(self, names: List[str]) -> List[str]:
        """Wait for the submitted jobs of ``names`` (cluster schedulers); return those that did not succeed."""
        assert self._runner is not None
        handles = {n: read_manifest(self.dir)["runs"][n].get("handle") for n in names}
        pending = {n: h for n, h in handles.items() if h}
        failed = []
        while pending:
            for name, handle in list(pending.items()):
                status = self._runner.status(handle)
                if status is None or status.is_terminal():
                    del pending[name]
                    if status is None or status.state.name != "SUCCEEDED":
                        failed.append(name)
                        self._say(f"{name}: job {handle} ended {status.state.name if status else 'LOST'}")
            time.sleep(_POLL_S if pending else 0)
        return failed

    # -- the record ----------------------------------------------------------------------

    def _run_dir(self, c: Candidate, seed: int) -> str:
        return os.path.join(self.dir, run_name(c.name, seed))

    def _stop(self, seed: int, entry: Dict[str, Any], start: float, failed: List[str]) -> List[str]:
        self._save(seed, entry, start, None)
        self._say(f"search seed {seed}: {len(failed)} launch(es) failed ({', '.join(failed)}); rerun the same command")
        return failed

    def _finish(self, seed: int, entry: Dict[str, Any], start: float) -> None:
        curves = self._curves(seed, entry["branches"])
        choice = choose(self.tree, curves)
        deploy = None
        if choice is not None:
            run_dir = self._run_dir(self.by_name[choice.branch], seed)
            deploy = deployable(run_dir, choice, self.settings.metric, self.settings.task_weights)
        self._save(seed, entry, start, deploy)
        self._summarise(seed, entry, deploy)

    def _save(self, seed: int, entry: Dict[str, Any], start: float, deploy: Optional[Dict[str, Any]]) -> None:
        branches: Dict[str, BranchRecord] = entry["branches"]
        wall = entry["previous_wall_s"] + time.perf_counter() - start
        own = sum(b.trained_steps for b in branches.values())
        steps_per_epoch = _steps_per_epoch(
            [self._run_dir(c, seed) for c in self.tree if c.parent is None], self.settings
        )
        cost = {
            "trained_steps": own, "sweep_steps": sweep_epochs(self.tree) * steps_per_epoch,
            "steps_per_epoch": steps_per_epoch, "wall_s": round(wall, 1),
            "launch_wall_s": round(sum(l["wall_s"] for b in branches.values() for l in b.launches), 1),
            "launches": sum(len(b.launches) for b in branches.values()),
        }  # fmt: skip
        self.record["seeds"][str(seed)] = {
            "branches": {n: branch_dict(b) for n, b in branches.items()}, "rungs": entry["rungs"],
            "deploy": deploy, "cost": cost,
        }  # fmt: skip
        write_record(self.dir, self.record)

    def _summarise(self, seed: int, entry: Dict[str, Any], deploy: Optional[Dict[str, Any]]) -> None:
        self._say(f"search seed {seed}: every branch (validation {self.settings.metric} per epoch and rung)")
        for b in entry["branches"].values():
            origin = f"from {b.parent}@{b.fork}" if b.parent else "from scratch"
            self._say(f"  {b.name:<10} {origin:<14} {b.status:<8} {format_curve(b.curve)}  {b.reason}")
        cost = self.record["seeds"][str(seed)]["cost"]
        share = cost["trained_steps"] / cost["sweep_steps"] if cost["sweep_steps"] else float("nan")
        self._say(
            f"  cost: {cost['trained_steps']} trained steps ({share:.0%} of the {cost['sweep_steps']} a sweep of the same "
            f"candidates trains), {cost['launches']} launches, {cost['wall_s']:.0f} s"
        )
        if deploy is not None:
            test = " ".join(f"{t} {'n/a' if a is None else f'{a:.4f}'}" for t, a in deploy["test_auc"].items())
            self._say(
                f"  deploy: {deploy['checkpoint']} ({deploy['branch']} after epoch {deploy['epoch']:g}, validation "
                f"{self.settings.metric} {self.settings.sign * deploy['val_objective']:.4f}; test AUC, reported only: {test})"
            )

    def _say(self, line: str) -> None:
        print(line, file=self.out or sys.stdout, flush=True)


def _reference_note(c: Candidate, point: float, fraction: float) -> str:
    if c.judged_at(point, fraction):
        return ""
    first = c.judged_from(fraction)
    return f" (a reference: ranked, not cut before epoch {first:g}, {fraction:g} epoch into the tables it deploys)"


def _steps_per_epoch(run_dirs: List[str], settings: SearchSettings) -> int:
    for run_dir in run_dirs:
        _, facts = read_branch(run_dir, settings.metric, settings.task_weights)
        if 1 in facts["steps"]:
            return facts["steps"][1]
    return 0
