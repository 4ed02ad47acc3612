"""The search's pruning rule and its choice of what to deploy, as pure functions of validation curves.

The rule (applied at every whole epoch ``e``, the *rung*, once every live branch judged
there has been evaluated after epoch ``e``; the objective is the one ``auto`` follows:
``--auto_metric`` averaged over tasks with ``--auto_task_weights``, signed so that
higher is better):

1. **Not judged yet.** A branch whose tables have not trained a whole epoch by ``e``
   (``delayed`` before its last epoch, ``window@W`` before ``W + 1``, ``auto`` before its
   frozen cap + 1) is neither compared nor cut: with tables still at their
   initial values its validation metric says nothing about where it ends.
2. **Past its peak.** A judged fixed-schedule branch that has epochs left and whose
   objective after ``e`` is below its best at an earlier judged epoch is cut: it has
   started to overfit, and its best epoch stays a deployable checkpoint. (``auto``
   keeps its own best weights and stops itself; this rule leaves it alone.)
3. **Successive halving.** The other judged branches with epochs left are ranked by
   their objective after ``e``; the top ``ceil(n / eta)`` go on, the rest are cut
   (``eta`` = 3 by default, as in Hyperband). A branch at its last epoch is never cut:
   there is nothing left to save.

**Deploy**: the best validation objective among what each candidate deploys as a
preset: joint at its best validation epoch (cut or not: its epochs so far are
checkpoints), ``auto``'s restored best weights, every other schedule after its last
epoch (a branch cut before its end has no deployable model). Ties go to the earlier
candidate and epoch. Test metrics are only ever reported.

Example::

    curves = {"joint": Curve({1: 0.74, 2: 0.71}), "reinit": Curve({1: 0.74, 2: 0.75})}
    cuts = prune_rung(2, [joint, reinit], curves, eta=3)   # {"joint": "past its peak: ..."}
"""

import math
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from dlrm_multiepoch.auto.config import METRIC_SIGN
from dlrm_multiepoch.search.candidates import Candidate

DEFAULT_ETA = 3


def objective(metrics: Mapping[str, Mapping[str, Optional[float]]], metric: str, weights: Mapping[str, float]) -> float:
    """Weighted mean over tasks of one split's ``metric``, signed so that higher is better (NaN if undefined).

    Args:
        metrics: ``{task: {"auc": ..., "logloss": ...}}`` of the val split (``None`` = undefined).
        metric: ``auc``, ``logloss`` or ``ne``.
        weights: task -> weight (``--auto_task_weights``); empty: every task of ``metrics`` weighs 1.

    Example::

        objective({"like": {"auc": 0.7}, "love": {"auc": 0.8}}, "auc", {"like": 1, "love": 1})   # 0.75
    """
    weights = weights or {task: 1.0 for task in metrics}
    total = sum(weights.values())
    value = 0.0
    for task, weight in weights.items():
        raw = metrics.get(task, {}).get(metric)
        if raw is None or not math.isfinite(float(raw)):
            return math.nan
        value += weight * float(raw)
    return METRIC_SIGN[metric] * value / total


@dataclass
class Curve:
    """A branch's validation objective after each whole epoch it (or its prefix) trained.

    Args:
        values: epoch -> objective, the parent's epochs up to the fork included.
        best: for ``auto``, ``(epoch, objective)`` of the best-validation weights it restored at its end.
    """

    values: Dict[int, float] = field(default_factory=dict)
    best: Optional[Tuple[float, float]] = None


def _better(a: float, b: float) -> bool:
    return not math.isnan(a) and (math.isnan(b) or a > b)


def can_cut(epoch: int, live: Sequence[Candidate]) -> bool:
    """Whether the rule could cut anything at rung ``epoch`` (else the search does not stop there).

    Halving needs two judged branches with epochs left; the peak rule one fixed-schedule
    branch judged at an earlier epoch too.
    """
    going_on = [c for c in live if c.judged_at(epoch) and c.epochs > epoch]
    return len(going_on) >= 2 or any(not c.adaptive and c.judged_from < epoch for c in going_on)


def prune_rung(epoch: int, live: Sequence[Candidate], curves: Mapping[str, Curve], eta: int = DEFAULT_ETA) -> Dict[str, str]:
    """The branches the rule cuts at rung ``epoch``, each with the reason (see the module docstring).

    Args:
        epoch: the rung (whole epochs trained).
        live: the branches not cut (nor finished) so far.
        curves: every branch's curve; each judged live branch with epochs left has a value at ``epoch``.
        eta: halving factor (>= 2).

    Raises:
        ValueError: ``eta`` below 2, or a judged branch without a value at ``epoch``.
    """
    if eta < 2:
        raise ValueError(f"--eta must be at least 2, got {eta}")
    going_on = [c for c in live if c.judged_at(epoch) and c.epochs > epoch]
    missing = [c.name for c in going_on if epoch not in curves[c.name].values]
    if missing:
        raise ValueError(f"rung {epoch}: no validation evaluation after epoch {epoch} for {missing}")
    cuts: Dict[str, str] = {}
    for c in going_on:
        if c.adaptive:
            continue
        values = curves[c.name].values
        earlier = [(values[e], e) for e in range(c.judged_from, epoch) if e in values]
        if earlier:
            peak, at = max(earlier)
            if _better(peak, values[epoch]):
                cuts[c.name] = (
                    f"past its peak: validation {values[epoch]:.4f} after epoch {epoch} is below {peak:.4f} after "
                    f"epoch {at} (its best epoch stays a deployable checkpoint)"
                )
    ranked = [c for c in going_on if c.name not in cuts]
    ranked.sort(key=lambda c: _sort_key(curves[c.name].values[epoch]), reverse=True)
    keep = math.ceil(len(ranked) / eta)
    for rank, c in enumerate(ranked[keep:], keep + 1):
        cuts[c.name] = (
            f"halving: rank {rank} of {len(ranked)} after epoch {epoch} (validation {curves[c.name].values[epoch]:.4f}); "
            f"the top {keep} go on"
        )
    return cuts


def _sort_key(value: float) -> float:
    return -math.inf if math.isnan(value) else value


@dataclass(frozen=True)
class Choice:
    """The checkpoint to deploy: which branch, after which epoch, and its validation objective."""

    branch: str
    epoch: float
    objective: float


def choose(tree: Sequence[Candidate], curves: Mapping[str, Curve]) -> Optional[Choice]:
    """The best validation objective over the candidates' deployables (see the module docstring).

    A branch's epochs up to its fork are its parent's checkpoints: they count for the
    parent. None when nothing deployable was evaluated.
    """
    best: Optional[Choice] = None
    for c in tree:
        curve = curves.get(c.name)
        if curve is None:
            continue
        if c.adaptive:
            points: List[Tuple[float, float]] = [curve.best] if curve.best is not None else []
        elif c.any_epoch:
            points = [(e, v) for e, v in sorted(curve.values.items()) if e > c.fork]
        else:
            points = [(c.epochs, curve.values[c.epochs])] if c.epochs in curve.values else []
        for epoch, value in points:
            if best is None or _better(value, best.objective):
                best = Choice(c.name, epoch, value)
    return best

