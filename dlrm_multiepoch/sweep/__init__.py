"""Strategy sweeps: the preset registry, the plan of runs and their TorchX launch (``dlrm-multiepoch sweep``)."""

from dlrm_multiepoch.sweep.plan import RunSpec, RunState, SweepPlan, build_plan, run_state
from dlrm_multiepoch.sweep.strategies import (
    DEFAULT_STRATEGIES,
    STRATEGIES,
    Strategy,
    parse_strategy,
    register_strategy,
    window_strategy,
)

__all__ = [
    "DEFAULT_STRATEGIES",
    "STRATEGIES",
    "RunSpec",
    "RunState",
    "Strategy",
    "SweepPlan",
    "build_plan",
    "parse_strategy",
    "register_strategy",
    "run_state",
    "window_strategy",
]
