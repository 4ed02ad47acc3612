"""The search loop: advance branches rung by rung, prune, choose what to deploy.

For each seed (an independent search): at every rung (a whole epoch, or a candidate's
first judgement inside an epoch, :func:`~dlrm_multiepoch.search.pruning.rung_points`)
where the rule could cut something (:func:`~dlrm_multiepoch.search.pruning.compared_at`),
each branch compared there is trained up to it (``--stop_at_epoch``, a fraction inside an
epoch; a branch's first launch starts from its parent's checkpoint with ``--start_from``,
later ones continue with ``--resume auto``; :mod:`~dlrm_multiepoch.search.launches`), then
:func:`~dlrm_multiepoch.search.pruning.prune_rung` cuts. The survivors are then trained
to their ends, and :func:`~dlrm_multiepoch.search.pruning.choose` picks the checkpoint to
deploy. An objective undefined in every branch compared (a task whose validation labels
are of one class) stops the seed with **no decision** and the reason. Everything it
decides follows from the run folders, so rerunning the same command after an
interruption continues (the command checks first that the run folders are what the
flags define: :mod:`~dlrm_multiepoch.search.checks`).

Example::

    search = ScheduleSearch("runs/search", candidate_tree(3), [0], 3, ["--dataset", "movielens"],
                            LaunchOptions(scheduler="local_cwd"), SearchSettings("cal_ne", {}, 3))
    failed = search.run()
"""

import math
import os
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

