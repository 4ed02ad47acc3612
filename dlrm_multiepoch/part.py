"""The one interface of a training loop's parts: hooks at fixed points of every step, each a no-op by default.

A part is any object of the loop beside the model, the optimizer and the pipeline: the
freeze schedule (fixed or automatic), each table remedy (LR schedule, FALR,
re-initialisation, gradient accumulation, id dropout), the non-finite-loss policy, the
pipeline's per-window logging and the validator. The loop owns the step count and hands
it to every hook; a part never counts steps itself. The app's
:class:`~dlrm_multiepoch.train.trainer.Trainer` and a user's own loop (docs/DROPIN.md's
block) call the same hooks in the same places, so they compute the same thing.

Where the hooks run::

    parts.before_epoch(epoch)                       # epoch start (not on a mid-epoch resume)
    batches = parts.epoch_batches(batches, epoch, start)
    with parts.step_context(step, last_of_epoch):   # around each training step
        pipeline.progress(batches)                  # forward, backward, then in its optimizer's step
                                                    # (parts.wrap_optimizer): parts.before_optimizer_step()
    step += 1
    parts.after_step(step)
    parts.after_window(losses, step, log)           # every logging window
    parts.before_save(progress) / after_save()      # around each checkpoint
    parts.after_load(progress)                      # after a resume or a branch loads
"""

import contextlib
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional, Protocol, Sequence

import torch
from torch.distributed.checkpoint.stateful import Stateful


class WindowLog(Protocol):
    """Where parts write: ``scalars(values, step)`` (TensorBoard) and ``info(line)`` (console), e.g. a
    :class:`~dlrm_multiepoch.train.metrics_logger.MetricsLogger`."""

    def scalars(self, values: Dict[str, float], step: int) -> None: ...

    def info(self, message: str) -> None: ...


class Position(Protocol):
    """The loop's position (its one step count), e.g. a :class:`~dlrm_multiepoch.train.progress.TrainProgress`."""

    step: int
    skipped_nonfinite: int


class TrainPart:
    """A piece of a training loop; every hook does nothing unless a part overrides it.

    Subclass it and override only the hooks your part needs. Steps are numbers of
    optimizer steps done over the whole run (``after_step(1)`` follows the first step).

    Example::

        class PrintEveryEpoch(TrainPart):
            def before_epoch(self, epoch: int) -> None:
                print(f"epoch {epoch + 1}")

        parts = TrainParts([freeze, table_lr, PrintEveryEpoch()])
    """

    def checkpoint_parts(self) -> Dict[str, Stateful]:
        """Named ``Stateful`` state to save in every checkpoint (default: none)."""
        return {}

    def describe(self, log: Callable[[str], None], record: Callable[[str, Any], None]) -> None:
        """Say once, at build time, what the part does (console ``log``, summary ``record``)."""

    def before_epoch(self, epoch: int) -> None:
        """Epoch ``epoch`` (0-based) starts from its first batch."""

    def epoch_batches(self, batches: Iterator[Any], epoch: int, start: int) -> Iterator[Any]:
        """The epoch's training batches from batch ``start`` on (a mid-epoch resume starts later)."""
        return batches

    def step_context(self, step: int, last_of_epoch: bool) -> ContextManager:
        """Wraps training step ``step`` (0-based: the step about to run)."""
        return contextlib.nullcontext()

    def before_optimizer_step(self) -> bool:
        """The step's backward is done and its gradients are in ``.grad`` (the fused table optimizers have
        already applied theirs): act on them before the optimizer steps. Return False to hold this step: the
        optimizer does not step and the gradients stay, for the next backward to add to (its ``zero_grad`` waits
        for a step). Called inside ``pipeline.progress`` when the pipeline steps :meth:`TrainParts.wrap_optimizer`."""
        return True

    def after_step(self, step: int) -> None:
        """``step`` optimizer steps are done."""

    def after_window(self, losses: Sequence[torch.Tensor], step: int, log: WindowLog) -> None:
        """A logging window ended at ``step``; ``losses`` are its per-step losses on this rank."""

    def before_save(self, position: Position) -> None:
        """A checkpoint of ``position`` is about to be saved: put what it must hold there."""

    def after_save(self) -> None:
        """A checkpoint was saved."""

    def after_load(self, position: Position) -> None:
        """A checkpoint was loaded: continue at ``position`` (its step and what it holds)."""


