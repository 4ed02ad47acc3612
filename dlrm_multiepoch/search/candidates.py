"""The candidate schedules a search chooses from, as a tree of shared prefixes.

Every fixed preset of the sweep is a candidate, built from the same registry
(:mod:`dlrm_multiepoch.sweep.strategies`), plus the greedy ``auto``. Candidates whose
schedules agree up to a whole epoch share that prefix: the later one is a *branch* that
starts from the earlier one's checkpoint at that epoch (``--start_from``):

- ``joint`` (tables train every epoch, budget E + 1 epochs so that its best epoch can
  be past E) is a root; ``early`` (tables train in epoch 1 only) and ``reinit`` (tables
  re-initialised before every epoch after the first, so the tables it deploys start at
  epoch E - 1) branch from it after epoch 1.
- ``delayed`` (tables frozen until epoch E - 1, then trained) is a root;
  ``window@W`` (tables frozen until epoch W, then trained), for each whole W in
  1..E-2, branches from it after epoch W. ``window@0`` is ``joint`` over E epochs, so
  ``joint``'s first E epochs stand for it.
- ``auto`` is a root: its decisions follow its own validation history from step 0.

Example::

    tree = candidate_tree(3)
    [c.name for c in tree]            # ['joint', 'delayed', 'auto', 'early', 'reinit', 'window@1']
    tree[3].parent, tree[3].fork      # ('joint', 1)
    tree[4].ranked_from(0.3)          # 1.3: reinit's tables are re-initialised after epoch 1 ...
    tree[4].judged_from(0.3)          # 2.3: ... and again after epoch 2: those it deploys
"""

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from dlrm_multiepoch.optim.options import ReinitSchedule
from dlrm_multiepoch.sweep.strategies import STRATEGIES, Strategy, window_strategy


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


def _preset(name: str, budget: int) -> Strategy:
    strategy = STRATEGIES[name]
    return Strategy(strategy.name, strategy.flags, strategy.help, epochs=strategy.run_epochs(budget))


def _restarts(flags: Sequence[str], budget: int) -> Tuple[int, ...]:
    """The epochs before which ``flags``' ``--reinit`` re-initialises every table (the training app's own parser)."""
    if "--reinit" not in flags:
        return ()
    schedule = ReinitSchedule.parse(flags[flags.index("--reinit") + 1], budget)
    return tuple(sorted({e for group, epochs in schedule.events if group == "tables" for e in epochs}))


def candidate_tree(budget: int, auto_frozen_cap: float = 0.5) -> List[Candidate]:
    """The candidates for an ``budget``-epoch search, roots first, each branch after its parent.

    Args:
        budget: the epoch budget E (>= 1); joint runs E + 1 epochs, as in the sweep.
        auto_frozen_cap: ``--auto_frozen_cap`` of the runs: the latest epoch ``auto``'s
            tables can start is ``floor(cap * E)``.

    Raises:
        ValueError: a budget below one epoch.
    """
    if budget < 1:
        raise ValueError(f"--epochs must be at least 1, got {budget}")
    joint, delayed, auto = _preset("joint", budget), _preset("delayed", budget), _preset("auto", budget)
    tree = [Candidate(joint.name, joint.flags, joint.epochs or budget + 1, any_epoch=True)]
    if budget >= 2:  # with one epoch, delayed would never train its tables
        tree.append(Candidate(delayed.name, delayed.flags, budget, tables_from=budget - 1))
    cap = math.floor(auto_frozen_cap * budget + 1e-9)  # the latest epoch its tables start
    tree.append(Candidate(auto.name, auto.flags, budget, tables_from=cap, adaptive=True))
    if budget >= 2:
        for name in ("early", "reinit"):  # reinit: tables re-initialised before epoch 2 and every later one
            s = _preset(name, budget)
            tree.append(
                Candidate(s.name, s.flags, budget, parent=joint.name, fork=1, restarts=_restarts(s.flags, budget))
            )
    for w in range(1, budget - 1):
        s = window_strategy(w, budget)
        tree.append(Candidate(s.name, s.flags, budget, parent=delayed.name, fork=w, tables_from=w))
    return tree


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
