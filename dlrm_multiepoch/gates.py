"""Named gradient-path gates: identity forward, optionally no gradient backward."""

from typing import Any

import torch
from torch import nn
from torchrec.distributed.types import LazyAwaitable
from torchrec.sparse.jagged_tensor import JaggedTensor, KeyedJaggedTensor, KeyedTensor


def detach_value(x: Any) -> Any:
    """``x`` with every tensor it carries detached; structure and values unchanged.

    Handles tensors, ``KeyedTensor``, ``JaggedTensor``, ``KeyedJaggedTensor`` (whose
    values are ids, returned as is unless weighted) and dicts/lists/tuples of them.
    """
    if isinstance(x, LazyAwaitable):  # a sharded module's pending output
        return detach_value(LazyAwaitable._wait_async(x))
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, KeyedTensor):
        return KeyedTensor(
            keys=x.keys(), length_per_key=x.length_per_key(), values=x.values().detach(), key_dim=x.key_dim()
        )
    if isinstance(x, KeyedJaggedTensor):
        weights = x.weights_or_none()
        if weights is None:
            return x
        return KeyedJaggedTensor(
            keys=x.keys(), values=x.values(), weights=weights.detach(), lengths=x.lengths(), offsets=x.offsets()
        )
    if isinstance(x, JaggedTensor):
        weights = x.weights_or_none()
        return JaggedTensor(
            values=x.values().detach(),
            weights=None if weights is None else weights.detach(),
            lengths=x.lengths(),
            offsets=x.offsets(),
        )
    if isinstance(x, dict):
        return type(x)((k, detach_value(v)) for k, v in x.items())
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(detach_value(v) for v in x)
    if isinstance(x, tuple):  # NamedTuple
        return type(x)(*(detach_value(v) for v in x))
    if hasattr(x, "detach"):  # e.g. an fx Proxy while TorchRec's pipeline traces the model
        return x.detach()
    raise TypeError(f"cannot detach a {type(x).__name__}: pass tensors, KeyedTensor, JaggedTensor or containers of them")


class GradientGate(nn.Module):
    """A named gate on a gradient path, opened and closed by a freeze schedule.

    Forward is the identity (the very same objects when open, detached copies with
    equal values when closed). A closed gate stops the gradient from flowing back
    through it, so whatever feeds the gate (e.g. the embedding tables) gets no
    gradient through this path while everything after it still trains. Gates are
    found by name: every gate called ``"feature_cross"`` follows the schedule group
    ``gate:feature_cross``.

    Args:
        name: the gate's schedule name.
        open: initial state.

    Example::

        # One line: gate the sparse features on their way into the interaction.
        dlrm.sparse_arch = nn.Sequential(dlrm.sparse_arch, GradientGate("feature_cross"))
        # or: x = self.cross_gate(embeddings) inside a forward.
    """

    def __init__(self, name: str, open: bool = True) -> None:
        super().__init__()
        if not name or not isinstance(name, str):
            raise ValueError(f"GradientGate needs a non-empty name, got {name!r}")
        self.name = name
        self.open = open

    def forward(self, x: Any) -> Any:
        return x if self.open else detach_value(x)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, open={self.open}"
