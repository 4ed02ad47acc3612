"""The training app's side of ``--freeze_schedule auto``: act on each decision, log it, end on the best weights.

The :class:`~dlrm_multiepoch.auto.AutoFreezeSchedule` decides from validation metrics;
this module does what a decision asks of the run (checkpoint a new best, restore the
best, stop) and makes it visible: console lines and TensorBoard text with the numbers
that triggered a transition, scalars ``auto/phase`` and ``auto/val_<metric>`` at every
evaluation, ``auto_decisions`` and ``best`` in ``summary.json``.
"""

import time
from typing import Any, Callable, Mapping, Optional, Sequence

from torch import nn
from torchrec.optim.keyed import KeyedOptimizer

from dlrm_multiepoch.auto import AUTO, AutoFreezeSchedule, Decision
from dlrm_multiepoch.auto.policy import PHASES
from dlrm_multiepoch.part import Position
from dlrm_multiepoch.train.best import BestCheckpoints
from dlrm_multiepoch.train.metrics_logger import MetricsLogger, format_metrics, metric_scalars
from dlrm_multiepoch.train.validator import Decisions, Results


def best_step_of(trainer_state: Mapping[str, Any]) -> Optional[int]:
    """The best-validation step a checkpoint's auto-schedule state refers to (None: none)."""
    freeze = trainer_state.get("parts", {}).get("freeze") or {}
    policy = freeze.get("source", {}).get("policy", {}) if freeze.get("schedule") == AUTO else {}
    step = policy.get("best_step", -1)
    return step if step >= 0 else None


class AutoRun(Decisions):
    """Carries out an :class:`AutoFreezeSchedule`'s decisions in a training run (a validator's :class:`Decisions`).

    Args:
        auto: the schedule (it owns the decisions).
        checkpoint_dir: the run's checkpoint folder; best checkpoints go there.
        model: the sharded model.
        optimizer: its optimizer (restored with the weights).
        logger: the run's logger.
        val: the split whose metrics decide.
        train_sample: a train sample's split, evaluated with ``val`` for the schedule's gate (None: no gate).
        checkpoint_state: what best checkpoints record besides the weights (e.g. ``{"config": ...}``).

    Example::

        run = AutoRun(auto, f"{run_dir}/checkpoints", dmp, optimizer, logger)
        validator = Validator(my_evaluate, ["val"], decisions=run)   # evaluates at the schedule's cadence
        ...
        validator.finish(step)                                       # the best-validation weights, evaluated
    """

    def __init__(
        self,
        auto: AutoFreezeSchedule,
        checkpoint_dir: str,
        model: nn.Module,
        optimizer: KeyedOptimizer,
        logger: MetricsLogger,
        val: str = "val",
        train_sample: Optional[str] = None,
        checkpoint_state: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.auto = auto
        self.best = BestCheckpoints(checkpoint_dir, best_step_of)
        self.model = model
        self.optimizer = optimizer
        self.logger = logger
        self.val, self.train_sample = val, train_sample
        self.checkpoint_state = dict(checkpoint_state or {})
        self.checkpoint_seconds = 0.0  # saving and restoring best checkpoints, this job

    @property
    def stopped(self) -> bool:  # type: ignore[override]
        return self.auto.stopped

    @property
    def eval_every_n_steps(self) -> int:  # type: ignore[override]
        return self.auto.eval_every_n_steps

    @property
    def splits(self) -> Sequence[str]:  # type: ignore[override]
        return [self.val] + ([self.train_sample] if self.train_sample else [])

    def evaluation_due(self, step: int) -> bool:
        return self.auto.evaluation_due(step)

    def observe(self, results: Results, step: int) -> None:
        """Let the schedule decide on the validation metrics (and the train sample's), then act.
        Results without the validation split decide nothing."""
        if self.val in results:
            sample = results.get(self.train_sample) if self.train_sample else None
            self.act(self.auto.observe(results[self.val], sample), step)

    def act(self, decision: Decision, step: int) -> None:
        """Checkpoint a new best, restore the best, log (collective when it saves or restores)."""
        start = time.perf_counter()
        if decision.save_best:
            state = {**self.checkpoint_state, "val_objective": decision.objective}
            self.best.save(step, self.model, self.optimizer, state)
        if decision.restore_best:
            self.best.restore(decision.best_step, self.model, self.optimizer)
        self.checkpoint_seconds += time.perf_counter() - start
        metric, policy = self.auto.config.auto_metric, self.auto.policy
        self.logger.scalars(
            {
                "auto/phase": PHASES.index(decision.phase),
                f"auto/val_{metric}": policy.metric_value(decision.objective),
                f"auto/best_val_{metric}": policy.metric_value(decision.best_objective),
            },
            step,
        )
        if decision.transition or decision.gates:
            what = decision.transition or ", ".join(f"gate {g} {'open' if o else 'closed'}" for g, o in decision.gates.items())
            restored = f" (restored the best weights, step {decision.best_step})" if decision.restore_best else ""
            line = f"auto schedule at step {step}: {what}{restored}: {decision.reason}"
            self.logger.info(line)
            self.logger.text("auto/decisions", line, step)
            self.logger.record("auto_decisions", self.logger.summary.get("auto_decisions", []) + [decision.to_dict()])

    def after_save(self) -> None:
        """The checkpoint just saved refers to the current best: it stays until the next save; bests that only
        pruned epoch checkpoints referred to can go."""
        self.best.pinned = {self.auto.policy.best_step}
        self.best.prune(keep={self.auto.policy.best_step})

    def after_load(self, position: Position) -> None:
        """After a resume: the best checkpoint the restored state refers to must exist (and stays until the next
        save)."""
        best = self.auto.policy.best_step
        self.best.pinned = {best}
        if best >= 0:
            self.best.check(best)

    def finish(self, step: int, evaluate: Callable[[], Results]) -> None:
        """Restore the best-validation weights (unless current), evaluate them, record ``best``."""
        best = self.auto.policy.best_step
        if best < 0:  # no validation evaluation ran
            return
        if best != step:
            start = time.perf_counter()
            self.best.restore(best, self.model, self.optimizer)
            self.checkpoint_seconds += time.perf_counter() - start
        results = evaluate()
        self.logger.scalars({f"best/{k}": v for k, v in metric_scalars(results).items()}, step)
        epoch = best / self.auto.steps_per_epoch
        schedule = str(self.auto.schedule)
        self.logger.record("best", {"step": best, "epoch": epoch, "schedule": schedule, **results})
        self.logger.record("best_checkpoint_time_s", self.checkpoint_seconds)
        self.logger.info(
            format_metrics(f"best-validation weights (epoch {epoch:g}, step {best}) restored:", results)
            + f"\n  realised schedule: {schedule}"
        )
