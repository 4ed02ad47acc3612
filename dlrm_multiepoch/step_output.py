"""What the parts and the metrics read from your model's output: the :class:`StepOutput` protocol.

A TorchRec train pipeline calls ``model(batch)``, which returns ``(loss, output)``; the
pipeline backpropagates the loss and ``pipeline.progress(...)`` returns ``output``. Any
output with the four fields below works with the project's parts: your own
``NamedTuple`` or dataclass, or the app's
:class:`~dlrm_multiepoch.models.dlrm.ModelOutput`. The batch itself can be any
``Pipelineable`` with a ``sparse_features`` KJT (TorchRec's
``torchrec.datasets.utils.Batch``, the app's ``Batch``, your own): the pipelines find
each sharded module's input there and ``IdDropout`` rewrites it.

Example::

    class Output(NamedTuple):
        loss: torch.Tensor     # detached
        logits: torch.Tensor   # [B] (one task) or [B, tasks]
        labels: torch.Tensor   # the logits' shape, 0/1
        weights: torch.Tensor  # [B], 0 for padding rows

    def forward(self, batch):
        ...
        return loss, Output(loss.detach(), logits.detach(), batch.labels, torch.ones_like(batch.labels))
"""

from typing import Protocol

import torch


class StepOutput(Protocol):
    """A model output the parts read: ``loss`` (the loop's ``after_window``), ``logits``, ``labels`` and
    ``weights`` (:class:`~dlrm_multiepoch.train.evaluate.BinaryMetrics`, your ``validate``).

    Attributes:
        loss: the step's loss, a scalar (detached: it is kept for the logging window).
        logits: ``[B]`` for one task or ``[B, tasks]``, one column per task in the metrics' order.
        labels: 0/1, the logits' shape.
        weights: ``[B]``, 1 for a real row and 0 for padding (every row 1 if your batches are not padded).
    """

    @property
    def loss(self) -> torch.Tensor: ...

    @property
    def logits(self) -> torch.Tensor: ...

    @property
    def labels(self) -> torch.Tensor: ...

    @property
    def weights(self) -> torch.Tensor: ...
