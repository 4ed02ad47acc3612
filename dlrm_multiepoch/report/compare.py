"""Compare an experiment's strategies per task: the numbers behind the table, the plots and HParams.

Runs are first split into configuration groups (:mod:`dlrm_multiepoch.report.groups`):
only runs that share every flag but their strategy's own are compared, and only runs of
one configuration are averaged over seeds. Then, per group, task and strategy (mean ±
std over seeds), the figures of the model each run **deploys**: its restored
best-validation weights when its schedule keeps them (whatever the epoch, before the
first whole epoch too), else its last epoch's model. Validation AUC, test AUC and
logloss, train-sample minus test AUC (memorisation), its best whole epoch and the test
AUC there, the difference of its test AUC to joint training after one epoch and to joint
at its best epoch, wall time and throughput, and where the one-epoch phenomenon shows
(test AUC falls across an epoch boundary, by more than the seed spread, while train AUC
rises).

**The winner is picked on validation**: the best mean validation metric of the deployed
models (AUC unless ``metric`` names another of :data:`~dlrm_multiepoch.metrics.METRICS`,
e.g. ``cal_ne``, lower better; a search's folder: the search's metric), when the runs
have a validation split; test figures are reported beside it and never used to pick,
and best epochs (joint's baseline too) are validation epochs on that metric. Without a
validation split, or where its metric is undefined, the pick is made on test and the
report says so (optimistic: the same split picks and scores). Undefined metrics (an
empty slice, labels of one class, a task absent from a split) are "n/a": they never win,
rank or enter a mean. Update-window runs (``window@W``) are strategies like the others
and also get their own fit (:mod:`dlrm_multiepoch.report.windows`).

Example::

    comparison = compare_experiment("runs/bx")
    for task in comparison.tasks:
        print(task.task, task.decided_on, task.winner, task.margin_exceeds_spread)
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from dlrm_multiepoch.metrics import METRICS, check_metric
from dlrm_multiepoch.names import TEST, TRAIN_SAMPLE, VAL
from dlrm_multiepoch.report.groups import ConfigGroup, config_groups
from dlrm_multiepoch.report.runs import RunProblem, RunRecord, read_experiment
from dlrm_multiepoch.report.search_view import SearchView, search_view
from dlrm_multiepoch.report.stats import Stat, is_defined, stat_of
from dlrm_multiepoch.report.windows import WindowFit, window_fit, window_of

JOINT_1EP = "joint-1ep"
JOINT = "joint"


@dataclass
class StrategyRow:
    """One strategy on one task, over its seeds: the figures of the models its runs deploy.

    ``epochs``: whole epochs trained (the most of its seeds); ``deployed_epoch``: mean epoch
    of restored best-validation weights (None: each run deploys its last epoch);
    ``val_metric``/``test_metric``: the deciding metric (its task's ``metric``) of the deployed models;
    ``best_epoch``: the whole epoch with the best mean ``metric`` on ``best_on`` (the
    deciding split), ``auc_best``/``logloss_best`` the test figures there; ``curve``
    and ``val_curve``: mean AUC per whole epoch (None where undefined).
    """

    strategy: str
    task: str
    seeds: int
    epochs: int
    val_auc: Optional[Stat]
    test_auc: Optional[Stat]
    test_logloss: Optional[Stat]
    gap: Optional[Stat]
    best_on: str
    best_epoch: Optional[int]
    auc_best: Optional[Stat]
    logloss_best: Optional[Stat]
    wall_time_s: Optional[float]
    samples_per_s: Optional[float]
    curve: Dict[int, Optional[Stat]]
    val_curve: Dict[int, Optional[Stat]]
    val_metric: Optional[Stat] = None
    test_metric: Optional[Stat] = None
    deployed_epoch: Optional[float] = None
    one_epoch_drop: Optional[Tuple[int, float]] = None
    vs_joint_1ep: Optional[float] = None
    vs_joint_best: Optional[float] = None

    def figure(self, split: str) -> Optional[Stat]:
        """The deployed model's deciding metric on ``split`` (``val`` or ``test``)."""
        return self.val_metric if split == VAL else self.test_metric


@dataclass(frozen=True)
class Baseline:
    """A reference test AUC: ``joint-1ep`` (joint after epoch 1) or ``joint-best`` (joint at its best epoch on ``on``)."""

    name: str
    auc: float
    epoch: int
    source: str  # the strategy it was read from
    on: str = TEST  # the split that chose the epoch


@dataclass
class TaskComparison:
    """All strategies of one configuration group on one task, the baselines and the winner.

    ``decided_on``: the split the winner was picked on, ``metric`` the metric; ``val``: whether
    the runs evaluate that metric on a validation split for the task (``absent``,
    ``undefined`` or ``defined``); ``unranked``: strategies without a defined metric on that
    split (never the winner).
    """

    task: str
    rows: List[StrategyRow]
    group: str = ""
    decided_on: str = TEST
    val: str = "absent"
    unranked: List[str] = field(default_factory=list)
    joint_1ep: Optional[Baseline] = None
    joint_best: Optional[Baseline] = None
    winner: Optional[str] = None
    runner_up: Optional[str] = None
    margin: Optional[float] = None  # how much better the winner's mean metric on decided_on is than the runner-up's
    spread: Optional[float] = None  # the larger seed std of the two (None with one seed)
    no_winner: Optional[str] = None  # why no winner is named though strategies have figures (a search decides)
    metric: str = "auc"

    @property
    def margin_exceeds_spread(self) -> Optional[bool]:
        if self.margin is None or self.spread is None:
            return None
        return self.margin > self.spread

    def row(self, strategy: str) -> Optional[StrategyRow]:
        return next((r for r in self.rows if r.strategy == strategy), None)


@dataclass
class Comparison:
    """Everything ``dlrm-multiepoch compare`` reports for one experiment."""

    experiment_dir: str
    tasks: List[TaskComparison]
    windows: List[WindowFit]
    problems: List[RunProblem]
    runs: List[RunRecord] = field(default_factory=list)
    groups: List[ConfigGroup] = field(default_factory=list)
    search: Optional[SearchView] = None  # a schedule search's folder: what it deployed
    cut: List[RunProblem] = field(default_factory=list)  # the branches it cut (not partial runs)


def compare_experiment(experiment_dir: str, metric: Optional[str] = None) -> Comparison:
    """Read an experiment folder and compare its runs (problem runs are named and left out).

    ``metric`` (a name of :data:`~dlrm_multiepoch.metrics.METRICS`, ``compare --metric``) picks
    the winners and best epochs; default: the search's metric in a search's folder, else AUC.
    A schedule search's folder (``search.json``) is compared as the search decided: its view
    (:mod:`~dlrm_multiepoch.report.search_view`) names what it deployed, the branches it cut
    are listed as cut (with the rung), and the per-task tables name no winner of their own.
    """
    if metric is not None:
        check_metric("--metric", metric)
    runs, problems = read_experiment(experiment_dir)
    view = search_view(experiment_dir)
    if view is None:
        return compare_runs(runs, problems, experiment_dir, metric or "auc")
    metric = metric or (view.metric if view.metric in METRICS else "auc")
    cut = [RunProblem(p.name, p.path, _cut_reason(*view.cut[p.name])) for p in problems if p.name in view.cut]
    comparison = compare_runs(runs, [p for p in problems if p.name not in view.cut], experiment_dir, metric)
    comparison.search, comparison.cut = view, cut
    why = (
        f"the schedule search decides on validation {view.metric} over the tasks, among what each candidate deploys "
        "(the search's table above names what it deployed)"
        if view.readable
        else "this is a schedule search's folder whose search.json is damaged (above): a winner per task may not be "
        "what the search deploys"
    )
    for task in comparison.tasks:
        task.winner = task.runner_up = task.margin = task.spread = None
        task.no_winner = why
    return comparison


def _cut_reason(rung: float, reason: str) -> str:
    return f"cut by the search after epoch {rung:g}" + (f": {reason}" if reason else "")


def compare_runs(
    runs: Sequence[RunRecord], problems: Sequence[RunProblem] = (), experiment_dir: str = "", metric: str = "auc"
) -> Comparison:
    """Compare already-read runs: per configuration group, strategy rows per task (the winner on ``metric``) and
    the update-window fit."""
    groups = config_groups(runs)
    comparisons, fits = [], []
    for group in groups:
        tasks = sorted({t for r in group.runs for t in r.tasks})
        windows = [r for r in group.runs if window_of(r) is not None]
        for task in tasks:
            on, val = _deciding_split(task, group.runs, metric)
            rows = [r for name, rs in group.rows.items() if (r := _strategy_row(name, task, rs, on, metric)) is not None]
            comparisons.append(_rank(TaskComparison(task, rows, group.label, on, val, metric=metric)))
        fits += [fit for task in tasks if (fit := window_fit(task, windows, group.label)) is not None]
    return Comparison(experiment_dir, comparisons, fits, list(problems), list(runs), groups)


def _deciding_split(task: str, runs: Sequence[RunRecord], metric: str) -> Tuple[str, str]:
    """(split the winner is picked on, state of ``metric`` on the validation split: absent / undefined / defined)."""
    finals = [r.final(VAL, task, metric) for r in runs]
    if any(is_defined(v) for v in finals):
        return VAL, "defined"
    recorded = any(v is not None for v in finals) or any(r.curve(VAL, task, metric) for r in runs)
    return TEST, "undefined" if recorded else "absent"


def _strategy_row(strategy: str, task: str, runs: List[RunRecord], on: str, metric: str) -> Optional[StrategyRow]:
    runs = [r for r in runs if task in r.tasks]
    if not runs:
        return None
    sign = METRICS[metric].sign
    curve = _mean_curve([r.curve(TEST, task, "auc") for r in runs])
    val_curve = _mean_curve([r.curve(VAL, task, "auc") for r in runs])
    chooser = [r.curve(on, task, metric) for r in runs]
    # The best epoch is one epoch for all seeds: the best mean over the epochs every seed reached (the earliest of ties).
    choices = {e: s for e, s in _mean_curve(chooser).items() if s is not None and all(e in c for c in chooser)}
    best = max(choices, key=lambda e: (sign * choices[e].mean, -e)) if choices else None

    def final(split: str, metric: str) -> List[Optional[float]]:
        return [r.final(split, task, metric) for r in runs]

    def at_best(metric: str) -> Optional[Stat]:
        return stat_of([r.curve(TEST, task, metric).get(best) for r in runs]) if best is not None else None

    pairs = zip(final(TRAIN_SAMPLE, "auc"), final(TEST, "auc"))
    gaps = [train - test if is_defined(train) and is_defined(test) else None for train, test in pairs]
    walls = [r.wall_time_s for r in runs if r.wall_time_s is not None]
    speeds = [r.samples_per_s for r in runs if r.samples_per_s is not None]
    restored = [r.deployed_epoch for r in runs if r.deployed and r.deployed_epoch is not None]
    return StrategyRow(
        strategy=strategy,
        task=task,
        seeds=len(runs),
        epochs=max(r.epochs_done for r in runs),
        val_auc=stat_of(final(VAL, "auc")),
        test_auc=stat_of(final(TEST, "auc")),
        test_logloss=stat_of(final(TEST, "logloss")),
        gap=stat_of(gaps),
        best_on=on,
        best_epoch=best,
        auc_best=at_best("auc"),
        logloss_best=at_best("logloss"),
        wall_time_s=float(np.mean(walls)) if walls else None,
        samples_per_s=float(np.mean(speeds)) if speeds else None,
        curve=curve,
        val_curve=val_curve,
        val_metric=stat_of(final(VAL, metric)),
        test_metric=stat_of(final(TEST, metric)),
        deployed_epoch=float(np.mean(restored)) if restored else None,
        one_epoch_drop=_one_epoch_drop(curve, _mean_curve([r.curve(TRAIN_SAMPLE, task, "auc") for r in runs])),
    )


def _mean_curve(curves: Sequence[Dict[int, float]]) -> Dict[int, Optional[Stat]]:
    """Per epoch: the stat over the seeds that reached it (None where any of their values is undefined)."""
    epochs = sorted({e for c in curves for e in c})
    return {e: stat_of([c[e] for c in curves if e in c]) for e in epochs}


def _one_epoch_drop(test: Dict[int, Optional[Stat]], train: Dict[int, Optional[Stat]]) -> Optional[Tuple[int, float]]:
    """The first epoch e after which mean test AUC falls while mean train-sample AUC rises: (e, change).

    With several seeds the fall must exceed the seed spread (the larger std of the two
    epochs); with one seed any fall counts. Undefined epochs are skipped.
    """
    for e in sorted(test):
        now, after, train_now, train_after = test[e], test.get(e + 1), train.get(e), train.get(e + 1)
        if now is None or after is None or train_now is None or train_after is None:
            continue
        change = after.mean - now.mean
        spread = max(now.std or 0.0, after.std or 0.0)
        if change < -spread and train_after.mean > train_now.mean:
            return e, change
    return None


def _rank(comparison: TaskComparison) -> TaskComparison:
    """Baselines, deltas and the winner on ``decided_on`` (rows without a defined AUC there are not ranked)."""
    one_ep, joint = comparison.row(JOINT_1EP), comparison.row(JOINT)
    for source in (one_ep, joint):
        epoch_1 = source.curve.get(1) if source is not None else None
        if source is not None and epoch_1 is not None:
            comparison.joint_1ep = Baseline(JOINT_1EP, epoch_1.mean, 1, source.strategy)
            break
    best_source = joint or one_ep
    if best_source is not None and best_source.best_epoch is not None and best_source.auc_best is not None:
        comparison.joint_best = Baseline(
            "joint-best", best_source.auc_best.mean, best_source.best_epoch, best_source.strategy, best_source.best_on
        )
    for row in comparison.rows:
        if row.test_auc is not None and comparison.joint_1ep is not None:
            row.vs_joint_1ep = row.test_auc.mean - comparison.joint_1ep.auc
        if row.test_auc is not None and comparison.joint_best is not None:
            row.vs_joint_best = row.test_auc.mean - comparison.joint_best.auc
    ranked: List[Tuple[str, Stat]] = []
    for row in comparison.rows:
        figure = row.figure(comparison.decided_on)
        if figure is None:
            comparison.unranked.append(row.strategy)
        else:
            ranked.append((row.strategy, figure))
    sign = METRICS[comparison.metric].sign
    ranked.sort(key=lambda item: -sign * item[1].mean)  # stable: ties keep the table's order
    if len(ranked) == 1:
        (name, figure), row, metric = ranked[0], comparison.row(ranked[0][0]), METRICS[comparison.metric]
        on = "validation" if comparison.decided_on == VAL else "test"
        on_test = row.test_metric if on == "validation" and row is not None else None
        test = f", test {metric.label} {metric.show(on_test.mean)}" if on_test is not None else ""
        comparison.no_winner = (
            f"{name} is the only strategy with a figure ({on} {metric.label} {metric.show(figure.mean)}{test}): "
            "nothing to compare it with"
        )
    if len(ranked) > 1:
        comparison.winner = ranked[0][0]
        (_, first), (comparison.runner_up, second) = ranked[0], ranked[1]
        comparison.margin = sign * (first.mean - second.mean)
        stds = [first.std, second.std]
        comparison.spread = max(stds) if None not in stds else None  # type: ignore[type-var]
    return comparison
