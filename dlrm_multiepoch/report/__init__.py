"""Run comparison: read an experiment's runs, compare strategies per task, write the table, plots and HParams."""

from dlrm_multiepoch.report.compare import Comparison, Stat, StrategyRow, TaskComparison, WindowFit, compare_experiment
from dlrm_multiepoch.report.runs import RunProblem, RunRecord, read_experiment, read_run

__all__ = [
    "Comparison",
    "RunProblem",
    "RunRecord",
    "Stat",
    "StrategyRow",
    "TaskComparison",
    "WindowFit",
    "compare_experiment",
    "read_experiment",
    "read_run",
]
