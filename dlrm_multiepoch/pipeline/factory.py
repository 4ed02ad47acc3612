"""Build the train pipeline the app's ``--pipeline`` flag names."""

from typing import Any, Callable, Collection, Iterator, Optional, Protocol

import torch
from torchrec.distributed.train_pipeline.train_pipelines import TrainPipelineSemiSync, TrainPipelineSparseDist

from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.names import PIPELINES, check_name
from dlrm_multiepoch.pipeline.semi_sync import STALENESS_INTERVAL, SemiSyncTrainPipeline
from dlrm_multiepoch.step_output import StepOutput

__all__ = ["PIPELINES", "StepPipeline", "make_train_pipeline"]


class StepPipeline(Protocol):
    """What a training loop drives: TorchRec's ``TrainPipeline`` call shape, which every ``--pipeline`` has.

    ``progress(batches)`` takes the next batch from ``batches`` and, with the model in training
    mode, runs its forward, backward and optimizer step (in eval mode, its forward only), and returns
    the model's output; it raises ``StopIteration`` once ``batches`` and the batches in flight are done.
    """

    def progress(self, dataloader_iter: Iterator[Batch]) -> StepOutput: ...


def make_train_pipeline(
    name: str,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    warmup_batches: int = 0,
    frozen_tables: Optional[Callable[[], Collection[str]]] = None,
    staleness_interval: int = STALENESS_INTERVAL,
    step_count: Optional[Callable[[], int]] = None,
    **kwargs: Any,
) -> TrainPipelineSparseDist:
    """One of TorchRec's ``TrainPipelineSparseDist``, our ``SemiSyncTrainPipeline`` or TorchRec's ``TrainPipelineSemiSync``.

    Args:
        name: ``sparse_dist`` (synchronous), ``semi_sync`` (ours, staleness 1) or
            ``torchrec_semi_sync`` (TorchRec's, CUDA only).
        model: the ``DistributedModelParallel`` model.
        optimizer: its optimizer.
        device: compute device.
        warmup_batches: synchronous batches before overlapping (``semi_sync``: fresh
            lookups for batch indices below it; ``torchrec_semi_sync``: its ``start_batch``).
        frozen_tables: freeze-schedule hint for ``semi_sync``, e.g.
            ``FreezeScheduleWrapper.frozen_tables`` (ignored by the others).
        staleness_interval: ``semi_sync`` measures staleness on one step in this many.
        step_count: ``semi_sync`` reads the training steps done from this (the loop's counter).
        **kwargs: further ``TrainPipelineSparseDist`` arguments.

    Example::

        pipeline = make_train_pipeline(args.pipeline, dmp, optimizer, env.device, warmup_batches=100)
    """
    check_name("--pipeline", name, PIPELINES)
    if name == "sparse_dist":
        return TrainPipelineSparseDist(model, optimizer, device, **kwargs)
    if name == "semi_sync":
        return SemiSyncTrainPipeline(
            model, optimizer, device, staleness=1, warmup_batches=warmup_batches, frozen_tables=frozen_tables,
            staleness_interval=staleness_interval, step_count=step_count, **kwargs
        )
    if device.type != "cuda":  # the last name: torchrec_semi_sync
        raise ValueError(
            "--pipeline torchrec_semi_sync needs CUDA: TorchRec 1.8's TrainPipelineSemiSync calls "
            "record_stream on CPU tensors (RuntimeError: unknown parameter type); use --pipeline semi_sync"
        )
    return TrainPipelineSemiSync(model, optimizer, device, start_batch=warmup_batches, **kwargs)