class FreezePart(TrainPart):
    """The loop's freeze part: which tables the coming step leaves untouched. This base freezes nothing
    (``--freeze_schedule joint``); :class:`~dlrm_multiepoch.FreezeScheduleWrapper` and
    :class:`~dlrm_multiepoch.AutoFreezeSchedule` are the others.

    Example::

        pipeline = SemiSyncTrainPipeline(model, optimizer, device, frozen_tables=freeze.frozen_tables)
    """

    def frozen_tables(self) -> List[str]:
        """Tables frozen now (a pipeline may look them up early: they cannot change in this step's update)."""
        return []


def overrides(part: TrainPart, hook: str) -> bool:
    """Whether ``part`` does something at ``hook`` (its class overrides :class:`TrainPart`'s no-op)."""
    return getattr(type(part), hook) is not getattr(TrainPart, hook)


class TrainParts(TrainPart):
    """Several parts as one: each hook calls the parts in order (``epoch_batches`` chains them,
    ``step_context`` nests them, the first part's context outermost). The per-step hooks call only
    the parts that override them: a run's no-op parts cost its steps nothing.

    Args:
        parts: the parts, in the order their hooks run.

    Example::

        parts = TrainParts([freeze, TableLRScheduler(dmp, schedule, len(loader), epochs)])
        with parts.step_context(step, last_of_epoch=False):
            pipeline.progress(batches)
        parts.after_step(step + 1)
    """

    def __init__(self, parts: Sequence[TrainPart]) -> None:
        self.parts: List[TrainPart] = list(parts)
        self._step_contexts = [p for p in self.parts if overrides(p, "step_context")]
        self._gradient_parts = [p for p in self.parts if overrides(p, "before_optimizer_step")]
        self._after_steps = [p for p in self.parts if overrides(p, "after_step")]

    def wrap_optimizer(self, optimizer: Any) -> Any:
        """The optimizer to give the pipeline: one that calls :meth:`before_optimizer_step` between each backward
        and the step, or ``optimizer`` itself when no part acts on gradients."""
        return _HookedOptimizer(optimizer, self) if self._gradient_parts else optimizer

    def checkpoint_parts(self) -> Dict[str, Stateful]:
        named: Dict[str, Stateful] = {}
        for part in self.parts:
            for name, state in part.checkpoint_parts().items():
                if name in named:
                    raise ValueError(f"two parts save their state as {name!r}: give each part its own name")
                named[name] = state
        return named

    def describe(self, log: Callable[[str], None], record: Callable[[str, Any], None]) -> None:
        for part in self.parts:
            part.describe(log, record)

    def before_epoch(self, epoch: int) -> None:
        for part in self.parts:
            part.before_epoch(epoch)

    def epoch_batches(self, batches: Iterator[Any], epoch: int, start: int) -> Iterator[Any]:
        for part in self.parts:
            batches = part.epoch_batches(batches, epoch, start)
        return batches

    def step_context(self, step: int, last_of_epoch: bool) -> ContextManager:
        if not self._step_contexts:
            return contextlib.nullcontext()
        if len(self._step_contexts) == 1:
            return self._step_contexts[0].step_context(step, last_of_epoch)
        stack = contextlib.ExitStack()
        for part in self._step_contexts:
            stack.enter_context(part.step_context(step, last_of_epoch))
        return stack

    def before_optimizer_step(self) -> bool:
        return all([part.before_optimizer_step() for part in self._gradient_parts])  # every part acts, then one vote

    def after_step(self, step: int) -> None:
        for part in self._after_steps:
            part.after_step(step)

    def after_window(self, losses: Sequence[torch.Tensor], step: int, log: WindowLog) -> None:
        for part in self.parts:
            part.after_window(losses, step, log)

    def before_save(self, position: Position) -> None:
        for part in self.parts:
            part.before_save(position)

    def after_save(self) -> None:
        for part in self.parts:
            part.after_save()

    def after_load(self, position: Position) -> None:
        for part in self.parts:
            part.after_load(position)


class _HookedOptimizer:
    """What a TorchRec pipeline calls ``zero_grad()`` and ``step()`` on (:meth:`TrainParts.wrap_optimizer`)."""

    def __init__(self, optimizer: Any, parts: TrainParts) -> None:
        self.inner = optimizer
        self._parts = parts
        self._held = False  # the last step was held: its gradients stay for the next backward

    def zero_grad(self, *args: Any, **kwargs: Any) -> None:
        if not self._held:
            self.inner.zero_grad(*args, **kwargs)

    def step(self, closure: Optional[Callable[[], Any]] = None) -> None:
        self._held = not self._parts.before_optimizer_step()
        if not self._held:
            self.inner.step(closure)

    @property
    def param_groups(self) -> Any:
        return self.inner.param_groups
