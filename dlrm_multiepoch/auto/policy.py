"""The automatic schedule's decisions, as a pure function of validation evaluations.

:class:`AutoSchedulePolicy` sees one validation evaluation at a time (the step and the
per-task metrics, optionally the train sample's for the gate) and answers with a
:class:`Decision`. It touches no model, reads no clock and draws no random number, so
the same evaluations give the same decisions; its whole state is a small JSON-able
dict (``state_dict()``), which is how a resumed run makes the same decisions.

Phases (each ends on a *plateau*: ``patience`` evaluations in a row without beating
the phase's best objective by ``min_improvement``, relative, the ``min_delta`` rule of
Keras/Lightning early stopping):

1. ``frozen``: tables frozen (at init or pre-trained values), everything else trains.
   Ends at an epoch boundary: the first one after a plateau, at the latest the last
   boundary within ``frozen_cap`` of the budget. The tables then start a whole pass over
   the data: started mid-epoch, some rows would come back to them (reshuffled) before
   others were seen once, and repeated rows are what the tables memorise.
2. ``joint``: tables train with the rest. An optional gate (e.g. ``feature_cross``)
   closes when the relative train/validation gap has grown by ``gate_gap`` since the
   phase began. Ends on a plateau, but not before the tables have trained
   ``min_tables_epochs`` (one whole pass): within their first pass every row is new to
   them, so a flat stretch there is noise, not memorisation, and the best model of
   this phase sits at the end of that pass where the one-epoch phenomenon shows.
3. ``dense`` (``after_tables="refreeze"``): tables frozen again, the dense part goes on
   while it improves validation. Ends on a plateau. With ``after_tables="stop"`` the run
   ends after phase 2 instead.

Every transition restores the best-validation weights first (unless the current ones
are the best), so each phase starts from the best model so far; the run ends on the
best-validation weights. A cap below one epoch skips phase 1; with
``after_tables="stop"`` that is joint training with early stopping on validation.

Example::

    policy = AutoSchedulePolicy(steps_per_epoch=100, num_epochs=3, tasks=["like", "love"])
    for step in range(30, 301, 30):
        decision = policy.observe(step, evaluate("val"))   # {"like": {"logloss": ...}, ...}
        if decision.save_best: save("best")
        if decision.restore_best: load("best")
        if decision.stop: break
"""

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

from dlrm_multiepoch.auto.config import AutoScheduleConfig, check_task_weights
from dlrm_multiepoch.auto.objective import weighted_objective
from dlrm_multiepoch.config_section import flag_values
from dlrm_multiepoch.metrics import METRICS
from dlrm_multiepoch.saved_state import StateMismatch, check_state

FROZEN, JOINT, DENSE, DONE = "frozen", "joint", "dense", "done"
PHASES = (FROZEN, JOINT, DENSE, DONE)
TaskMetrics = Mapping[str, Mapping[str, float]]
# What AutoSchedulePolicy.state_dict() holds (None: any value), checked before a load.
_STATE_FIELDS = {
    "config": dict, "steps_per_epoch": int, "total_steps": int, "tables_start": None, "phase": str, "gates": dict,
    "phase_history": list, "gate_history": list, "best_objective": None, "best_step": int, "phase_best": None,
    "stale": int, "recent": list, "gap_start": None, "last_step": int,
}  # fmt: skip


@dataclass(frozen=True)
class Decision:
    """What the policy decided at one validation evaluation.

    Args:
        step: the evaluation's step (steps done); a new phase applies from this step on.
        phase: the phase from ``step`` on (``frozen``, ``joint``, ``dense``, ``done``).
        transition: ``"frozen->joint"`` etc. when the phase changed here, else ``""``.
        gates: gate name -> open, for gates that changed here.
        reason: why, with the numbers that triggered it ("" when nothing changed).
        objective: this evaluation's validation objective (higher is better).
        best_objective: the best objective so far (this one included).
        best_step: the step of the best objective.
        save_best: this evaluation is the new best: checkpoint the weights now.
        restore_best: load the best checkpoint before training on.
        stop: end the run (after restoring the best weights).
    """

    step: int
    phase: str
    transition: str
    gates: Dict[str, bool]
    reason: str
    objective: float
    best_objective: float
    best_step: int
    save_best: bool
    restore_best: bool
    stop: bool

    def to_dict(self) -> Dict[str, Any]:
        """JSON-able (non-finite objectives as ``None``)."""
        out = asdict(self)
        for key in ("objective", "best_objective"):
            out[key] = out[key] if math.isfinite(out[key]) else None
        return out

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "Decision":
        nan = float("nan")
        return Decision(**{**d, **{k: nan if d[k] is None else d[k] for k in ("objective", "best_objective")}})


