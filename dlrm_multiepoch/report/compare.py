"""Compare an experiment's strategies per task: the numbers behind the table, the plots and HParams.

For each task and strategy (runs grouped over seeds): test AUC and logloss at the
best epoch (the epoch with the highest mean test AUC) and at the last one, as mean ±
std over seeds; the difference of the last-epoch AUC to two baselines, joint training
after one epoch and joint at its best epoch (what early stopping on the test curve
would give); train-sample minus test AUC (memorisation); wall time and throughput;
where the one-epoch phenomenon shows (test AUC falls across an epoch boundary, by more
than the seed spread, while train AUC rises); and the winner, with whether its margin exceeds the seed spread.
Update-window runs (``window@W``) get their own fit: final test AUC against the epoch
W at which the tables start training, slope per seed.

Example::

    comparison = compare_experiment("runs/bx")
    for task in comparison.tasks:
        print(task.task, task.winner, task.margin_exceeds_spread)
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from dlrm_multiepoch.report.runs import RunProblem, RunRecord, read_experiment
from dlrm_multiepoch.sweep.strategies import WINDOW_PREFIX

JOINT_1EP = "joint-1ep"
JOINT = "joint"


@dataclass(frozen=True)
class Stat:
    """Mean and sample standard deviation over seeds (std None with one seed)."""

    mean: float
    std: Optional[float]
    n: int

    @staticmethod
    def of(values: Sequence[float]) -> "Stat":
        a = np.asarray(values, dtype=np.float64)
        return Stat(float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else None, len(a))


@dataclass
class StrategyRow:
    """One strategy on one task, over its seeds (see the module docstring for each figure)."""

    strategy: str
    task: str
    seeds: int
    epochs: int
    best_epoch: int
    auc_best: Stat
    auc_last: Stat
    logloss_best: Optional[Stat]
    logloss_last: Optional[Stat]
    gap_last: Optional[Stat]
    wall_time_s: Optional[float]
    samples_per_s: Optional[float]
    curve: Dict[int, Stat]
    one_epoch_drop: Optional[Tuple[int, float]] = None
    deployed_epoch: Optional[float] = None  # mean epoch of restored best-validation weights (auto schedule)
    vs_joint_1ep: Optional[float] = None
    vs_joint_best: Optional[float] = None


@dataclass(frozen=True)
class Baseline:
    """A reference AUC: ``joint-1ep`` (joint after epoch 1) or ``joint-best`` (joint at its best epoch)."""

    name: str
    auc: float
    epoch: int
    source: str  # the strategy it was read from


@dataclass
class TaskComparison:
    """All strategies on one task, the baselines and the winner."""

    task: str
    rows: List[StrategyRow]
    joint_1ep: Optional[Baseline] = None
    joint_best: Optional[Baseline] = None
    winner: Optional[str] = None
    runner_up: Optional[str] = None
    margin: Optional[float] = None  # winner minus runner-up, last-epoch mean test AUC
    spread: Optional[float] = None  # the larger seed std of the two (None with one seed)

    @property
    def margin_exceeds_spread(self) -> Optional[bool]:
        if self.margin is None or self.spread is None:
            return None
        return self.margin > self.spread

    def row(self, strategy: str) -> Optional[StrategyRow]:
        return next((r for r in self.rows if r.strategy == strategy), None)


@dataclass
class WindowFit:
    """Final test AUC against the epoch the tables start training, for one task."""

    task: str
    final_auc: Dict[float, Stat]  # window start -> final test AUC over seeds
    per_seed: Dict[int, Dict[float, float]]  # seed -> window start -> final test AUC
    slopes: Dict[int, float]  # seed -> fitted AUC change per epoch of delay
    slope: Optional[Stat]

    @property
    def monotone(self) -> bool:
        """Whether a later window never gave a lower mean final AUC."""
        means = [s.mean for _, s in sorted(self.final_auc.items())]
        return all(b >= a for a, b in zip(means, means[1:]))


@dataclass
class Comparison:
    """Everything ``dlrm-multiepoch compare`` reports for one experiment."""

    experiment_dir: str
    tasks: List[TaskComparison]
    windows: List[WindowFit]
    problems: List[RunProblem]
    runs: List[RunRecord] = field(default_factory=list)


def compare_experiment(experiment_dir: str) -> Comparison:
    """Read an experiment folder and compare its runs (problem runs are named and left out)."""
    runs, problems = read_experiment(experiment_dir)
    return compare_runs(runs, problems, experiment_dir)


def compare_runs(runs: Sequence[RunRecord], problems: Sequence[RunProblem] = (), experiment_dir: str = "") -> Comparison:
    """Compare already-read runs: strategy rows per task and the update-window fit."""
    window_runs = [r for r in runs if window_of(r) is not None]
    strategy_runs = [r for r in runs if window_of(r) is None]
    by_strategy: Dict[str, List[RunRecord]] = {}
    for run in strategy_runs:
        by_strategy.setdefault(run.strategy, []).append(run)
    tasks = sorted({t for r in runs for t in r.tasks})
    comparisons = []
    for task in tasks:
        rows = [row for name, rs in by_strategy.items() if (row := _strategy_row(name, task, rs)) is not None]
        comparisons.append(_rank(task, rows))
    fits = [fit for task in tasks if (fit := _window_fit(task, window_runs)) is not None]
    return Comparison(experiment_dir, comparisons, fits, list(problems), list(runs))


def window_of(run: RunRecord) -> Optional[float]:
    """The update-window start of a ``window@W`` run, else None."""
    if run.window is not None:
        return float(run.window)
    if run.strategy.startswith(WINDOW_PREFIX):
        try:
            return float(run.strategy[len(WINDOW_PREFIX) :])
        except ValueError:
            return None
    return None


def _strategy_row(strategy: str, task: str, runs: List[RunRecord]) -> Optional[StrategyRow]:
    runs = [r for r in runs if r.curve("test", task, "auc")]
    if not runs:
        return None
    aucs = [r.curve("test", task, "auc") for r in runs]
    curve = _mean_curve(aucs)
    # The best epoch is one epoch for all seeds: the highest mean over the epochs every seed reached.
    common = [e for e in curve if all(e in a for a in aucs)]
    best = max(common, key=lambda e: (curve[e].mean, -e))
    last = [max(a) for a in aucs]

    def at(split: str, metric: str, epochs: Sequence[int]) -> List[Optional[float]]:
        return [r.curve(split, task, metric).get(e) for r, e in zip(runs, epochs)]

    def final(split: str, metric: str) -> List[Optional[float]]:
        """What each run ends holding: its restored best-validation model if any, else its last epoch."""
        at_last = at(split, metric, last)
        return [r.deployed.get(f"{split}/{task}/{metric}", v) for r, v in zip(runs, at_last)]

    test_last, train_last = final("test", "auc"), final("train_sample", "auc")
    gap = _stat([t - v if t is not None and v is not None else None for t, v in zip(train_last, test_last)])
    walls = [r.wall_time_s for r in runs if r.wall_time_s is not None]
    speeds = [r.samples_per_s for r in runs if r.samples_per_s is not None]
    train_curve = _mean_curve([r.curve("train_sample", task, "auc") for r in runs])
    return StrategyRow(
        strategy=strategy,
        task=task,
        seeds=len(runs),
        epochs=max(last),
        best_epoch=best,
        auc_best=Stat.of([a[best] for a in aucs]),
        auc_last=Stat.of(test_last),  # type: ignore[arg-type]
        logloss_best=_stat(at("test", "logloss", [best] * len(runs))),
        logloss_last=_stat(final("test", "logloss")),
        gap_last=gap,
        wall_time_s=float(np.mean(walls)) if walls else None,
        samples_per_s=float(np.mean(speeds)) if speeds else None,
        curve=curve,
        one_epoch_drop=_one_epoch_drop(curve, train_curve),
        deployed_epoch=_deployed_epoch(runs),
    )


def _stat(values: Sequence[Optional[float]]) -> Optional[Stat]:
    return Stat.of(values) if values and None not in values else None  # type: ignore[arg-type]


def _deployed_epoch(runs: Sequence[RunRecord]) -> Optional[float]:
    epochs = [r.deployed_epoch for r in runs if r.deployed and r.deployed_epoch is not None]
    return float(np.mean(epochs)) if epochs else None


def _mean_curve(curves: Sequence[Dict[int, float]]) -> Dict[int, Stat]:
    epochs = sorted({e for c in curves for e in c})
    return {e: Stat.of([c[e] for c in curves if e in c]) for e in epochs}


def _one_epoch_drop(test: Dict[int, Stat], train: Dict[int, Stat]) -> Optional[Tuple[int, float]]:
    """The first epoch e after which mean test AUC falls while mean train-sample AUC rises: (e, change).

    With several seeds the fall must exceed the seed spread (the larger std of the two
    epochs); with one seed any fall counts.
    """
    for e in sorted(test):
        if e + 1 in test and e in train and e + 1 in train:
            change = test[e + 1].mean - test[e].mean
            spread = max(test[e].std or 0.0, test[e + 1].std or 0.0)
            if change < -spread and train[e + 1].mean > train[e].mean:
                return e, change
    return None


def _rank(task: str, rows: List[StrategyRow]) -> TaskComparison:
    comparison = TaskComparison(task, rows)
    one_ep, joint = comparison.row(JOINT_1EP), comparison.row(JOINT)
    if one_ep is not None and 1 in one_ep.curve:
        comparison.joint_1ep = Baseline(JOINT_1EP, one_ep.curve[1].mean, 1, JOINT_1EP)
    elif joint is not None and 1 in joint.curve:
        comparison.joint_1ep = Baseline(JOINT_1EP, joint.curve[1].mean, 1, JOINT)
    best_source = joint or one_ep
    if best_source is not None:
        comparison.joint_best = Baseline(
            "joint-best", best_source.auc_best.mean, best_source.best_epoch, best_source.strategy
        )
    for row in rows:
        if comparison.joint_1ep is not None:
            row.vs_joint_1ep = row.auc_last.mean - comparison.joint_1ep.auc
        if comparison.joint_best is not None:
            row.vs_joint_best = row.auc_last.mean - comparison.joint_best.auc
    ranked = sorted(rows, key=lambda r: r.auc_last.mean, reverse=True)
    if ranked:
        comparison.winner = ranked[0].strategy
    if len(ranked) > 1:
        first, second = ranked[0], ranked[1]
        comparison.runner_up = second.strategy
        comparison.margin = first.auc_last.mean - second.auc_last.mean
        stds = [first.auc_last.std, second.auc_last.std]
        comparison.spread = max(stds) if None not in stds else None  # type: ignore[type-var]
    return comparison


def _window_fit(task: str, runs: Sequence[RunRecord]) -> Optional[WindowFit]:
    per_seed: Dict[int, Dict[float, float]] = {}
    for run in runs:
        curve = run.curve("test", task, "auc")
        if curve:
            seed = run.seed if run.seed is not None else -1
            per_seed.setdefault(seed, {})[window_of(run)] = curve[max(curve)]  # type: ignore[index]
    windows = sorted({w for points in per_seed.values() for w in points})
    if not windows:
        return None
    final = {w: Stat.of([p[w] for p in per_seed.values() if w in p]) for w in windows}
    slopes = {
        seed: float(np.polyfit(sorted(p), [p[w] for w in sorted(p)], 1)[0]) for seed, p in per_seed.items() if len(p) > 1
    }
    return WindowFit(task, final, per_seed, slopes, Stat.of(list(slopes.values())) if slopes else None)
