"""The candidate schedules a search chooses from, as a tree of shared prefixes.

The candidates are the sweep's presets registered with ``search=True``
(:mod:`dlrm_multiepoch.sweep.strategies`: ``joint``, ``delayed``, ``early``, ``reinit``, ``auto``), then
the update windows ``window@W`` (tables frozen until epoch W, then trained). Each one's place in the tree
is derived from what it trains, read by the training app's own parser: a candidate whose schedule
(``--freeze_schedule``, resolved to its run's length, and ``--reinit``) and other flags agree with an
earlier candidate's for its first k >= 1 whole epochs is a *branch* of it that starts from its checkpoint
at epoch k (``--start_from``; the longest such prefix, the earliest candidate on a tie); one that agrees
with an earlier one for its whole run is left out (it is that candidate at an epoch); any other is a root,
and so is an adaptive one (``--freeze_schedule auto``: its decisions follow its own validation history
from step 0). With today's presets:

- ``joint`` (tables train every epoch, budget E + 1 epochs so that its best epoch can be past E, where it
  is deployed) is a root; ``early`` (tables train in epoch 1 only) and ``reinit`` (tables
  re-initialised before every epoch after the first, so the tables it deploys start at epoch E - 1)
  branch from it after epoch 1.
- ``delayed`` (tables frozen until epoch E - 1, then trained) is a root; ``window@W``, for each whole W in
  1..E-2, branches from it after epoch W (``window@0`` is ``joint``'s first E epochs, ``window@E-1`` is
  ``delayed``). With E = 1, ``delayed``, ``early`` and ``reinit`` are ``joint``'s first epoch.
- ``auto`` is a root.

Example::

    tree = candidate_tree(3)
    [c.name for c in tree]            # ['joint', 'delayed', 'auto', 'early', 'reinit', 'window@1']
    tree[3].parent, tree[3].fork      # ('joint', 1)
    tree[4].ranked_from(0.3)          # 1.3: reinit's tables are re-initialised after epoch 1 ...
    tree[4].judged_from(0.3)          # 2.3: ... and again after epoch 2: those it deploys
"""

import functools
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from dlrm_multiepoch.config_section import BRANCH_MAY_CHANGE
from dlrm_multiepoch.run_files import flat_config, path_matches
from dlrm_multiepoch.schedule import TABLES, ResolvedSchedule
from dlrm_multiepoch.sweep.plan import parse_app_flags
from dlrm_multiepoch.sweep.strategies import STRATEGIES, Strategy, flag_value, window_strategy
from dlrm_multiepoch.train.config import record_paths


@dataclass(frozen=True)
class Candidate:
    """One schedule of the search.

    Args:
        name: its name (the sweep preset's), which names its run folders ``<name>-s<seed>``.
        flags: its training-app flags (the schedule suffix: ``--freeze_schedule``, ``--reinit``).
        epochs: its ``--epochs``.
        parent: the candidate it branches from (None: trained from scratch).
        fork: the parent's epoch whose checkpoint it starts from (0 for a root).
        tables_from: the epoch (0-based) from which its tables first train from their initial
            values (for ``auto`` the latest it can be: its frozen cap). Branches whose tables
            started at the same epoch (:meth:`tables_start`) form a *cohort*: their tables
            are equally young, so they can be compared early.
        restarts: the epochs (0-based) before which its ``--reinit`` re-initialises every
            table (``reinit``: 1..E-1): the tables it deploys start at the last one.
        adaptive: it decides its own schedule on validation, stops itself and ends on its
            best-validation weights (``auto``).
        any_epoch: it is deployed at its best validation epoch (``joint``); any other fixed
            schedule is deployed as its preset is, after its last epoch.
    """

    name: str
    flags: Tuple[str, ...]
    epochs: int
    parent: Optional[str] = None
    fork: int = 0
    tables_from: int = 0
    adaptive: bool = False
    any_epoch: bool = False
    restarts: Tuple[int, ...] = ()

    def tables_start(self, point: float) -> int:
        """The epoch (0-based) at which the tables it holds after ``point`` epochs started from their initial values."""
        return max([self.tables_from, *(r for r in self.restarts if r < point)])

    def ranked_from(self, fraction: float = 1.0) -> float:
        """The first point (epochs) at which its validation metric takes part in pruning: ``fraction`` of an
        epoch after its tables first started from their initial values and after its own suffix started
        (before that it is its parent). With ``fraction`` 1: a whole epoch of both."""
        return min(max(self.tables_from, self.fork) + fraction, self.epochs)

    def judged_from(self, fraction: float = 1.0) -> float:
        """The first point at which pruning may cut it: as :meth:`ranked_from`, counted from the start of
        the tables it deploys (later for ``reinit``, whose earlier tables are discarded). Between the two
        it is a reference: ranked with the others, never cut."""
        return min(max(self.tables_start(self.epochs), self.fork) + fraction, self.epochs)

    def ranked_at(self, point: float, fraction: float = 1.0) -> bool:
        """Whether the search may rank it after ``point`` epochs (from :meth:`ranked_from` to its end)."""
        return self.ranked_from(fraction) <= point <= self.epochs

    def judged_at(self, point: float, fraction: float = 1.0) -> bool:
        """Whether the search may cut it after ``point`` epochs (from its first judgement to its end)."""
        return self.judged_from(fraction) <= point <= self.epochs

    def as_strategy(self) -> Strategy:
        """The sweep strategy training this candidate from scratch (what a sweep of the same candidates runs)."""
        return Strategy(self.name, self.flags, help=f"search candidate {self.name}", epochs=self.epochs)


