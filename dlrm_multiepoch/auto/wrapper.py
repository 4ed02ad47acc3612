"""``AutoFreezeSchedule``: the automatic schedule applied to a TorchRec model.

It owns an :class:`~dlrm_multiepoch.auto.policy.AutoSchedulePolicy` and a
:class:`~dlrm_multiepoch.freeze.FreezeScheduleWrapper`. The decisions taken so far are a
fixed schedule in steps (``tables=frozen@[0step,412step) train@[412step,end)``, the
current state held to the end); each transition re-binds the wrapper to the schedule
grown by one window, so freezing works exactly as with a fixed schedule (tables cut
from the graph, bitwise unchanged while frozen, gates opened and closed) and the
realised schedule can be replayed as a fixed one.
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence

from torch import nn
from torchrec.distributed.model_parallel import DistributedModelParallel

from dlrm_multiepoch.auto.policy import (
    AUTO,
    DONE,
    JOINT,
    AutoScheduleConfig,
    AutoSchedulePolicy,
    Decision,
    TaskMetrics,
)
from dlrm_multiepoch.freeze import FreezeScheduleWrapper
from dlrm_multiepoch.gates import GradientGate
from dlrm_multiepoch.schedule import TABLES, FreezeSchedule, Window


class AutoFreezeSchedule:
    """Validation-driven freezing of a model's tables (and one gate), next to ``FreezeScheduleWrapper``.

    Call :meth:`step` after every optimizer step, evaluate the validation split whenever
    :meth:`evaluation_due` says so and pass the metrics to :meth:`observe`; act on the
    returned :class:`~dlrm_multiepoch.auto.policy.Decision` (save the best checkpoint,
    restore it, stop). The caller evaluates: the schedule never sees a data split.

    Args:
        model: a TorchRec model, sharded by ``DistributedModelParallel`` or not.
        steps_per_epoch: optimizer steps per epoch.
        num_epochs: epochs in the budget.
        tasks: the model's tasks (keys of the metrics passed to :meth:`observe`).
        optimizer: the dense optimizer (as for ``FreezeScheduleWrapper``).
        config: the knobs (``AutoScheduleConfig``).
        start_step: the step the run starts at (see also :meth:`load_state_dict`).

    Example::

        auto = AutoFreezeSchedule(dmp, len(loader), 3, ["like", "love"], optimizer=opt)
        pipeline = TrainPipelineSparseDist(dmp, opt, device)
        for epoch in range(3):
            it = iter(loader)
            while not auto.stopped:
                try:
                    pipeline.progress(it)
                except StopIteration:
                    break
                auto.step()
                if auto.evaluation_due():
                    decision = auto.observe(my_eval(val_loader))     # {"like": {"logloss": ..}, ..}
                    if decision.save_best:   # dlrm_multiepoch.train.checkpoint
                        write_checkpoint(f"ckpt/best_step_{auto.global_step}", dmp, opt, {"step": auto.global_step})
                    if decision.restore_best:
                        load_checkpoint(f"ckpt/best_step_{decision.best_step}", dmp, opt)
        # deploy the best-validation weights
        load_checkpoint(f"ckpt/best_step_{auto.policy.best_step}", dmp, opt)
    """

    def __init__(
        self,
        model: nn.Module,
        steps_per_epoch: int,
        num_epochs: int,
        tasks: Sequence[str],
        optimizer: Optional[Any] = None,
        config: Optional[AutoScheduleConfig] = None,
        start_step: int = 0,
    ) -> None:
        self.config = config or AutoScheduleConfig()
        self.steps_per_epoch = steps_per_epoch
        self.num_epochs = num_epochs
        self.policy = AutoSchedulePolicy(steps_per_epoch, num_epochs, tasks, self.config)
        # Evaluations in epochs, so patience means the same share of an epoch on any dataset.
        self.eval_every_n_steps = max(1, round(steps_per_epoch / self.config.auto_evals_per_epoch))
        self.decisions: List[Decision] = []
        self._model = model
        self._optimizer = optimizer
        inner = model.module if isinstance(model, DistributedModelParallel) else model
        self._gates = [m for m in inner.modules() if isinstance(m, GradientGate)]
        self._freeze = self._bind(start_step)

    # ----- the realised schedule -----

    def schedule(self) -> FreezeSchedule:
        """The decisions so far as a fixed schedule in steps; the current state holds to the end."""
        total = self.policy.total_steps
        states = [(int(s), phase == JOINT) for s, phase in self.policy.phase_history]
        groups = {TABLES: _windows(states, total)}
        gate = self.config.auto_gate
        if gate:
            changes = [(int(s), bool(is_open)) for s, _, is_open in self.policy.gate_history]
            groups[f"gate:{gate}"] = _windows([(0, True)] + changes, total)
        return FreezeSchedule(groups)

    def _bind(self, step: int) -> FreezeScheduleWrapper:
        return FreezeScheduleWrapper(
            self._model,
            self.schedule(),
            self.steps_per_epoch,
            self.num_epochs,
            optimizer=self._optimizer,
            start_step=step,
        )

    def _rebind(self) -> None:
        step = self._freeze.global_step
        # remove() opens every gate of the model; gates the schedule does not own keep their state.
        others = {id(g): g.open for g in self._gates if g.name != self.config.auto_gate}
        self._freeze.remove()
        for g in self._gates:
            if id(g) in others:
                g.open = others[id(g)]
        self._freeze = self._bind(step)

    # ----- training -----

    @property
    def global_step(self) -> int:
        return self._freeze.global_step

    @property
    def stopped(self) -> bool:
        """Whether the schedule ended the run (the best weights still have to be restored)."""
        return self.policy.phase == DONE

    def step(self) -> None:
        """Advance one optimizer step; call after each ``optimizer.step()``/``pipeline.progress()``."""
        self._freeze.step()

    def evaluation_due(self, step: Optional[int] = None) -> bool:
        """Whether a validation evaluation is due after ``step`` steps (default: now): every
        ``eval_every_n_steps`` and at every epoch end (where the tables may start training)."""
        step = self.global_step if step is None else step
        return step > 0 and (step % self.eval_every_n_steps == 0 or step % self.steps_per_epoch == 0)

    def observe(self, val: TaskMetrics, train: Optional[TaskMetrics] = None) -> Decision:
        """Decide on the validation metrics evaluated now; applies freezes and gates itself.

        Args:
            val: per-task metrics of the validation split.
            train: per-task metrics of a train sample (only with ``auto_gate``).
        """
        decision = self.policy.observe(self.global_step, val, train)
        self.decisions.append(decision)
        if decision.transition or decision.gates:
            self._rebind()
        return decision

    def states(self) -> Dict[str, int]:
        """Each group's state now: 1 trains (gate open), 0 frozen (closed)."""
        return self._freeze.states()

    def frozen_tables(self) -> List[str]:
        """Tables frozen now (the semi-sync pipeline's hint)."""
        return self._freeze.frozen_tables()

    def remove(self) -> None:
        """Remove the hooks and open the gates: the model trains as if never wrapped."""
        self._freeze.remove()

    # ----- checkpointing -----

    def state_dict(self) -> Dict[str, Any]:
        """JSON-able: the step, the policy's state and the decisions taken so far."""
        return {
            "schedule": AUTO,
            "global_step": self.global_step,
            "policy": self.policy.state_dict(),
            "decisions": [d.to_dict() for d in self.decisions],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the same policy state and step, hence the same decisions from here on."""
        if state.get("schedule") != AUTO:
            raise ValueError(f"checkpoint holds freeze schedule {state.get('schedule')!r}, not the auto schedule")
        self.policy.load_state_dict(state["policy"])
        self.decisions = [Decision.from_dict(d) for d in state["decisions"]]
        self._freeze.set_progress(int(state["global_step"]))
        self._rebind()

    def __repr__(self) -> str:
        return f"AutoFreezeSchedule(phase={self.policy.phase!r}, step={self.global_step}, schedule={str(self.schedule())!r})"


def _windows(changes: Sequence[tuple], total_steps: int) -> List[Window]:
    """``[(start_step, trains), ...]`` -> merged step windows up to the end of the run."""
    merged: List[tuple] = []
    for start, trains in changes:
        if start >= total_steps:  # a decision at the very end changes nothing
            continue
        if merged and merged[-1][1] == trains:
            continue
        merged.append((start, trains))
    windows = []
    for i, (start, trains) in enumerate(merged):
        end = merged[i + 1][0] if i + 1 < len(merged) else None
        windows.append(Window.steps(trains, start, end))
    return windows
