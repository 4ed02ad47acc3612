"""The automatic schedule: validation-driven freeze, unfreeze and stop (exports load on first use)."""

from dlrm_multiepoch.lazy import lazy_exports

_EXPORTS = {
    "AUTO": "dlrm_multiepoch.auto.config",
    "AutoScheduleConfig": "dlrm_multiepoch.auto.config",
    "AutoSchedulePolicy": "dlrm_multiepoch.auto.policy",
    "Decision": "dlrm_multiepoch.auto.policy",
    "AutoFreezeSchedule": "dlrm_multiepoch.auto.wrapper",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
