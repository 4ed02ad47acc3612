"""Gradient accumulation for sharded TorchRec models, with the fused table LR rescaled.

``--grad_accum_steps N``: the dense optimizer steps once every N micro-batches on the
mean of their gradients, and DDP all-reduces dense gradients only in the micro-batch
that closes the window (``no_sync`` in the others, data-parallel tables included).
FBGEMM's fused table optimizers update inside backward, so they still step every
micro-batch; their LR is multiplied by a named rule: ``1/N`` (N small steps add up to
about one step at the full LR, as the dense side takes one step on the averaged
gradient) or ``none``. TorchRec's ``GradientAccumulationWrapper`` leaves fused tables
at the full LR every micro-batch.

TorchRec pipelines call ``optimizer.zero_grad()`` at the start and ``optimizer.step()``
at the end of every ``progress``. As a part of the loop, accumulation acts in
:meth:`~dlrm_multiepoch.part.TrainPart.before_optimizer_step`, between the backward and the
step, on the optimizer the parts give the pipeline (``parts.wrap_optimizer``): it holds
the step inside a window (the gradients add up, ``zero_grad`` waits) and at the window's
last micro-batch divides the accumulated gradients by the window's length.

Example::

    accum = GradientAccumulation(dmp, optimizer, steps=4, rule="1/N")
    parts = TrainParts([TableLRScheduler(dmp, None, steps_per_epoch, epochs, factor=accum.lr_factor), accum])
    pipeline = TrainPipelineSparseDist(dmp, parts.wrap_optimizer(optimizer), device)
    for i in range(steps_per_epoch):
        with parts.step_context(i, last_of_epoch=i == steps_per_epoch - 1):
            pipeline.progress(batches)
        parts.after_step(i + 1)
"""

import contextlib
import warnings
from typing import Any, Callable, ContextManager, Dict, Iterator, List

import torch
from torch import nn
from torch.distributed._shard.sharded_tensor import ShardedTensor
from torch.distributed.checkpoint.stateful import Stateful
from torch.nn.parallel import DistributedDataParallel
from torchrec.distributed.embedding import ShardedEmbeddingCollection
from torchrec.distributed.embeddingbag import ShardedEmbeddingBagCollection

from dlrm_multiepoch.optim.options import ACCUMULATION_RULES, check_accumulation
from dlrm_multiepoch.part import TrainPart, TrainParts
from dlrm_multiepoch.saved_state import StateMismatch, check_count, check_state
from dlrm_multiepoch.tables import check_sharded


def ddp_modules(model: nn.Module) -> List[DistributedDataParallel]:
    """Every DDP wrapper in ``model``: the dense part and data-parallel table lookups
    (which sharded modules keep in a plain list, out of ``model.modules()``)."""
    found = [m for m in model.modules() if isinstance(m, DistributedDataParallel)]
    for m in model.modules():
        if isinstance(m, (ShardedEmbeddingBagCollection, ShardedEmbeddingCollection)):
            found.extend(lookup for lookup in m._lookups if isinstance(lookup, DistributedDataParallel))
    return found


def _check_not_static(model: nn.Module) -> None:
    """Refuse a dense DDP wrapper with a static graph, naming the setting that fixes it.

    A static-graph DDP expects the same all-reduces every iteration from its first one
    on; ``no_sync`` micro-batches break that, and its first backward then fails inside
    PyTorch (``expect_autograd_hooks_ INTERNAL ASSERT FAILED``), pointing away from the cause.
    """
    wrapped = getattr(model, "_dmp_wrapped_module", None)  # DistributedModelParallel's DDP around the dense part
    if isinstance(wrapped, DistributedDataParallel) and wrapped.static_graph:
        raise ValueError(
            "GradientAccumulation skips DDP's all-reduce between micro-batches, which the model's static-graph DDP "
            "(TorchRec's default) cannot: shard with DistributedModelParallel(..., data_parallel_wrapper="
            "DefaultDataParallelWrapper(static_graph=False)), and find_unused_parameters=True if the loss leaves a "
            "dense parameter unused"
        )