class AutoSchedulePolicy:
    """Validation-driven freeze, unfreeze and stop decisions (see the module docstring).

    Args:
        steps_per_epoch: optimizer steps per epoch (phase 1 ends on an epoch boundary).
        num_epochs: epochs in the budget.
        tasks: the model's tasks, in order.
        config: the knobs.

    Example::

        policy = AutoSchedulePolicy(100, 3, ["like"], AutoScheduleConfig(auto_patience=2))
        policy.observe(30, {"like": {"logloss": 0.61, "auc": 0.70}}).phase   # 'frozen'
    """

    def __init__(
        self, steps_per_epoch: int, num_epochs: int, tasks: Sequence[str], config: Optional[AutoScheduleConfig] = None
    ) -> None:
        self.config = config or AutoScheduleConfig()
        self.config.validate()
        if steps_per_epoch <= 0 or num_epochs <= 0:
            raise ValueError(f"steps_per_epoch and num_epochs must be positive, got {steps_per_epoch}, {num_epochs}")
        self.steps_per_epoch = steps_per_epoch
        self.total_steps = steps_per_epoch * num_epochs
        self.tasks = list(tasks)
        self.weights = check_task_weights(self.config.task_weight_values, self.tasks)
        # The last epoch boundary within the cap (a float product can land a hair below a whole number).
        self.cap_step = math.floor(self.config.auto_frozen_cap * num_epochs + 1e-9) * steps_per_epoch
        self.phase = FROZEN if self.cap_step > 0 else JOINT
        self._tables_start: Optional[List[Any]] = None  # [boundary step, why] once phase 1 is done
        self.gates: Dict[str, bool] = {self.config.auto_gate: True} if self.config.auto_gate else {}
        # (step, phase) and (step, gate, open) from the start: the realised schedule.
        self.phase_history: List[List[Any]] = [[0, self.phase]]
        self.gate_history: List[List[Any]] = []
        self.best_objective: Optional[float] = None
        self.best_step = -1
        self._phase_best: Optional[float] = None
        self._stale = 0
        self._recent: List[float] = []  # this phase's objectives since its last improvement
        self._gap_start: Optional[float] = None
        self.last_step = -1

    # ----- the objective -----

    def objective(self, metrics: TaskMetrics) -> float:
        """Weighted mean of the tasks' metric, signed so that higher is better; NaN when a task of positive
        weight is undefined (tasks of weight 0 are not read): :func:`~dlrm_multiepoch.auto.objective.weighted_objective`."""
        return weighted_objective(metrics, self.config.auto_metric, self.weights)

    def _gap(self, val: float, train: float) -> float:
        """Relative train/validation gap of two objectives (positive: train looks better)."""
        return (train - val) / max(abs(val), 1e-12)

    # ----- one evaluation -----

    def observe(self, step: int, val: TaskMetrics, train: Optional[TaskMetrics] = None) -> Decision:
        """Take the validation metrics at ``step`` and decide.

        Args:
            step: steps done when the evaluation ran; must increase between calls.
            val: per-task metrics on the validation split (``{"like": {"logloss": ...}}``).
            train: the same on a train sample; needed only with ``auto_gate``.

        Raises:
            ValueError: after the run was stopped, or for a step that does not increase.
        """
        if self.phase == DONE:
            raise ValueError(f"the auto schedule stopped the run at step {self.phase_history[-1][0]}; no more evaluations")
        if step <= self.last_step:
            raise ValueError(f"evaluation steps must increase: got {step} after {self.last_step}")
        self.last_step = step
        value = self.objective(val)
        finite = math.isfinite(value)
        save_best = finite and (self.best_objective is None or value > self.best_objective)
        if save_best:
            self.best_objective, self.best_step = value, step
        if finite and (self._phase_best is None or value > self._phase_best + self._margin(self._phase_best)):
            self._phase_best, self._stale, self._recent = value, 0, []
        else:
            self._stale += 1
            self._recent.append(value)

        gates: Dict[str, bool] = {}
        reasons: List[str] = []
        if self.phase == JOINT and self.gates.get(self.config.auto_gate):
            gate_reason = self._check_gate(value, train)
            if gate_reason:
                gates[self.config.auto_gate] = False
                self.gates[self.config.auto_gate] = False
                self.gate_history.append([step, self.config.auto_gate, False])
                reasons.append(gate_reason)

        before = self.phase
        nxt = self._next_phase(step)
        if nxt is not None:
            next_phase, why = nxt
            reasons.append(why)
            self.phase = next_phase
            self.phase_history.append([step, next_phase])
            # The next phase starts from the best weights; its plateau is judged against them.
            self._phase_best, self._stale, self._recent, self._gap_start = self.best_objective, 0, [], None
        restore = nxt is not None and self.best_step != step and self.best_objective is not None
        return Decision(
            step=step,
            phase=self.phase,
            transition=f"{before}->{self.phase}" if nxt is not None else "",
            gates=gates,
            reason="; ".join(reasons),
            objective=value,
            best_objective=self.best_objective if self.best_objective is not None else float("nan"),
            best_step=self.best_step,
            save_best=save_best,
            restore_best=restore,
            stop=self.phase == DONE,
        )

    def _margin(self, best: float) -> float:
        return self.config.auto_min_improvement * abs(best)

    def _plateau(self) -> bool:
        return self._stale >= self.config.auto_patience

    def metric_value(self, objective: float) -> float:
        """An objective back in the metric's own terms (e.g. a positive logloss)."""
        return objective * METRICS[self.config.auto_metric].sign

    def _plateau_reason(self) -> str:
        cfg = self.config
        recent = ", ".join(f"{self.metric_value(v):.4f}" for v in self._recent)
        best = self.metric_value(self._phase_best) if self._phase_best is not None else float("nan")
        return (
            f"validation {cfg.auto_metric} plateaued in phase {self.phase}: {self._stale} evaluations without a "
            f"{cfg.auto_min_improvement:g} relative improvement on {best:.4f} (since: {recent})"
        )

    def _next_phase(self, step: int) -> Optional[tuple]:
        cfg = self.config
        if self.phase == FROZEN:
            if self._tables_start is None and self._plateau():
                boundary = -(-step // self.steps_per_epoch) * self.steps_per_epoch
                self._tables_start = [boundary, self._plateau_reason() + f" at step {step}"]
            if self._tables_start is not None and step >= self._tables_start[0]:
                return JOINT, f"{self._tables_start[1]}; tables start training at the epoch boundary"
            if step >= self.cap_step:
                return JOINT, (
                    f"tables frozen for the cap: step {step} >= {cfg.auto_frozen_cap:g} of the budget, "
                    f"rounded down to whole epochs ({self.cap_step} steps)"
                )
        elif self.phase == JOINT and self._plateau() and step >= self._tables_min_end():
            if cfg.auto_after_tables == "refreeze":
                return DENSE, self._plateau_reason() + "; tables frozen again, the dense part continues"
            return DONE, self._plateau_reason() + "; run stopped"
        elif self.phase == DENSE and self._plateau():
            return DONE, self._plateau_reason() + "; run stopped"
        return None

    def _tables_min_end(self) -> int:
        """First step at which a plateau may end the tables' phase."""
        started = self.phase_history[-1][0]
        return started + math.ceil(self.config.auto_min_tables_epochs * self.steps_per_epoch - 1e-9)

    def _check_gate(self, value: float, train: Optional[TaskMetrics]) -> str:
        if train is None:
            raise ValueError(f"--auto_gate {self.config.auto_gate}: the policy needs train-sample metrics to observe")
        train_value = self.objective(train)
        gap = self._gap(value, train_value)
        if not math.isfinite(gap):
            return ""
        if self._gap_start is None:
            self._gap_start = gap
            return ""
        if gap - self._gap_start > self.config.auto_gate_gap:
            return (
                f"train/validation gap grew from {self._gap_start:.4f} to {gap:.4f} (> +{self.config.auto_gate_gap:g}); "
                f"gate {self.config.auto_gate} closed"
            )
        return ""

    # ----- checkpointing -----

    def state_dict(self) -> Dict[str, Any]:
        """JSON-able state; with the same config, ``load_state_dict`` continues exactly."""
        return {
            "config": flag_values(self.config),
            "steps_per_epoch": self.steps_per_epoch,
            "total_steps": self.total_steps,
            "tables_start": self._tables_start,
            "phase": self.phase,
            "gates": dict(self.gates),
            "phase_history": [list(h) for h in self.phase_history],
            "gate_history": [list(h) for h in self.gate_history],
            "best_objective": self.best_objective,
            "best_step": self.best_step,
            "phase_best": self._phase_best,
            "stale": self._stale,
            "recent": [v if math.isfinite(v) else None for v in self._recent],
            "gap_start": self._gap_start,
            "last_step": self.last_step,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``; its config and budget must equal this policy's (StateMismatch names them)."""
        check_state("automatic schedule policy", state, _STATE_FIELDS)
        changed = sorted(k for k, v in state["config"].items() if flag_values(self.config).get(k) != v)
        for key in ("steps_per_epoch", "total_steps"):
            if state[key] != getattr(self, key):
                changed.append(f"{key.replace('_', ' ')} {state[key]} -> {getattr(self, key)}")
        if changed:
            raise StateMismatch(
                f"automatic schedule policy: the state was saved with other settings ({', '.join(changed)})"
            )
        self._tables_start = state["tables_start"]
        self.phase = state["phase"]
        self.gates = dict(state["gates"])
        self.phase_history = [list(h) for h in state["phase_history"]]
        self.gate_history = [list(h) for h in state["gate_history"]]
        self.best_objective = state["best_objective"]
        self.best_step = int(state["best_step"])
        self._phase_best = state["phase_best"]
        self._stale = int(state["stale"])
        self._recent = [float("nan") if v is None else v for v in state["recent"]]
        self._gap_start = state["gap_start"]
        self.last_step = int(state["last_step"])
