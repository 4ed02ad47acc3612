"""The automatic schedule: validation-driven freeze, unfreeze and stop."""

from dlrm_multiepoch.auto.policy import AutoScheduleConfig, AutoSchedulePolicy, Decision
from dlrm_multiepoch.auto.wrapper import AUTO, AutoFreezeSchedule

__all__ = ["AUTO", "AutoFreezeSchedule", "AutoScheduleConfig", "AutoSchedulePolicy", "Decision"]
