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

from typing import Protocol, Sequence

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


FIELDS = ("loss", "logits", "labels", "weights")


def check_step_output(result: object, batch_size: int, tasks: Sequence[str], where: str) -> None:
    """Refuse a forward's ``result`` the parts and the metrics cannot read, naming ``where`` (e.g. the flag).

    Expected: ``(loss, output)``, ``loss`` a one-element tensor, ``output`` with the four
    :class:`StepOutput` fields; its ``logits`` ``[B, tasks]`` (``[B]`` also with one task),
    ``labels`` of the logits' shape, ``weights`` ``[B]``.

    Example::

        check_step_output(model(batch), batch.batch_size, ["like"], "--model my_models:build")

    Raises:
        ValueError: naming ``where``, what came back and what was expected.
    """
    expected = f"(loss, output), output with {', '.join(FIELDS)} (a StepOutput)"
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise ValueError(f"{where}: forward(batch) returned {_kind(result)}; expected {expected}")
    loss, out = result
    if not (isinstance(loss, torch.Tensor) and loss.numel() == 1):
        raise ValueError(f"{where}: forward(batch)'s loss is {_kind(loss)}; expected a one-element tensor")
    if isinstance(out, torch.Tensor):
        raise ValueError(f"{where}: forward(batch) returned (loss, {_kind(out)}); expected {expected}")
    missing = [f for f in FIELDS if not isinstance(getattr(out, f, None), torch.Tensor)]
    if missing:
        raise ValueError(f"{where}: forward(batch)'s output {type(out).__name__} has no tensor {missing}; expected {expected}")
    shapes = [(batch_size, len(tasks))] + ([(batch_size,)] if len(tasks) == 1 else [])
    for name, got, allowed in (
        ("logits", out.logits.shape, shapes),
        ("labels", out.labels.shape, [tuple(out.logits.shape)]),
        ("weights", out.weights.shape, [(batch_size,)]),
    ):
        if tuple(got) not in allowed:
            raise ValueError(
                f"{where}: forward(batch)'s output.{name} has shape {list(got)} on a batch of {batch_size} rows; expected "
                f"{' or '.join(str(list(s)) for s in allowed)} (tasks {list(tasks)})"
            )


def _kind(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"
