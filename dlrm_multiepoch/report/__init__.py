"""Run comparison from TensorBoard event files."""

from dlrm_multiepoch.report.compare import eval_table, format_comparison, format_seed_table, read_run

__all__ = ["eval_table", "format_comparison", "format_seed_table", "read_run"]
