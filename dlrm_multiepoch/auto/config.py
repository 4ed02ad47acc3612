"""The automatic schedule's settings: the ``--auto_*`` flags of ``--freeze_schedule auto``.

Torch-free (the CLI and the sweep planner read it); the decisions they drive are
:mod:`~dlrm_multiepoch.auto.policy`'s.

Example::

    cfg = AutoScheduleConfig(auto_metric="auc", auto_task_weights="like:1,love:0.5")
    cfg.validate()
    cfg.task_weight_values                                         # {"like": 1.0, "love": 0.5}
    check_task_weights(cfg.task_weight_values, ["like", "love"])   # the data's tasks: it has both
"""

import math
from dataclasses import dataclass
from typing import Dict, Sequence

from dlrm_multiepoch.config_section import option, parsed, split_list
from dlrm_multiepoch.metrics import METRICS, check_metric

AUTO = "auto"  # the --freeze_schedule value that selects this schedule
AFTER_TABLES = ("refreeze", "stop")


def parse_task_weights(text: str) -> Dict[str, float]:
    """``"like:1,love:0.5"`` -> ``{"like": 1.0, "love": 0.5}``; empty: ``{}`` (every task weighs 1). The tasks
    are checked against the data's by :func:`check_task_weights`.

    Raises:
        ValueError: naming ``--auto_task_weights`` for a bad entry, a task named twice or an all-zero weighting.
    """
    weights: Dict[str, float] = {}
    for part in split_list(text):
        name, sep, value = (x.strip() for x in part.partition(":"))
        try:
            weight = float(value)
        except ValueError:
            weight = float("nan")
        if not sep or not name or not math.isfinite(weight) or weight < 0:
            raise ValueError(f"--auto_task_weights: {part!r} must be TASK:WEIGHT with a weight >= 0, e.g. 'like:1'")
        if name in weights:
            raise ValueError(f"--auto_task_weights {text!r} names task {name!r} twice")
        weights[name] = weight
    if weights and not any(weights.values()):
        raise ValueError(f"--auto_task_weights {text!r}: at least one weight must be positive")
    return weights


def check_task_weights(weights: Dict[str, float], tasks: Sequence[str]) -> Dict[str, float]:
    """``weights`` (parsed ``--auto_task_weights``) checked against the data's ``tasks``; empty: each weighs 1.

    Raises:
        ValueError: naming ``--auto_task_weights`` and a task the data does not have.
    """
    unknown = [name for name in weights if name not in tasks]
    if unknown:
        raise ValueError(f"--auto_task_weights: unknown task {unknown[0]!r}; tasks: {list(tasks)}")
    return dict(weights) or {t: 1.0 for t in tasks}


@dataclass
class AutoScheduleConfig:
    """Knobs of ``--freeze_schedule auto``; every field is a ``--<field>`` flag.

    The defaults are in epochs and relative changes, not in steps or absolute metric
    values, so they carry over between datasets (docs/RESULTS_HISTORY.md, "How the defaults
    were chosen").

    Example::

        AutoScheduleConfig(auto_patience=2, auto_after_tables="stop", auto_frozen_cap=0.0)  # joint + early stop
    """

    auto_evals_per_epoch: int = option(10, "auto schedule: validation evaluations per epoch (patience counts these)")
    auto_patience: int = option(3, "auto schedule: evaluations without improvement that end a phase")
    auto_min_improvement: float = option(
        0.001, "auto schedule: relative improvement of the validation objective that counts (0.001 = 0.1%%)",
    )
    auto_frozen_cap: float = option(
        0.5,
        "auto schedule: most of the budget (a share, rounded down to whole epochs) the tables stay "
        "frozen at first; below one epoch skips that phase",
    )
    auto_after_tables: str = option(
        "refreeze",
        "auto schedule: when the tables stop improving validation, 'refreeze' them and let the dense "
        "part continue while it improves, or 'stop' the run",
    )
    auto_min_tables_epochs: float = option(
        1.0,
        "auto schedule: epochs the tables train before a validation plateau may end their phase "
        "(1: one whole pass over the data; 0: the first plateau)",
    )
    auto_metric: str = option(
        "cal_ne",
        f"auto schedule: validation metric it follows, one of {', '.join(METRICS)} "
        f"(cal_ne: {METRICS['cal_ne'].help})",
    )
    auto_task_weights: str = option(
        "", "auto schedule: weights of the tasks' metrics, e.g. 'like:1,love:0.5' (empty: equal)",
    )
    auto_gate: str = option(
        "",
        "auto schedule: a GradientGate (e.g. feature_cross) closed while the tables train once the "
        "train/validation gap grows by --auto_gate_gap (empty: none)",
    )
    auto_gate_gap: float = option(
        0.1, "auto schedule: growth of the relative train/validation gap that closes --auto_gate",
    )
    task_weight_values: Dict[str, float] = parsed()  # --auto_task_weights; {}: every task weighs 1

    def validate(self) -> None:
        for name in ("auto_evals_per_epoch", "auto_patience"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.auto_frozen_cap <= 1.0:
            raise ValueError(f"--auto_frozen_cap must be in [0, 1], got {self.auto_frozen_cap}")
        for name in ("auto_min_improvement", "auto_gate_gap", "auto_min_tables_epochs"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"--{name} must be a finite number >= 0, got {value}")
        if self.auto_after_tables not in AFTER_TABLES:
            raise ValueError(f"--auto_after_tables must be one of {AFTER_TABLES}, got {self.auto_after_tables!r}")
        check_metric("--auto_metric", self.auto_metric)
        self.task_weight_values = parse_task_weights(self.auto_task_weights)
