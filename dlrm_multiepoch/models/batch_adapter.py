"""A model over its own batch type, trained on the app's batches: :class:`BatchAdapter`."""

from typing import Any, Callable, Tuple

import torch
from torch import nn

from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.models.dlrm import ModelOutput


class BatchAdapter(nn.Module):
    """Your model, unchanged, behind the app's :class:`~dlrm_multiepoch.data.batch.Batch`:
    ``forward(batch) -> (loss, ModelOutput)``.

    ``to_batch`` builds your model's batch from the app's; let it only repackage the batch's
    tensors (``batch.sparse_features`` handed on as it is): TorchRec's pipelines trace the
    forward back to the batch to look each sharded module's input up early, and a KJT
    transformed on the way (a ``permute``, a split) hides it, so that module looks up inside
    the forward instead. The output is your model's, with ``weights`` taken from the app's
    batch (your batch type has none): 0 for the rows that pad a rank's last batch, and the
    ``--val_unseen_share`` weights, so the metrics count every row as the app means it. Your
    model's loss is its own: it also sees the padding rows.

    Args:
        model: ``forward(your_batch) -> (loss, output)``, the output with a
            :class:`~dlrm_multiepoch.step_output.StepOutput`'s ``loss``, ``logits`` (``[B]`` for one
            task, or ``[B, tasks]`` in ``data.tasks`` order) and ``labels`` (the logits' shape); an
            optional ``losses`` (name -> loss) is logged per name.
        to_batch: the app's ``Batch`` -> your model's batch.

    Example::

        from torchrec.datasets.utils import Batch as TorchRecBatch

        def build(data, cfg, device):                          # --model my_models:build
            task = data.tasks[0]
            return BatchAdapter(
                DeepFM(...), lambda b: TorchRecBatch(b.dense_features, b.sparse_features, b.labels[task])
            )
    """

    def __init__(self, model: nn.Module, to_batch: Callable[[Batch], Any]) -> None:
        super().__init__()
        self.model, self.to_batch = model, to_batch

    def forward(self, batch: Batch) -> Tuple[torch.Tensor, ModelOutput]:
        loss, out = self.model(self.to_batch(batch))
        # getattr with a default: an output without per-name losses logs the loss alone.
        return loss, ModelOutput(out.loss, getattr(out, "losses", {}), out.logits, out.labels, batch.weights)
