"""Freeze schedules applied to a TorchRec model: which tables, modules and gates train when.

- :mod:`.binding`: the schedule's groups bound to the model's tables, modules and gates;
  everything that cannot be frozen is refused here, at construction.
- :mod:`.hooks`: the forward hook that cuts frozen tables from the graph and the
  optimizer pre-step hook that skips frozen dense parameters.
- :mod:`.scheduler`: where each group's state comes from at every step
  (:class:`FixedSchedule` for the text schedules; any :class:`ScheduleSource`).
- :mod:`.wrapper`: :class:`FreezeScheduleWrapper`, which ties them together.
"""

from dlrm_multiepoch.freeze.scheduler import FixedSchedule, ScheduleSource
from dlrm_multiepoch.freeze.wrapper import FreezeScheduleWrapper

__all__ = ["FixedSchedule", "FreezeScheduleWrapper", "ScheduleSource"]
