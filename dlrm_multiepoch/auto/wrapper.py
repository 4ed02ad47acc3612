"""``AutoFreezeSchedule``: the automatic schedule applied to a TorchRec model.

The policy's decisions are a :class:`~dlrm_multiepoch.freeze.ScheduleSource`
(:class:`PolicySource`) of a :class:`~dlrm_multiepoch.freeze.FreezeScheduleWrapper`, so
freezing works exactly as with a fixed schedule (tables cut from the graph, bitwise
unchanged while frozen, gates opened and closed). The decisions taken so far read as a
fixed schedule in steps (``tables=frozen@[0step,412step) train@[412step,end)``, the
current state held to the end), which replays as a ``--freeze_schedule``.
"""

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

import torch
from torch import nn
from torch.distributed.checkpoint.stateful import Stateful

from dlrm_multiepoch.auto.config import AUTO, AutoScheduleConfig
from dlrm_multiepoch.auto.policy import (
    DONE,
    JOINT,
    AutoSchedulePolicy,
    Decision,
    TaskMetrics,
)
from dlrm_multiepoch.freeze import FreezeScheduleWrapper, ScheduleSource
from dlrm_multiepoch.freeze.scheduler import States
from dlrm_multiepoch.part import FreezePart, Position, WindowLog
from dlrm_multiepoch.saved_state import check_state
from dlrm_multiepoch.schedule import TABLES, FreezeSchedule, Window


class PolicySource(ScheduleSource):
    """The states an :class:`AutoSchedulePolicy` decided, step by step (tables, and its gate).

    Args:
        policy: the policy; its phase and gate histories are the source of truth.
    """

    def __init__(self, policy: AutoSchedulePolicy) -> None:
        self.policy = policy
        self.gate = policy.config.auto_gate
        super().__init__([TABLES] + ([f"gate:{self.gate}"] if self.gate else []))
        self.decisions: List[Decision] = []

    def states(self, step: int) -> States:
        phase = _at(self.policy.phase_history, step)
        states: States = {TABLES: phase == JOINT}
        if self.gate:
            changes = [[0, True]] + [[s, is_open] for s, _, is_open in self.policy.gate_history]
            states[f"gate:{self.gate}"] = bool(_at(changes, step))
        return states

    def possible_states(self) -> Iterable[States]:
        gate_states = (True, False) if self.gate else (None,)
        for tables in (True, False):
            for gate in gate_states:
                yield {TABLES: tables} | ({f"gate:{self.gate}": gate} if self.gate else {})

    def describe(self) -> str:
        return AUTO

    def state_dict(self) -> Dict[str, Any]:
        return {"policy": self.policy.state_dict(), "decisions": [d.to_dict() for d in self.decisions]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state("automatic schedule", state, {"policy": dict, "decisions": list})
        self.policy.load_state_dict(state["policy"])
        self.decisions = [Decision.from_dict(d) for d in state["decisions"]]


def _at(history: Sequence[Sequence[Any]], step: int) -> Any:
    """The value of a ``[[start_step, value], ...]`` history (ascending starts) during ``step``."""
    value = history[0][1]
    for start, v in history:
        if start > step:
            break
        value = v
    return value


class AutoFreezeSchedule(FreezePart):
    """Validation-driven freezing of a model's tables (and one gate), next to ``FreezeScheduleWrapper``.

    Call :meth:`step` after every optimizer step, evaluate the validation split whenever
    :meth:`evaluation_due` says so and pass the metrics to :meth:`observe`; act on the
    returned :class:`~dlrm_multiepoch.auto.policy.Decision` (save the best checkpoint,
    restore it, stop). The caller evaluates: the schedule never sees a data split. As a
    :class:`~dlrm_multiepoch.part.TrainPart` it is its :class:`FreezeScheduleWrapper`'s
    part; :class:`~dlrm_multiepoch.train.auto_run.AutoRun` acts on its decisions in a loop.

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
        self.policy = AutoSchedulePolicy(steps_per_epoch, num_epochs, tasks, self.config)
        # Evaluations in epochs, so patience means the same share of an epoch on any dataset.
        self.eval_every_n_steps = max(1, round(steps_per_epoch / self.config.auto_evals_per_epoch))
        self.source = PolicySource(self.policy)
        self.freeze = FreezeScheduleWrapper(
            model, self.source, steps_per_epoch, num_epochs, optimizer=optimizer, start_step=start_step
        )

    @property
    def decisions(self) -> List[Decision]:
        """Every decision so far, in order."""
        return self.source.decisions

    @property
    def schedule(self) -> FreezeSchedule:
        """The decisions so far as a fixed schedule in steps; the current state holds to the end (an attribute,
        as :attr:`FreezeScheduleWrapper.schedule`)."""
        total = self.policy.total_steps
        states = [(int(s), phase == JOINT) for s, phase in self.policy.phase_history]
        groups = {TABLES: _windows(states, total)}
        gate = self.config.auto_gate
        if gate:
            changes = [(int(s), bool(is_open)) for s, _, is_open in self.policy.gate_history]
            groups[f"gate:{gate}"] = _windows([(0, True)] + changes, total)
        return FreezeSchedule(groups)

    # ----- training -----

    @property
    def global_step(self) -> int:
        return self.freeze.global_step

    @property
    def stopped(self) -> bool:
        """Whether the schedule ended the run (the best weights still have to be restored)."""
        return self.policy.phase == DONE

    def step(self) -> None:
        """Advance one optimizer step; call after each ``optimizer.step()``/``pipeline.progress()``."""
        self.freeze.step()

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
        self.source.decisions.append(decision)
        if decision.transition or decision.gates:
            self.freeze.set_progress(self.global_step)  # in force from this step on
        return decision

    def states(self) -> Dict[str, int]:
        """Each group's state now: 1 trains (gate open), 0 frozen (closed)."""
        return self.freeze.states()

    def frozen_tables(self) -> List[str]:
        """Tables frozen now (the semi-sync pipeline's hint)."""
        return self.freeze.frozen_tables()

    def remove(self) -> None:
        """Remove the hooks and open the gates: the model trains as if never wrapped."""
        self.freeze.remove()

    def check_bound(self) -> None:
        """As :meth:`FreezeScheduleWrapper.check_bound`."""
        self.freeze.check_bound()

    # ----- as a part of a training loop (the wrapper's hooks) -----

    def after_step(self, step: int) -> None:
        self.freeze.after_step(step)

    def after_load(self, position: Position) -> None:
        self.freeze.after_load(position)

    def after_window(self, losses: Sequence[torch.Tensor], step: int, log: WindowLog) -> None:
        self.freeze.after_window(losses, step, log)

    def checkpoint_parts(self) -> Dict[str, Stateful]:
        return {"freeze": self}

    # ----- checkpointing (a torch.distributed.checkpoint Stateful, like FreezeScheduleWrapper) -----

    def state_dict(self) -> Dict[str, Any]:
        """The step, ``"schedule": "auto"``, the policy's state and the decisions so far (packed as
        :meth:`FreezeScheduleWrapper.state_dict` packs them)."""
        return self.freeze.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the same policy state and step, hence the same decisions from here on."""
        self.freeze.load_state_dict(state)

    def __repr__(self) -> str:
        return f"AutoFreezeSchedule(phase={self.policy.phase!r}, step={self.global_step}, schedule={str(self.schedule)!r})"


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
