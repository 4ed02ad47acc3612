"""The validation objective, one torch-free definition for the automatic schedule and the schedule search.

The objective of one evaluation is the weighted mean over tasks of one validation metric
(``--auto_metric``: ``cal_ne``, ``auc``, ``logloss``, ``ne``) with ``--auto_task_weights``,
signed so that higher is better (its ``sign`` in :data:`~dlrm_multiepoch.metrics.METRICS`). One rule
for tasks that cannot count:

- a task of **weight 0** is not read at all: its metric may be missing or undefined;
- a task of positive weight whose metric is **undefined** (missing, ``None`` in
  ``summary.json``, NaN or infinite: labels of one class, an empty split) makes the
  objective undefined (NaN): it never improves on anything, never ranks above a
  defined one and never wins (:func:`undefined_tasks` names the tasks).

:class:`~dlrm_multiepoch.auto.policy.AutoSchedulePolicy` decides on it during a run,
:mod:`~dlrm_multiepoch.search.pruning` between runs; the sum runs in the weights' order,
so both compute the same float for the same evaluation.

Example::

    weighted_objective({"like": {"auc": 0.7}, "love": {"auc": 0.8}}, "auc", {"like": 1, "love": 1})   # 0.75
    weighted_objective({"like": {"auc": 0.7}, "love": {"auc": None}}, "auc", {"like": 1, "love": 0})  # 0.35
    undefined_tasks({"like": {"auc": None}}, "auc", {"like": 1.0})                                    # ["like"]
"""

import math
from typing import Any, List, Mapping, Optional

from dlrm_multiepoch.metrics import METRICS

TaskMetrics = Mapping[str, Mapping[str, Any]]


def _value(metrics: TaskMetrics, task: str, metric: str) -> Optional[float]:
    """A task's metric as a finite float, None when it is missing or undefined."""
    per_task = metrics.get(task)
    raw = per_task.get(metric) if isinstance(per_task, Mapping) else None
    if raw is None or isinstance(raw, (bool, str, bytes)):
        return None
    try:
        value = float(raw)  # numpy and 0-d tensor values too, as the evaluator hands them
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def task_weights(metrics: TaskMetrics, weights: Mapping[str, float]) -> Mapping[str, float]:
    """``weights``, or (empty) every task of ``metrics`` at weight 1, in ``metrics``' order."""
    return weights or {task: 1.0 for task in metrics}


def weighted_objective(metrics: TaskMetrics, metric: str, weights: Mapping[str, float]) -> float:
    """Weighted mean over tasks of ``metric``, signed so that higher is better; NaN when a task of positive
    weight has no defined value (see the module docstring).

    Args:
        metrics: ``{task: {"auc": ..., "cal_ne": ...}}`` of one split (``None``, NaN: undefined).
        metric: a name of :data:`~dlrm_multiepoch.metrics.METRICS`.
        weights: task -> weight >= 0 (``--auto_task_weights``); empty: every task of ``metrics`` weighs 1.
    """
    weights = task_weights(metrics, weights)
    total = sum(weights.values())
    if not total:
        return math.nan  # no task to decide on (no metrics at all): undefined, as a missing task
    value = 0.0
    for task, weight in weights.items():
        if not weight:
            continue  # a task of weight 0 does not count, defined or not
        raw = _value(metrics, task, metric)
        if raw is None:
            return math.nan
        value += weight * raw
    return METRICS[metric].sign * value / total


def undefined_tasks(metrics: TaskMetrics, metric: str, weights: Mapping[str, float]) -> List[str]:
    """The tasks of positive weight whose ``metric`` is undefined: why :func:`weighted_objective` is NaN."""
    weights = task_weights(metrics, weights)
    return [task for task, weight in weights.items() if weight and _value(metrics, task, metric) is None]
