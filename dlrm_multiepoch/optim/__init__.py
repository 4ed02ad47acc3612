"""Table optimisation remedies for multi-epoch training: per-table and scheduled table
learning rates, frequency-adaptive per-row learning rates, re-initialisation, gradient
accumulation."""

from dlrm_multiepoch.optim.falr import FALRConfig, FrequencyAdaptiveLR
from dlrm_multiepoch.optim.tables import TableShard, all_table_names, table_shards

__all__ = ["FALRConfig", "FrequencyAdaptiveLR", "TableShard", "all_table_names", "table_shards"]
