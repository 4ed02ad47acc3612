"""How well does validation predict test? Rank agreement and regret of the validation pick, per task.

For each sweep folder (``dlrm-multiepoch sweep``; a ``--windows`` sweep into the same
folder adds its ``window@W`` runs as strategies) and each seed, the runs of that seed
are compared as ``dlrm-multiepoch compare`` compares them (``report.compare_runs``: the
model each strategy deploys, its validation and test AUC, the winner picked on
validation AUC). Per task and seed:

- **Kendall's tau** (tau-b) between the validation and the test ordering of the
  strategies' deployed models (1: validation orders them as test does);
- **regret**: the best test AUC among the strategies minus the test AUC of the one
  validation picks (0: validation picked test's best); and that pick's test AUC itself
  (a design that trains on other rows, ``--val_gap``, moves every strategy's).

Printed as mean ± std over seeds, with each seed's pick and test's best. Test figures are
only compared with, never used to pick.

Usage::

    python benchmarks/analysis/val_vs_test.py runs/ml-time/default runs/ml-time/gap
"""

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dlrm_multiepoch.report.compare import TaskComparison, compare_runs  # noqa: E402
from dlrm_multiepoch.report.runs import RunRecord, read_experiment  # noqa: E402
from dlrm_multiepoch.report.windows import window_of  # noqa: E402
from dlrm_multiepoch.names import TEST, VAL  # noqa: E402


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b of two orderings of the same items (ties counted as neither); NaN under 2 items."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    i, j = np.triu_indices(len(x), k=1)
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    untied_x, untied_y = np.count_nonzero(dx), np.count_nonzero(dy)
    if not untied_x or not untied_y:
        return float("nan")
    return float((dx * dy).sum() / np.sqrt(untied_x * untied_y))


def as_strategies(runs: Sequence[RunRecord]) -> List[RunRecord]:
    """``window@W`` runs as strategies of their own (compare fits them apart from the strategy table)."""
    return [
        dataclasses.replace(r, window=None, strategy=f"window {window_of(r):g}") if window_of(r) is not None else r
        for r in runs
    ]


@dataclasses.dataclass
class SeedAgreement:
    """One seed's validation-vs-test agreement on one task."""

    seed: int
    strategies: int
    tau: float
    regret: float
    picked: str
    best: str
    picked_auc: float  # the test AUC of what validation picks (a design that trains on other rows moves it)


def agreements(folder: Path) -> Tuple[Dict[str, List[SeedAgreement]], List[str]]:
    """Task -> per-seed agreement over the seeds that ran every strategy of the folder, and what was left out."""
    runs, problems = read_experiment(str(folder))
    runs = as_strategies(runs)
    everything = {r.strategy for r in runs}
    out: Dict[str, List[SeedAgreement]] = {}
    notes = [f"left out {p.name}: {p.reason}" for p in problems]
    for seed in sorted({r.seed for r in runs if r.seed is not None}):
        present = {r.strategy for r in runs if r.seed == seed}
        if present != everything:  # a seed still running, or one that failed: not comparable
            notes.append(f"left out seed {seed}: it lacks {', '.join(sorted(everything - present))}")
            continue
        for task in compare_runs([r for r in runs if r.seed == seed]).tasks:
            got = seed_agreement(task, seed)
            if got is not None:
                out.setdefault(task.task, []).append(got)
    return out, notes


def seed_agreement(task: TaskComparison, seed: int) -> Optional[SeedAgreement]:
    """Tau and regret over the strategies with a defined validation and test AUC; None when validation did not pick."""
    if task.decided_on != VAL or task.winner is None:
        return None
    rows = [r for r in task.rows if r.figure(VAL) is not None and r.figure(TEST) is not None]
    val = [r.figure(VAL).mean for r in rows]
    test = {r.strategy: r.figure(TEST).mean for r in rows}
    best = max(test, key=test.get)
    return SeedAgreement(seed, len(rows), kendall_tau(val, list(test.values())), test[best] - test[task.winner],
                         task.winner, best, test[task.winner])  # fmt: skip


def _ms(values: Sequence[float]) -> str:
    a = np.asarray(values, dtype=float)
    return f"{a.mean():.3f} ± {a.std(ddof=1) if len(a) > 1 else 0.0:.3f}"


def _ms4(values: Sequence[float]) -> str:
    a = np.asarray(values, dtype=float)
    return f"{a.mean():.4f} ± {a.std(ddof=1) if len(a) > 1 else 0.0:.4f}"


def table(folders: Sequence[Path]) -> str:
    lines = [
        "| sweep | task | seeds | strategies | Kendall's tau, val vs test | regret (test AUC) | test AUC of the pick "
        "| validation picks | test's best |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for folder in folders:
        per_task, problems = agreements(folder)
        notes += [f"- {folder}: {p}" for p in problems]
        if not per_task:
            notes.append(f"- {folder}: no seed with runs picked on validation")
        for task, seeds in sorted(per_task.items()):
            lines.append(
                f"| {folder} | {task} | {len(seeds)} | {', '.join(str(s.strategies) for s in seeds)} | "
                f"{_ms([s.tau for s in seeds])} | {_ms4([s.regret for s in seeds])} | "
                f"{_ms4([s.picked_auc for s in seeds])} | "
                f"{', '.join(s.picked for s in seeds)} | {', '.join(s.best for s in seeds)} |"
            )
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="sweep folders (one per dataset, split and design)")
    args = parser.parse_args(argv)
    missing = [str(f) for f in args.folders if not f.is_dir()]
    if missing:
        print(f"val_vs_test: no such folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    print(table(args.folders))
    return 0


if __name__ == "__main__":
    sys.exit(main())
