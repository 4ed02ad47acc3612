"""The unit of data every stage after the loader sees."""

from dataclasses import dataclass
from typing import Dict, Optional

import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
from torchrec.streamable import Pipelineable


@dataclass
class Batch(Pipelineable):
    """One rank's slice of a global batch, in TorchRec's ``Pipelineable`` form.

    Like ``torchrec.datasets.utils.Batch`` but with one label tensor per task and a
    per-sample ``weights`` tensor: ranks pad their last batch to a common size (sharded
    lookups need equal batch sizes) and padded samples carry weight 0, so no sample is
    dropped and none counts twice.

    Args:
        dense_features: ``[B, num_dense]`` float tensor.
        sparse_features: KJT with one bag per sample per feature.
        labels: task name -> ``[B]`` float tensor of 0/1 labels.
        weights: ``[B]`` float tensor, 1 for real samples and 0 for padding.
        slices: optional ``[B]`` int64 slice codes (bit ``i`` set: the sample is in the
            dataset's row slice ``i``, e.g. an unseen user; 0 for padding), for per-slice
            evaluation metrics.

    Example::

        batch = batch.to(torch.device("cuda"), non_blocking=True)
        logits = model(batch.dense_features, batch.sparse_features)
    """

    dense_features: torch.Tensor
    sparse_features: KeyedJaggedTensor
    labels: Dict[str, torch.Tensor]
    weights: torch.Tensor
    slices: Optional[torch.Tensor] = None

    @property
    def batch_size(self) -> int:
        return self.weights.numel()

    def to(self, device: torch.device, non_blocking: bool = False) -> "Batch":
        return Batch(
            dense_features=self.dense_features.to(device=device, non_blocking=non_blocking),
            sparse_features=self.sparse_features.to(device=device, non_blocking=non_blocking),
            labels={k: v.to(device=device, non_blocking=non_blocking) for k, v in self.labels.items()},
            weights=self.weights.to(device=device, non_blocking=non_blocking),
            slices=None if self.slices is None else self.slices.to(device=device, non_blocking=non_blocking),
        )

    def record_stream(self, stream: torch.Stream) -> None:
        # Only CUDA tensors have streams; on CPU this is a no-op (TorchRec's own Batch
        # raises "unknown parameter type" here, which breaks its semi-sync pipeline on CPU).
        if self.weights.device.type != "cuda":
            return
        self.dense_features.record_stream(stream)
        self.sparse_features.record_stream(stream)
        for label in self.labels.values():
            label.record_stream(stream)
        self.weights.record_stream(stream)
        if self.slices is not None:
            self.slices.record_stream(stream)

    def pin_memory(self) -> "Batch":
        return Batch(
            dense_features=self.dense_features.pin_memory(),
            sparse_features=self.sparse_features.pin_memory(),
            labels={k: v.pin_memory() for k, v in self.labels.items()},
            weights=self.weights.pin_memory(),
            slices=None if self.slices is None else self.slices.pin_memory(),
        )
