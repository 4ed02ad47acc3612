"""Where a :class:`~dlrm_multiepoch.freeze.FreezeScheduleWrapper` gets each group's state from.

The wrapper asks its :class:`ScheduleSource` for the state of every schedule group at
each step boundary and applies what changed. :class:`FixedSchedule` answers from a
:class:`~dlrm_multiepoch.schedule.FreezeSchedule` (the ``--freeze_schedule`` text);
another source (e.g. one driven by validation metrics) only has to answer
:meth:`ScheduleSource.states` for the step about to run and say, through
:meth:`ScheduleSource.possible_states`, which states it may ever apply, so that
schedules the model cannot honour are refused at construction.
"""

import itertools
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from dlrm_multiepoch.schedule import TABLES, FreezeSchedule, ResolvedSchedule

# group -> True (trains / gate open), False (frozen / closed), None (no window: trains,
# and a ``table:`` group defers to ``tables``).
States = Dict[str, Optional[bool]]


class ScheduleSource:
    """The state of every freeze-schedule group at any step.

    Subclass and implement :meth:`states`; override :meth:`possible_states` when the
    source can name its states up front (validation then checks only those), and
    ``state_dict``/``load_state_dict`` when it has state of its own to checkpoint.

    Args:
        groups: schedule group names (``tables``, ``table:NAME``, ``module:GLOB``, ``gate:NAME``).

    Example::

        class Manual(ScheduleSource):
            def __init__(self):
                super().__init__(["tables"])
                self.tables_train = False
            def states(self, step):
                return {"tables": self.tables_train}

        source = Manual()
        freeze = FreezeScheduleWrapper(dmp, source, len(loader), 3, optimizer=opt)
        source.tables_train = True   # applied at the next step boundary (freeze.step())
    """

    def __init__(self, groups: Sequence[str]) -> None:
        self.groups: List[str] = list(groups)

    def states(self, step: int) -> States:
        """Each group's state during step ``step`` (0-based)."""
        raise NotImplementedError

    def possible_states(self) -> Iterable[States]:
        """Every combination of states this source may apply (default: any)."""
        table_groups = [g for g in self.groups if g == TABLES or g.startswith("table:")]
        for values in itertools.product((True, False), repeat=len(table_groups)):
            yield dict(zip(table_groups, values))

    def describe(self) -> str:
        """A text form for logs and checkpoints."""
        return type(self).__name__

    def state_dict(self) -> Dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass


class FixedSchedule(ScheduleSource):
    """A :class:`FreezeSchedule` resolved to a run length: windows fixed in advance.

    Args:
        schedule: the schedule (or its text form, e.g. ``"delayed"``).
        steps_per_epoch: optimizer steps per epoch.
        num_epochs: epochs in the run.

    Example::

        source = FixedSchedule("tables=frozen@[0,1) train@[1,end)", steps_per_epoch=100, num_epochs=2)
        source.states(99), source.states(100)      # {'tables': False}, {'tables': True}
        source.states(200)                         # the end: {'tables': True}, as in its last step
    """

    def __init__(self, schedule: "FreezeSchedule | str", steps_per_epoch: int, num_epochs: float) -> None:
        self.schedule = FreezeSchedule.parse(schedule) if isinstance(schedule, str) else schedule
        self.plan: ResolvedSchedule = self.schedule.resolve(steps_per_epoch, num_epochs)
        super().__init__(list(self.schedule.groups))
        starts = {0} | {b for ws in self.plan.windows.values() for w in ws for b in (w.start, w.end)}
        self.boundaries = sorted(s for s in starts if s < self.plan.total_steps)

    def states(self, step: int) -> States:
        # The run's end (step == total_steps) runs no step: it keeps the last step's states, so a window to `end`
        # (e.g. `gate:x=closed`) holds for the whole run, its end included.
        step = min(step, self.plan.total_steps - 1)
        return {g: self.plan.state(g, step) for g in self.groups}

    def possible_states(self) -> Iterable[States]:
        return [self.states(s) for s in self.boundaries]

    def describe(self) -> str:
        return str(self.schedule)