# Whole epochs are compared at this many steps each: fractional and percent bounds of presets land on steps.
_STEPS = 10_000
# What a branch may set otherwise than its parent: the rest of two candidates' flags must agree for a shared prefix.
_SUFFIX = record_paths(BRANCH_MAY_CHANGE)


@dataclass(frozen=True)
class _Run:
    """What a candidate trains, for comparing prefixes: its flags outside the schedule, its freeze plan, the
    epochs before which its tables are re-initialised."""

    strategy: Strategy
    epochs: int
    rest: Dict[str, Any]
    plan: Optional[ResolvedSchedule]  # None: adaptive (auto)
    restarts: Tuple[int, ...]

    def trains(self, group: str, step: int) -> bool:
        return self.plan is None or group not in self.plan.windows or self.plan.trains(group, step)

    def shared_epochs(self, other: "_Run") -> int:
        """Whole epochs from the start that both train alike (0 when either is adaptive)."""
        if self.plan is None or other.plan is None or self.rest != other.rest:
            return 0
        groups = set(self.plan.windows) | set(other.plan.windows)
        bounds = {b for p in (self.plan, other.plan) for g in groups for w in p.windows.get(g, ()) for b in (w.start, w.end)}
        for k in range(min(self.epochs, other.epochs)):
            points = [k * _STEPS, *(b for b in bounds if k * _STEPS < b < (k + 1) * _STEPS)]
            alike = all(self.trains(g, p) == other.trains(g, p) for g in groups for p in points)
            if not alike or [r for r in self.restarts if r <= k] != [r for r in other.restarts if r <= k]:
                return k
        return min(self.epochs, other.epochs)


@functools.lru_cache(maxsize=None)
def _run(strategy: Strategy, budget: int) -> _Run:
    """``strategy`` as the training app parses its flags over its epochs for a ``budget``-epoch search."""
    epochs = strategy.run_epochs(budget)
    cfg = parse_app_flags(["--val_fraction", "0.1", *strategy.flags, "--epochs", str(epochs)])  # a search validates
    record = flat_config(cfg.to_dict())
    rest = {p: v for p, v in record.items() if not path_matches(p, _SUFFIX)}
    plan = None if cfg.freeze.is_auto else cfg.freeze.schedule.resolve(_STEPS, epochs)
    restarts = tuple(sorted({e for group, es in cfg.optim.reinit_schedule.events if group == TABLES for e in es}))
    return _Run(strategy, epochs, rest, plan, restarts)


def candidate_tree(budget: int, auto_frozen_cap: float = 0.5) -> List[Candidate]:
    """The candidates for a ``budget``-epoch search, roots first, each branch after its parent.

    Args:
        budget: the epoch budget E (>= 1); joint runs E + 1 epochs, as in the sweep.
        auto_frozen_cap: ``--auto_frozen_cap`` of the runs: the latest epoch an adaptive candidate's
            tables can start is ``floor(cap * E)`` (unless its own flags set the cap).

    Raises:
        ValueError: a budget below one epoch.
    """
    if budget < 1:
        raise ValueError(f"--epochs must be at least 1, got {budget}")
    runs: List[_Run] = []
    tree: List[Candidate] = []
    for strategy in [*(s for s in STRATEGIES.values() if s.search), *(window_strategy(w, budget) for w in range(budget))]:
        try:
            run = _run(strategy, budget)
        except ValueError:  # a schedule this budget cannot hold (delayed and early need 2 epochs)
            continue
        fork, parent = 0, None
        for other in runs:
            if run.shared_epochs(other) > fork:
                fork, parent = run.shared_epochs(other), other
        if fork >= run.epochs:
            continue  # an earlier candidate trains it: that candidate at an epoch
        runs.append(run)
        if run.plan is None:
            cap = flag_value(strategy.flags, "auto_frozen_cap")
            tables_from = math.floor((auto_frozen_cap if cap is None else float(cap)) * budget + 1e-9)
        else:
            first = next((s for s in range(0, run.epochs * _STEPS, _STEPS) if run.trains(TABLES, s)), run.epochs * _STEPS)
            tables_from = math.ceil(first / _STEPS)
        tree.append(Candidate(
            strategy.name, strategy.flags, run.epochs, parent.strategy.name if parent else None, fork, tables_from,
            adaptive=run.plan is None, any_epoch=run.epochs > budget, restarts=run.restarts,
        ))  # fmt: skip
    return [c for c in tree if c.parent is None] + [c for c in tree if c.parent is not None]


def select(tree: List[Candidate], names: List[str]) -> List[Candidate]:
    """The candidates ``names`` of ``tree`` (all when empty), in tree order.

    Raises:
        ValueError: an unknown name, or a branch without its parent (its prefix).
    """
    if not names:
        return tree
    known = {c.name: c for c in tree}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"--candidates: unknown {unknown}; this budget's candidates: {', '.join(known)}")
    orphans = [f"{n} (from {known[n].parent})" for n in names if known[n].parent and known[n].parent not in names]
    if orphans:
        raise ValueError(f"--candidates: {', '.join(orphans)} start from their parent's checkpoint: add the parent")
    return [c for c in tree if c.name in names]


def sweep_epochs(tree: List[Candidate]) -> int:
    """Epochs a sweep of the same candidates trains (each from scratch, to its end)."""
    return sum(c.epochs for c in tree)
