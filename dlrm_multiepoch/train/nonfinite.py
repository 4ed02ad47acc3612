"""Non-finite losses: stop at the first one, naming the step and the last good checkpoint, or skip such batches.

Stopping costs nothing per step: the trainer already reads each logging window's
losses, and one all-reduce per window agrees across ranks on the first bad step
(every rank must stop together, or its peers hang in the next collective). By then
the bad step's update is applied, so the run stops and points at the last
checkpoint, which was saved before it.

Skipping (``--skip_nonfinite_batches``) has to decide before the backward pass,
because the fused table optimizers update during it: :class:`SkipNonFiniteBatches`
checks each training step's loss on every rank (one host sync and one all-reduce
per step) and, if any rank's is not finite, runs no backward on any rank, so no
weight and no optimizer state changes.
"""

from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import nn
from torchrec.distributed.model_parallel import DistributedModelParallel

from dlrm_multiepoch.part import Position, TrainPart, WindowLog


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite."""


def _all_reduce_min(value: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return value


def first_nonfinite_step(losses: Sequence[torch.Tensor], last_step: int) -> Optional[int]:
    """The first step of a logging window whose loss is not finite on any rank, or None (collective).

    Args:
        losses: the window's per-step losses on this rank, in step order.
        last_step: the (1-based) step number of the window's last loss.
    """
    bad = ~torch.isfinite(torch.stack(list(losses)))
    n = bad.numel()
    first = torch.where(bad.any(), bad.int().argmax(), torch.tensor(n, device=bad.device)).reshape(1)
    first = int(_all_reduce_min(first)[0])
    return None if first == n else last_step - n + 1 + first


class StopOnNonFinite(TrainPart):
    """Stop the run at a non-finite loss (all ranks together), naming the step and the last good checkpoint.

    Checked once per logging window (``after_window``), with one all-reduce.

    Args:
        steps_per_epoch: optimizer steps per epoch (names the epoch in the message).
        last_checkpoint: the path of the run's last checkpoint, or None.

    Example::

        stop = StopOnNonFinite(len(loader), lambda: last_checkpoint)
        stop.after_window(losses, step, logger)     # raises NonFiniteLossError
    """

    def __init__(self, steps_per_epoch: int, last_checkpoint: Callable[[], Optional[str]] = lambda: None) -> None:
        self.steps_per_epoch = steps_per_epoch
        self.last_checkpoint = last_checkpoint

    def after_window(self, losses: Sequence[torch.Tensor], step: int, log: WindowLog) -> None:
        bad = first_nonfinite_step(losses, step)
        if bad is not None:
            raise NonFiniteLossError(
                f"non-finite training loss at step {bad} (epoch {(bad - 1) // self.steps_per_epoch + 1}); the weights "
                f"after it are not usable. Last good checkpoint: {self.last_checkpoint() or 'none'}. Resume from it "
                f"with --resume PATH after lowering --learning_rate / --embedding_learning_rate or checking the data, "
                f"or pass --skip_nonfinite_batches to skip such batches"
            )


class SkipNonFiniteBatches(TrainPart):
    """Forward hook on the training module: a step whose loss is not finite on some rank trains nothing.

    The module returns ``(loss, output)`` (the train pipelines' contract). When any
    rank's loss is NaN or infinite, every rank gets a fresh zero loss that is not
    connected to the model, so ``backward()`` computes nothing, the fused table
    optimizers apply no update, and the dense parameters' gradients are cleared so the
    optimizer step skips them (Adam's step count does not advance). As a
    :class:`~dlrm_multiepoch.part.TrainPart` it reports the skipped steps every
    window and keeps its count in the checkpointed position (``skipped_nonfinite``).

    Args:
        module: the model: the ``DistributedModelParallel`` model or its training module (``dmp.module``).

    Example::

        skipper = SkipNonFiniteBatches(dmp)
        ...                                   # train
        print(skipper.skipped)                # batches skipped so far
    """

    def __init__(self, module: nn.Module) -> None:
        # The module the pipeline's forward reaches inside DMP and DDP: its hook sees every training step.
        module = module.module if isinstance(module, DistributedModelParallel) else module
        self.module = module
        self.skipped = 0
        self._handle = module.register_forward_hook(self._hook)

    def _hook(self, module: nn.Module, inputs: Any, output: Tuple[torch.Tensor, Any]) -> Any:
        if not module.training:
            return output
        loss, out = output
        finite = _all_reduce_min(torch.isfinite(loss.detach()).to(torch.int32).reshape(1))
        if bool(finite[0]):
            return output
        self.skipped += 1
        for p in module.parameters():
            p.grad = None
        return loss.new_zeros(()).requires_grad_(), out

    def remove(self) -> None:
        self._handle.remove()

    def after_window(self, losses: Sequence[torch.Tensor], step: int, log: WindowLog) -> None:
        skipped = [step - len(losses) + 1 + i for i, x in enumerate(losses) if not torch.isfinite(x)]
        if skipped:
            log.info(
                f"WARNING: non-finite loss at step(s) {skipped}: batches skipped, no update "
                f"({self.skipped} skipped so far)"
            )
        log.scalars({"train/skipped_nonfinite_batches": self.skipped}, step)

    def before_save(self, position: Position) -> None:
        position.skipped_nonfinite = self.skipped

    def after_load(self, position: Position) -> None:
        self.skipped = position.skipped_nonfinite


def finite_mean(losses: List[torch.Tensor]) -> float:
    """Mean of the finite losses of a logging window (skipped steps' NaN left out); NaN if none."""
    stacked = torch.stack(losses)
    finite = stacked[torch.isfinite(stacked)]
    return float(finite.mean()) if finite.numel() else float("nan")
