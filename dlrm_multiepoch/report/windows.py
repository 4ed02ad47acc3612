"""The update-window fit: final test AUC against the epoch W at which the tables start training (``window@W`` runs).

Example::

    fit = window_fit("like", [r for r in runs if window_of(r) is not None])
    fit.slope.mean     # AUC change per epoch of delay, mean over seeds
"""

import math
from dataclasses import dataclass
from typing import Dict, Optional, Sequence

import numpy as np

from dlrm_multiepoch.report.runs import RunRecord
from dlrm_multiepoch.report.stats import Stat
from dlrm_multiepoch.sweep.strategies import WINDOW_PREFIX


@dataclass
class WindowFit:
    """Final test AUC against the epoch the tables start training, for one task (and configuration group)."""

    task: str
    final_auc: Dict[float, Stat]  # window start -> final test AUC over seeds
    per_seed: Dict[int, Dict[float, float]]  # seed -> window start -> final test AUC
    slopes: Dict[int, float]  # seed -> fitted AUC change per epoch of delay
    slope: Optional[Stat]
    group: str = ""  # its configuration group's label ("" when the experiment has one)

    @property
    def monotone(self) -> bool:
        """Whether a later window never gave a lower mean final AUC."""
        means = [s.mean for _, s in sorted(self.final_auc.items())]
        return all(b >= a for a, b in zip(means, means[1:]))


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


def window_fit(task: str, runs: Sequence[RunRecord], group: str = "") -> Optional[WindowFit]:
    """The fit over ``runs`` (update-window runs); runs whose final test AUC is undefined are left out of it."""
    per_seed: Dict[int, Dict[float, float]] = {}
    for run in runs:
        auc = run.final("test", task, "auc")
        if auc is not None and math.isfinite(auc):
            seed = run.seed if run.seed is not None else -1
            per_seed.setdefault(seed, {})[window_of(run)] = auc  # type: ignore[index]
    windows = sorted({w for points in per_seed.values() for w in points})
    if not windows:
        return None
    final = {w: Stat.of([p[w] for p in per_seed.values() if w in p]) for w in windows}
    slopes = {
        seed: float(np.polyfit(sorted(p), [p[w] for w in sorted(p)], 1)[0]) for seed, p in per_seed.items() if len(p) > 1
    }
    return WindowFit(task, final, per_seed, slopes, Stat.of(list(slopes.values())) if slopes else None, group)
