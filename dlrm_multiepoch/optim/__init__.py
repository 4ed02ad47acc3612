"""Table optimisation remedies for multi-epoch training: per-table and scheduled table
learning rates, frequency-adaptive per-row learning rates, re-initialisation, gradient
accumulation (exports load on first use: :mod:`.options` stays torch-free)."""

from dlrm_multiepoch.lazy import lazy_exports

_EXPORTS = {
    "FALRConfig": "dlrm_multiepoch.optim.options",
    "ReinitSchedule": "dlrm_multiepoch.optim.options",
    "TableLRSchedule": "dlrm_multiepoch.optim.options",
    "FrequencyAdaptiveLR": "dlrm_multiepoch.optim.falr",
    "GradientAccumulation": "dlrm_multiepoch.optim.accumulation",
    "TableLRScheduler": "dlrm_multiepoch.optim.lr",
    "reinit_tables": "dlrm_multiepoch.optim.reinit",
    "TableShard": "dlrm_multiepoch.optim.shards",
    "table_shards": "dlrm_multiepoch.optim.shards",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
