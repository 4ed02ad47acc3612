"""Run comparison: read an experiment's runs, compare strategies per task, write the table, plots and HParams."""

from dlrm_multiepoch.report.compare import Comparison, StrategyRow, TaskComparison, compare_experiment
from dlrm_multiepoch.report.groups import ConfigGroup, config_groups
from dlrm_multiepoch.report.runs import RunProblem, RunRecord, read_experiment, read_run
from dlrm_multiepoch.report.stats import Stat
from dlrm_multiepoch.report.windows import WindowFit

__all__ = [
    "Comparison",
    "ConfigGroup",
    "RunProblem",
    "RunRecord",
    "Stat",
    "StrategyRow",
    "TaskComparison",
    "WindowFit",
    "compare_experiment",
    "config_groups",
    "read_experiment",
    "read_run",
]
