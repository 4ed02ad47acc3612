"""The search's pruning rule and its choice of what to deploy, as pure functions of validation curves.

Rungs are the points (in epochs) where the rule may cut: every whole epoch, and each
candidate's first judgement, ``f`` (``--rung_fraction``, default 0.3) of an epoch after
the tables it deploys started from their initial values and its own suffix started
(``joint`` at f, ``early`` and ``window@1`` at 1 + f, ``delayed`` and ``reinit`` at
E - 1 + f; ``auto`` at its first whole epoch after 1 + f, see 2). A branch is trained to
a rung only if the rule could cut something there. The objective is the one ``auto``
follows: ``--auto_metric`` averaged over tasks with ``--auto_task_weights``, signed so
that higher is better, with one rule for tasks of weight 0 (not read) and undefined
metrics (the objective is undefined: NaN, ranked below every defined value, never
deployed): :mod:`dlrm_multiepoch.auto.objective`.

1. **Not judged yet.** Before its first judgement a branch is not cut: its tables are
   at their initial values (or it is still its parent), or, for ``reinit``, they are
   not the tables it deploys: those start at its last re-initialisation (epoch E - 1),
   and a branch whose tables start over each epoch does not carry an epoch's
   overfitting into the next as the others do (on Book-Crossing its value rises in
   its last epoch while theirs fall). From ``f`` after its first tables started it is a
   *reference*: ranked with the others (so it can put them below the cut), never cut.
2. **Cohorts at a fractional rung.** There, fixed-schedule branches are ranked only
   against the fixed-schedule branches of their *cohort*: tables that started at the
   same epoch, i.e. equally young (at 1 + f: ``joint`` with ``early``; ``reinit`` with
   ``window@1``; at E - 1 + f: ``reinit`` with ``delayed``). Across cohorts a fraction of
   an epoch says more about the tables' age than about where a schedule ends (on
   MovieLens, ``auto`` at 1.3 and 1.5 epochs is below ``joint`` in all six recorded
   runs, above it at epoch 2 in the three on the time split). Within each cohort,
   successive halving: the top ``ceil(n / eta)`` go on. ``auto`` is not judged inside an
   epoch: its own rule lets a plateau end its tables' phase only after a whole pass
   (``--auto_min_tables_epochs``), and a search that cut it at 1.3 epochs on MovieLens
   (time split) lost its best model.
3. **Past its peak** (whole epochs). A judged fixed-schedule branch that has epochs left
   and whose objective after whole epoch ``e`` is below its best at an earlier judged
   whole epoch is cut: its best epoch stays a deployable checkpoint. (``auto`` keeps
   its own best weights and stops itself; this rule leaves it alone.)
4. **Successive halving** (whole epochs). The other branches with epochs left, every
   cohort together and references included, are ranked by their objective after ``e``;
   the top ``ceil(n / eta)`` go on, and the judged ones below them are cut (``eta`` = 3 by
   default, as in Hyperband). A branch at its last epoch is never cut: there is nothing
   left to save.

**Deploy**: the best validation objective among what each candidate deploys as a
preset: joint at its best validation (whole) epoch (cut or not: its epochs so far are
checkpoints), ``auto``'s restored best weights, every other schedule after its last
epoch (a branch cut before its end has no deployable model). Ties go to the earlier
candidate and epoch. Test metrics are only ever reported.

Example::

    curves = {"joint": Curve({1: 0.74, 2: 0.71}), "reinit": Curve({1: 0.74, 2: 0.75})}
    cuts = prune_rung(2, [joint, reinit], curves, eta=3)   # {"joint": "past its peak: ..."}
"""

import math
from dataclasses import dataclass, field
from typing import Collection, Dict, List, Mapping, Optional, Sequence, Tuple

from dlrm_multiepoch.auto.objective import weighted_objective as objective  # the one objective, auto's and ours
from dlrm_multiepoch.command_options import SearchOptions
from dlrm_multiepoch.search.candidates import Candidate


@dataclass
class Curve:
    """A branch's validation objective after each whole epoch and rung it (or its prefix) trained.

    Args:
        values: epoch (whole, or a fractional rung) -> objective, the parent's up to the fork included.
        best: for ``auto``, ``(epoch, objective)`` of the best-validation weights it restored at its end.
    """

    values: Dict[float, float] = field(default_factory=dict)
    best: Optional[Tuple[float, float]] = None


def _better(a: float, b: float) -> bool:
    return not math.isnan(a) and (math.isnan(b) or a > b)


def rung_points(tree: Sequence[Candidate], fraction: float) -> List[float]:
    """Every point where the rule may cut: each whole epoch and each candidate's first judgement, before the last end."""
    last = max(c.epochs for c in tree)
    firsts = {p for c in tree for p in (c.ranked_from(fraction), c.judged_from(fraction))}
    points = {float(e) for e in range(1, last)} | firsts
    return sorted(p for p in points if 0 < p < last)


def _whole(point: float) -> bool:
    return float(point).is_integer()


def _going_on(point: float, live: Sequence[Candidate], fraction: float) -> List[Candidate]:
    return [c for c in live if c.ranked_at(point, fraction) and c.epochs > point]


def _cohorts(branches: Sequence[Candidate], point: float) -> List[List[Candidate]]:
    groups: Dict[int, List[Candidate]] = {}
    for c in branches:
        groups.setdefault(c.tables_start(point), []).append(c)
    return list(groups.values())


def _earlier_whole(c: Candidate, point: float, fraction: float) -> List[int]:
    return [e for e in range(math.ceil(c.judged_from(fraction)), math.ceil(point)) if e < point]