class GradientAccumulation(TrainPart):
    """Dense optimizer steps and DDP all-reduces every ``steps`` micro-batches.

    As a :class:`~dlrm_multiepoch.part.TrainPart`, ``step_context`` is :meth:`micro_batch`, and
    ``before_optimizer_step`` holds the step until the window's last micro-batch.

    Args:
        model: the ``DistributedModelParallel`` model.
        optimizer: its optimizer (``CombinedOptimizer`` of fused and dense parts).
        steps: micro-batches per optimizer step (N >= 1).
        rule: how the fused table LR is rescaled: ``"1/N"`` or ``"none"``.

    Example::

        accum = GradientAccumulation(dmp, optimizer, steps=4)
        accum.lr_factor          # 0.25: give it to TableLRScheduler(factor=...)
    """

    def __init__(self, model: nn.Module, optimizer: Any, steps: int, rule: str = "1/N") -> None:
        check_accumulation(steps, rule)
        check_sharded(model, "GradientAccumulation")
        if steps > 1:
            _check_not_static(model)
        self.steps = steps
        self.lr_factor = ACCUMULATION_RULES[rule](steps)
        self._ddp = ddp_modules(model)
        # What the optimizer steps from .grad: dense weights and data-parallel tables (whose
        # parameters are views with a .grad property); fused tables (ShardedTensor) have none.
        self.dense_params = [p for p in optimizer.params.values() if not isinstance(p, ShardedTensor)]
        self.accumulated = 0  # micro-batches since the last optimizer step
        self.optimizer_steps = 0
        self.closing = True
        self._inner, self._stepped = optimizer, None

    @property
    def optimizer(self) -> Any:
        """Deprecated: the optimizer to give the pipeline is ``TrainParts([...]).wrap_optimizer(optimizer)``; this
        one (the same for this part alone) keeps working for 0.2.x and stops in 0.3.0."""
        warnings.warn(
            "GradientAccumulation.optimizer: give the pipeline `parts.wrap_optimizer(optimizer)` (parts: a TrainParts "
            "holding the accumulation) instead of `accumulation.optimizer` (it stops working in dlrm-multiepoch 0.3.0)",
            DeprecationWarning,
            stacklevel=2,
        )
        if self._stepped is None:
            self._stepped = TrainParts([self]).wrap_optimizer(self._inner)
        return self._stepped

    @contextlib.contextmanager
    def micro_batch(self, last_of_epoch: bool = False) -> Iterator[bool]:
        """Wrap one training ``progress``: DDP skips its all-reduce unless this micro-batch
        closes the window (the N-th, or ``last_of_epoch``: a short last window). Yields
        whether it closes."""
        self.closing = last_of_epoch or self.accumulated + 1 >= self.steps
        with contextlib.ExitStack() as stack:
            if not self.closing:
                for ddp in self._ddp:
                    stack.enter_context(ddp.no_sync())
            yield self.closing

    def before_optimizer_step(self) -> bool:
        """Count the micro-batch; at a window's last, average its gradients and let the optimizer step."""
        self.accumulated += 1
        if not self.closing:
            return False
        if self.accumulated > 1:  # the mean over the window's micro-batches
            with torch.no_grad():
                for p in self.dense_params:
                    if p.grad is not None:
                        p.grad.div_(self.accumulated)
        self.accumulated = 0
        self.optimizer_steps += 1
        return True

    def state_dict(self) -> Dict[str, Any]:
        # Tensors, not ints: DCP flattens dicts of plain values differently on load than on save.
        return {"accumulated": torch.tensor(self.accumulated), "optimizer_steps": torch.tensor(self.optimizer_steps)}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Continue counting optimizer steps; StateMismatch for a state saved inside an accumulation window."""
        part = "gradient accumulation"
        check_state(part, state_dict, {"accumulated": None, "optimizer_steps": None})
        accumulated = check_count(part, "accumulated", state_dict["accumulated"])
        if accumulated:
            raise StateMismatch(
                f"{part}: the state was saved {accumulated} micro-batch(es) into an accumulation window, whose "
                "gradients are not saved; resume from a checkpoint taken at an optimizer step"
            )
        self.optimizer_steps = check_count(part, "optimizer_steps", state_dict["optimizer_steps"])

    # -- as a part of the training loop ---------------------------------------------

    def checkpoint_parts(self) -> Dict[str, Stateful]:
        return {"accumulation": self}

    def describe(self, log: Callable[[str], None], record: Callable[[str, Any], None]) -> None:
        log(f"gradient accumulation: {self.steps} micro-batches per dense step, table LR x{self.lr_factor:g}")

    def step_context(self, step: int, last_of_epoch: bool) -> ContextManager:
        return self.micro_batch(last_of_epoch=last_of_epoch)