from dlrm_multiepoch.run_files import SEARCH_FILE, checkpoints_dir, complete_checkpoints, epoch_end
from dlrm_multiepoch.search.branches import BranchProgress, BranchRecord, SearchError, deploy_choice, format_curve
from dlrm_multiepoch.search.branches import passed_over_line, read_branch, run_name
from dlrm_multiepoch.search.candidates import Candidate, sweep_epochs
from dlrm_multiepoch.search.checks import check_lineage
from dlrm_multiepoch.search.launches import BranchLauncher
from dlrm_multiepoch.search.pruning import Curve, compared_at, prune_rung, rung_points, shown_value
from dlrm_multiepoch.search.search_json import read_record, write_record
from dlrm_multiepoch.search.seed_record import Rung, SeedEntry, cost, killed_wall_s, merge_launches, restore_launches
from dlrm_multiepoch.search.seed_record import seed_record, summary_lines
from dlrm_multiepoch.search.settings import SearchSettings
from dlrm_multiepoch.sweep.launch import LaunchOptions
from dlrm_multiepoch.sweep.manifest import record_lock
from dlrm_multiepoch.sweep.plan import RunSpec, run_state


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
        earlier: the intact per-seed entries of ``search.json`` (:func:`~.search_json.read_record`):
            other seeds' searches are kept, this seed's launches and wall time carried on.
        launcher: how branches are trained (default: TorchX launches, :class:`BranchLauncher`).
        shared_job: on ``local_cwd``, one training job trains every segment (False: one launch each).
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
        earlier: Optional[Dict[str, Any]] = None,
        launcher: Optional[BranchLauncher] = None,
        shared_job: bool = True,
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
        self.earlier = dict(earlier or {})
        self._per_epoch: Dict[int, int] = {}  # seed -> steps per epoch, once a root branch has evaluated epoch 1
        self.record: Dict[str, Any] = {
            "budget": budget, "metric": settings.metric, "task_weights": settings.task_weights, "eta": settings.eta,
            "rung_fraction": settings.rung_fraction,
            "common_flags": self.common, "candidates": [c.name for c in self.tree], "j": options.j,
            "seeds": dict(self.earlier),  # other seeds' searches stay
        }  # fmt: skip
        self.launcher = launcher or BranchLauncher(
            experiment_dir, self.tree, budget, self.common, options, len(self.rungs), out, shared=shared_job
        )
        self.undecided: Dict[int, str] = {}  # seeds with no decision, and why
        self.cache_dir = self.launcher.cache_dir  # where checkpoint digests are remembered

    def run(self) -> List[str]:
        """Search every seed; returns the branches whose launch failed (empty: done, or no decision: ``undecided``).

        Raises:
            SearchError: a run folder or checkpoint the search cannot use (one line naming it).
            SweepInterrupted: Ctrl-C, SIGTERM or SIGHUP (the record is saved first).
        """
        with self.launcher:
            for seed in self.seeds:
                failed = self._search(seed)
                if failed:
                    return failed
        return []

    # -- one seed --------------------------------------------------------------------

    def _search(self, seed: int) -> List[str]:
        branches = {c.name: BranchRecord.of(c) for c in self.tree}
        before = self.earlier.get(str(seed), {})
        for name, earlier in before.get("branches", {}).items():  # an interrupted or finished earlier invocation
            if name in branches:
                branches[name].launches = restore_launches(earlier, self._run_dir(self.by_name[name], seed))
        previous = before.get("cost", {}).get("wall_s", 0.0)
        entry = SeedEntry(branches, previous_wall_s=previous + sum(killed_wall_s(b.launches) for b in branches.values()))
        self._say(
            f"search seed {seed}: {len(self.tree)} candidates, budget {self.budget} epochs, decides on validation "
            f"{self.settings.metric} (--auto_metric), eta {self.settings.eta}, first judgements "
            f"{self.settings.rung_fraction:g} epoch after a branch's tables start"
        )
        try:
            if self.options.dryrun:  # what follows depends on the results: show the roots' launches
                roots = [(c, float(c.epochs)) for c in self.tree if c.parent is None]
                return self.launcher.launch(seed, roots, branches, lambda: None)
            failed = self._rungs(seed, entry)
            return failed if failed or entry.no_decision else self._finish(seed, entry)
        finally:
            if not self.options.dryrun:
                self._save(seed, entry)  # also when stopped or interrupted: the launches and wall time so far

    def _rungs(self, seed: int, entry: SeedEntry) -> List[str]:
        """Every rung: train the compared branches to it, cut; the failed runs, or [] (``no_decision`` may be set)."""
        branches, f = entry.branches, self.settings.rung_fraction
        for point in self.rungs:
            judged = compared_at(point, self._live(seed, branches, point), f)
            if not judged:
                continue
            failed = self._advance(seed, [(c, point) for c in judged], entry)
            if failed:
                return self._stop(seed, failed)
            curves = self._curves(seed, branches)
            live = self._live(seed, branches, point)
            compared = compared_at(point, live, f)
            missing = [c.name for c in compared if point not in curves[c.name].values]
            if missing:
                raise SearchError(
                    f"rung {point:g} (seed {seed}): {', '.join(missing)} trained past epoch {point:g} without a "
                    f"validation evaluation there: searched with another --rung_fraction or --candidates (search.json "
                    "lost?); search these flags in a new experiment folder"
                )
            if all(math.isnan(curves[c.name].values[point]) for c in compared):
                entry.no_decision = self._undefined(seed, compared, point)
                entry.rungs.append(Rung(point, [c.name for c in compared]))
                self._say(f"search seed {seed}: no decision: {entry.no_decision}")
                self.undecided[seed] = entry.no_decision
                return []
            self._cut(seed, point, compared, live, curves, entry)
            self._save(seed, entry)
        return []

    def _cut(
        self, seed: int, point: float, judged: List[Candidate], live: List[Candidate], curves: Dict[str, Curve],
        entry: SeedEntry,
    ) -> None:  # fmt: skip
        s, f, branches = self.settings, self.settings.rung_fraction, entry.branches
        cuts = prune_rung(point, live, curves, s.eta, f, s.sign)
        for name, reason in cuts.items():
            branches[name].status, branches[name].reason, branches[name].cut_at = "cut", reason, point
        kept = [c for c in judged if c.name not in cuts]
        for c in kept:
            value = shown_value(s.sign * curves[c.name].values[point])
            reference = "" if c.judged_at(point, f) else f"; a reference until {c.judged_from(f):g}"
            note = f"kept after epoch {point:g} ({value}{reference})"
            branches[c.name].reason = "; ".join(filter(None, [branches[c.name].reason, note]))
        references = [c.name for c in judged if not c.judged_at(point, f)]
        entry.rungs.append(Rung(point, [c.name for c in judged], cuts, [c.name for c in kept], references))
        self._say(f"rung after epoch {point:g} (seed {seed}): compared {', '.join(c.name for c in judged)}")
        for c in judged:
            verdict = f"CUT, {cuts[c.name]}" if c.name in cuts else "kept" + _reference_note(c, point, f)
            self._say(f"    {c.name:<10} val {s.metric} {format_curve(branches[c.name].curve)}  -> {verdict}")

    def _undefined(self, seed: int, compared: List[Candidate], point: float) -> str:
        tasks: List[str] = []
        for c in compared:
            _, facts = read_branch(self._run_dir(c, seed), self.settings.metric, self.settings.task_weights, self.rungs)
            tasks += [t for t in facts.undefined.get(point, []) if t not in tasks]
        named = f"task(s) {', '.join(tasks)}" if tasks else "the tasks"
        return (
            f"validation {self.settings.metric} is undefined for {named} in every branch compared after epoch "
            f"{point:g} (labels of one class, or no rows, in the validation split): nothing to decide on. Give such a "
            "task weight 0 (--auto_task_weights TASK:0,...) to decide on the others, or validate on rows of both classes"
        )

    def _finish(self, seed: int, entry: SeedEntry) -> List[str]:
        live = self._live(seed, entry.branches)
        failed = self._advance(seed, [(c, float(c.epochs)) for c in live], entry)
        if failed:
            return self._stop(seed, failed)
        for c in self._live(seed, entry.branches):
            record = entry.branches[c.name]
            record.status, record.reason = "finished", "; ".join(filter(None, [record.reason, "trained to its end"]))
        curves = self._curves(seed, entry.branches)
        s = self.settings
        entry.deploy, passed = deploy_choice(
            self.dir, self.tree, seed, curves, s.metric, s.task_weights, s.sign, self.cache_dir
        )
        for p in passed:  # a damaged or deleted checkpoint is never deployed, and never passed over unsaid
            self._say(f"search seed {seed}: {passed_over_line(p, self._run_dir(self.by_name[p['branch']], seed))}")
        if entry.deploy is None:
            damaged = " whose checkpoint verifies" if passed else ""
            entry.no_decision = (
                f"no deployable model{damaged} has a defined validation {s.metric} (an undefined objective never wins)"
            )
            self.undecided[seed] = entry.no_decision
        self._save(seed, entry)
        for line in summary_lines(entry, self.record["seeds"][str(seed)]["cost"], self.settings.metric, seed):
            self._say(line)
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
            done = self._progress(c, seed)
            if done.ended and done.epochs < min(c.epochs, epoch):
                record.status, record.reason = "finished", f"stopped itself after epoch {done.epochs} (its own validation rule)"
                continue
            live.append(c)
        return live

    def _progress(self, c: Candidate, seed: int) -> BranchProgress:
        """Where the branch stands in its run folder (:class:`BranchProgress`)."""
        state = run_state(self.dir, RunSpec(run_name(c.name, seed), c.name, seed, c.epochs, ()))
        if state.status in ("new", "stale"):  # stale: evaluated but no checkpoint to go on from; it starts over
            return BranchProgress(0.0)
        if state.status != "resumable":
            return BranchProgress(state.epochs_done, ended=state.status == "finished")
        _, facts = read_branch(self._run_dir(c, seed), self.settings.metric, self.settings.task_weights, self.rungs)
        epochs = max(float(state.epochs_done), self._checkpointed_epochs(c, seed, facts.steps))
        return BranchProgress(epochs, needs_rewrite=facts.unreadable or not facts.last_step)

    def _checkpointed_epochs(self, c: Candidate, seed: int, steps: Mapping[int, int]) -> float:
        """Epochs up to the branch's newest checkpoint: its step over the steps per epoch (from a whole-epoch
        evaluation's ``steps``, its parent's included, else from a whole-epoch checkpoint)."""
        saved = complete_checkpoints(checkpoints_dir(self._run_dir(c, seed)))
        if not saved:
            return 0.0
        per_epoch = next((step / epoch for epoch, step in sorted(steps.items()) if epoch), 0.0)
        for step, path in saved if not per_epoch else []:
            epoch = epoch_end(path)
            if epoch:
                per_epoch = step / epoch
        if not per_epoch:
            return 0.0
        epochs = saved[-1][0] / per_epoch
        # A pause at a rung is at step round(rung * steps per epoch): within half a step of it.
        return next((p for p in self.rungs if abs(epochs - p) <= 0.5 / per_epoch + 1e-9), epochs)

    def _curves(self, seed: int, branches: Dict[str, BranchRecord]) -> Dict[str, Curve]:
        """Every branch's validation curve (a branch not started yet: its parent's, up to the fork)."""
        curves: Dict[str, Curve] = {}
        for c in self.tree:
            run_dir = self._run_dir(c, seed)
            check_lineage(self.dir, c, seed)  # never rank a branch of a parent trained again since
            curve, facts = read_branch(run_dir, self.settings.metric, self.settings.task_weights, self.rungs)
            if not curve.values and c.parent is not None:
                curve = Curve({e: v for e, v in curves[c.parent].values.items() if e <= c.fork})
            curves[c.name] = curve
            record = branches[c.name]
            record.curve = {f"{e:g}": self.settings.sign * v for e, v in sorted(curve.values.items())}
            record.test_auc = {str(e): aucs for e, aucs in sorted(facts.test_auc.items())}
            record.trained_steps = max(facts.last_step - facts.start_step, 0)
        return curves

    # -- launching ---------------------------------------------------------------------

    def _advance(self, seed: int, targets: List[Tuple[Candidate, float]], entry: SeedEntry) -> List[str]:
        """Train each ``(branch, point)`` up to that point (epochs), parents first; returns the failed runs.

        A branch whose ``summary.json`` cannot be read is launched even when it is there: its
        trainer resumes from its newest checkpoint, trains what is left (nothing) and rewrites it.
        """
        waves: List[Dict[str, float]] = [{}, {}]
        for c, epoch in targets:
            progress = self._progress(c, seed)
            done = progress.epochs
            if done >= epoch and not progress.needs_rewrite:
                continue
            if c.parent is not None and done == 0:
                parent = self.by_name[c.parent]
                if self._progress(parent, seed).epochs < c.fork:
                    # Never compared before its end (delayed): trained through in one launch.
                    to = c.fork if self._compared_before_end(parent) else parent.epochs
                    waves[0][parent.name] = max(waves[0].get(parent.name, 0), to)
                    waves[1][c.name] = epoch
                    continue
            waves[0][c.name] = max(waves[0].get(c.name, 0), max(epoch, done))
        for wave in waves:
            if not wave:
                continue
            items = [(self.by_name[n], e) for n, e in wave.items()]
            failed = self.launcher.launch(seed, items, entry.branches, lambda: self._save(seed, entry))
            if failed:
                return failed
        return []

    def _compared_before_end(self, c: Candidate) -> bool:
        """Whether a rung before its end may compare ``c`` (with every candidate still in)."""
        return any(c in compared_at(p, self.tree, self.settings.rung_fraction) for p in self.rungs if p < c.epochs)

    # -- the record ----------------------------------------------------------------------

    def _run_dir(self, c: Candidate, seed: int) -> str:
        return os.path.join(self.dir, run_name(c.name, seed))

    def _stop(self, seed: int, failed: List[str]) -> List[str]:
        self._say(f"search seed {seed}: {len(failed)} launch(es) failed ({', '.join(failed)})")
        return failed

    def _save(self, seed: int, entry: SeedEntry) -> None:
        """Write this seed's entry of ``search.json`` with its cost so far (every invocation's launches and time),
        merged under a lock with what another search into this folder wrote since: its launches of this seed,
        its other seeds' entries."""
        with record_lock(self.dir, SEARCH_FILE):
            on_disk = read_record(self.dir).record.get("seeds", {})
            merge_launches(entry, on_disk.get(str(seed)))
            ours = seed_record(entry, cost(entry, self._steps_per_epoch(seed), sweep_epochs(self.tree)))
            self.record["seeds"] = {**self.record["seeds"], **on_disk, str(seed): ours}
            write_record(self.dir, self.record)

    def _steps_per_epoch(self, seed: int) -> int:
        """Steps per epoch of ``seed``'s data (0 until a root branch has evaluated epoch 1): read once, then kept
        (``_save`` asks before and after every segment)."""
        if seed not in self._per_epoch:
            per_epoch = self._root_steps_per_epoch(seed)
            if not per_epoch:
                return 0
            self._per_epoch[seed] = per_epoch
        return self._per_epoch[seed]

    def _root_steps_per_epoch(self, seed: int) -> int:
        for c in self.tree:
            if c.parent is None:
                try:
                    _, facts = read_branch(self._run_dir(c, seed), self.settings.metric, self.settings.task_weights)
                except SearchError:
                    continue  # named where it matters; the cost is not worth stopping for
                if 1 in facts.steps:
                    return facts.steps[1]
        return 0

    def _say(self, line: str) -> None:
        print(line, file=self.out or sys.stdout, flush=True)


def _reference_note(c: Candidate, point: float, fraction: float) -> str:
    if c.judged_at(point, fraction):
        return ""
    first = c.judged_from(fraction)
    return f" (a reference: ranked, not cut before epoch {first:g}, {fraction:g} epoch into the tables it deploys)"