def compared_at(point: float, live: Sequence[Candidate], fraction: float = 1.0) -> List[Candidate]:
    """The branches the rule compares (and may cut) at rung ``point``; empty: the search does not stop there.

    A whole epoch: the ranked branches (judged or references) with epochs left, when two or
    more are and one of them is judged (halving), or a fixed-schedule one judged at an earlier
    whole epoch too (its peak). A fractional rung: the fixed-schedule members of each cohort
    with two or more such branches with epochs left, one of them judged.
    """
    going_on = _going_on(point, live, fraction)
    if not _whole(point):
        going_on = [c for c in going_on if not c.adaptive]
        paired = {
            c.name
            for group in _cohorts(going_on, point)
            if len(group) >= 2 and any(m.judged_at(point, fraction) for m in group)
            for c in group
        }
        return [c for c in going_on if c.name in paired]
    judged = [c for c in going_on if c.judged_at(point, fraction)]
    if len(going_on) >= 2 and judged:
        return going_on
    return [c for c in judged if not c.adaptive and _earlier_whole(c, point, fraction)]


def can_cut(point: float, live: Sequence[Candidate], fraction: float = 1.0) -> bool:
    """Whether the rule could cut anything at rung ``point`` (else the search does not stop there)."""
    return bool(compared_at(point, live, fraction))


def _halve(
    ranked: List[Candidate],
    values: Mapping[str, float],
    shown: Mapping[str, float],
    point: float,
    eta: int,
    fraction: float,
    among: str = "",
) -> Dict[str, str]:
    ranked = sorted(ranked, key=lambda c: _sort_key(values[c.name]), reverse=True)
    keep = math.ceil(len(ranked) / eta)
    return {
        c.name: f"halving{among}: rank {rank} of {len(ranked)} after epoch {point:g} (validation "
        f"{shown_value(shown[c.name])}); the top {keep} go on"
        for rank, c in enumerate(ranked[keep:], keep + 1)
        if c.judged_at(point, fraction)  # a reference is ranked, never cut
    }


def prune_rung(
    point: float,
    live: Sequence[Candidate],
    curves: Mapping[str, Curve],
    eta: int = SearchOptions.eta,
    fraction: float = 1.0,
    sign: float = 1.0,
) -> Dict[str, str]:
    """The branches the rule cuts at rung ``point``, each with the reason (see the module docstring).

    Args:
        point: the rung (epochs trained: whole, or a fractional first judgement).
        live: the branches not cut (nor finished) so far.
        curves: every branch's curve; each compared branch has a value at ``point``.
        eta: halving factor (>= 2).
        fraction: ``--rung_fraction``: where first judgements fall.
        sign: the metric's sign (:data:`~dlrm_multiepoch.metrics.METRICS`): the reasons show the metric itself,
            not the signed objective.

    Raises:
        ValueError: ``eta`` below 2, or a compared branch without a value at ``point``.
    """
    if eta < 2:
        raise ValueError(f"--eta must be at least 2, got {eta}")
    compared = compared_at(point, live, fraction)
    missing = [c.name for c in compared if point not in curves[c.name].values]
    if missing:
        raise ValueError(f"rung {point:g}: no validation evaluation after epoch {point:g} for {missing}")
    values = {c.name: curves[c.name].values[point] for c in compared}
    shown = {name: sign * v for name, v in values.items()}
    cuts: Dict[str, str] = {}
    if not _whole(point):
        for group in _cohorts(compared, point):
            among = f" within its cohort ({', '.join(c.name for c in group)}: tables as young)"
            cuts |= _halve(group, values, shown, point, eta, fraction, among)
        return cuts
    for c in compared:
        if c.adaptive or not c.judged_at(point, fraction):
            continue
        curve = curves[c.name].values
        earlier = [(curve[e], e) for e in _earlier_whole(c, point, fraction) if e in curve and not math.isnan(curve[e])]
        if earlier:
            peak, at = max(earlier)
            if _better(peak, values[c.name]):
                cuts[c.name] = (
                    f"past its peak: validation {shown_value(shown[c.name])} after epoch {point:g} is worse than "
                    f"{sign * peak:.4f} after epoch {at} (its best epoch stays a deployable checkpoint)"
                )
    return cuts | _halve([c for c in compared if c.name not in cuts], values, shown, point, eta, fraction)


def _sort_key(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def shown_value(value: float) -> str:
    """A metric for the console and the reasons: 4 decimals, ``n/a`` when undefined."""
    return "n/a" if value is None or math.isnan(value) else f"{value:.4f}"


@dataclass(frozen=True)
class Choice:
    """The checkpoint to deploy: which branch, after which epoch, and its validation objective."""

    branch: str
    epoch: float
    objective: float


def choose(
    tree: Sequence[Candidate], curves: Mapping[str, Curve], exclude: Collection[Tuple[str, float]] = ()
) -> Optional[Choice]:
    """The best validation objective over the candidates' deployables (see the module docstring).

    A branch's epochs up to its fork are its parent's checkpoints: they count for the
    parent. An undefined objective is never chosen. None when no deployable has a defined one.

    Args:
        exclude: ``(branch, epoch)`` deployables passed over (their checkpoint is damaged or gone).
    """
    best: Optional[Choice] = None
    for c in tree:
        curve = curves.get(c.name)
        if curve is None:
            continue
        if c.adaptive:
            points: List[Tuple[float, float]] = [curve.best] if curve.best is not None else []
        elif c.any_epoch:
            points = [(e, v) for e, v in sorted(curve.values.items()) if e > c.fork and _whole(e)]
        else:
            points = [(c.epochs, curve.values[c.epochs])] if c.epochs in curve.values else []
        for epoch, value in points:
            if (c.name, epoch) in exclude:
                continue
            if not math.isnan(value) and (best is None or value > best.objective):
                best = Choice(c.name, epoch, value)
    return best
