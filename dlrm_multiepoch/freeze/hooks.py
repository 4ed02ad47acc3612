"""The hooks that make a frozen group frozen.

- A forward hook on each embedding module cuts the frozen tables' embeddings from the
  autograd graph (``requires_grad_(False)`` does not work on FBGEMM's sharded tables).
  All tables frozen: the whole output is detached, so autograd runs no embedding
  backward, no backward all-to-all and no fused optimizer step. Some frozen: only their
  output columns are detached; they get an all-zero gradient, which the binding checks
  leaves their fused optimizer bitwise still.
- Step hooks on the dense optimizer keep the frozen parameters it trains (data-parallel
  or dense-kernel tables, ``module:`` groups) still: ``.grad = None`` before the step, so
  Adam's moments, step count and weight decay skip them. A table that shares a
  table-batched weight with others (TorchRec's ``TableBatchedEmbeddingSlice``: its
  ``.grad = None`` clears the gradient of every table in the batch) is saved before the
  step and restored after it, weights and optimizer state alike.
"""

from typing import Any, Dict, List, Optional, Set, Tuple

import torch
from torch import nn
from torchrec.distributed.composable.table_batched_embedding_slice import TableBatchedEmbeddingSlice
from torchrec.distributed.types import LazyAwaitable
from torchrec.sparse.jagged_tensor import KeyedTensor

from dlrm_multiepoch.gates import detach_value


def detach_keys(out: Any, frozen: Set[str], all_frozen: bool) -> Any:
    """``out`` with the embeddings under the ``frozen`` output keys cut from the graph.

    Args:
        out: an embedding module's output: ``KeyedTensor`` (EBC) or ``Dict[str, JaggedTensor]`` (EC).
        frozen: output keys to detach.
        all_frozen: detach everything (cheaper, and no backward at all).
    """
    if all_frozen:
        return detach_value(out)
    if isinstance(out, KeyedTensor):
        # Detach only the frozen keys' columns; values stay bitwise equal (same data, re-concatenated).
        chunks = torch.split(out.values(), out.length_per_key(), dim=out.key_dim())
        values = torch.cat(
            [c.detach() if k in frozen else c for k, c in zip(out.keys(), chunks)], dim=out.key_dim()
        )
        return KeyedTensor(keys=out.keys(), length_per_key=out.length_per_key(), values=values, key_dim=out.key_dim())
    if isinstance(out, dict):  # EmbeddingCollection: output key -> JaggedTensor
        return type(out)((k, detach_value(v) if k in frozen else v) for k, v in out.items())
    raise TypeError(f"cannot freeze tables of an embedding module returning {type(out).__name__}")


class FreezeState:
    """What is frozen in one embedding module right now; the wrapper sets it at step boundaries."""

    def __init__(self) -> None:
        self.frozen_tables: Set[str] = set()
        self.frozen_keys: Set[str] = set()
        self.all_frozen = False


def register_freeze_hook(module: nn.Module, state: FreezeState) -> torch.utils.hooks.RemovableHandle:
    """Forward hook on ``module`` that detaches what ``state`` says is frozen."""

    def hook(mod: nn.Module, inputs: Any, output: Any) -> Any:
        if not state.frozen_tables:
            return output
        # Capture the state now: a sharded output is only waited on later. The wrapper
        # replaces frozen_keys at a transition, never mutates it, so no copy is needed.
        frozen, all_frozen = state.frozen_keys, state.all_frozen
        if isinstance(output, LazyAwaitable):
            # First, before the module's own callbacks: a sharded FP-EBC's then ties its feature
            # processors back into the graph with a zero, which keeps DDP's static graph stable.
            output.callbacks.insert(0, lambda out: detach_keys(out, frozen, all_frozen))
            return output
        return detach_keys(output, frozen, all_frozen)

    return module.register_forward_hook(hook)


def _state_owner(optimizer: Any, param: torch.Tensor) -> Optional[Any]:
    """The torch optimizer (inside TorchRec's combined/keyed wrappers) that steps ``param``."""
    for child in [o for _, o in getattr(optimizer, "_optims", [])] or [getattr(optimizer, "_optimizer", None)]:
        if child is not None:
            found = _state_owner(child, param)
            if found is not None:
                return found
    if any(q is param for group in getattr(optimizer, "param_groups", []) for q in group["params"]):
        return optimizer
    return None


class FrozenDenseParams:
    """Keeps the frozen parameters of the dense optimizer still through its step.

    Args:
        optimizer: the dense optimizer (torch, or TorchRec's keyed/combined wrappers).
    """

    def __init__(self, optimizer: Any) -> None:
        self._optimizer = optimizer
        self._cleared: List[torch.Tensor] = []
        self._guarded: List[torch.Tensor] = []
        self._owners: Dict[int, Any] = {}
        # (weights, state owner, optimizer state) of each guarded parameter, from before the step
        self._saved: List[Tuple[torch.Tensor, Any, Optional[Dict[str, Any]]]] = []

    def set(self, params: List[torch.Tensor]) -> None:
        """The parameters frozen from now on."""
        self._cleared = [p for p in params if not isinstance(p, TableBatchedEmbeddingSlice)]
        self._guarded = [p for p in params if isinstance(p, TableBatchedEmbeddingSlice)]

    def before_step(self, *_: Any) -> None:
        for p in self._cleared:
            p.grad = None
        self._saved = []
        for p in self._guarded:
            if id(p) not in self._owners:
                self._owners[id(p)] = _state_owner(self._optimizer, p)
            owner = self._owners[id(p)]
            state = owner.state.get(p) if owner is not None else None
            saved = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in state.items()} if state else None
            self._saved.append((p.detach().clone(), owner, saved))

    def after_step(self, *_: Any) -> None:
        for p, (value, owner, saved) in zip(self._guarded, self._saved):
            with torch.no_grad():
                p.copy_(value)
            if owner is None:
                continue
            if saved is None:
                owner.state.pop(p, None)
            else:
                owner.state[p] = saved
        self._saved = []


def register_step_hooks(optimizer: Any, guard: FrozenDenseParams) -> List[Any]:
    """Run ``guard`` around the step of ``optimizer``'s dense parameters."""
    if getattr(type(optimizer).step, "hooked", False):
        # torch optimizers and TorchRec's CombinedOptimizer run their step hooks.
        return [optimizer.register_step_pre_hook(guard.before_step), optimizer.register_step_post_hook(guard.after_step)]
    inner = getattr(optimizer, "_optimizer", None)  # KeyedOptimizerWrapper and similar
    if inner is not None:
        return register_step_hooks(inner, guard)
    raise TypeError(
        f"optimizer of type {type(optimizer).__name__} runs no step hooks; pass a torch.optim.Optimizer, "
        "TorchRec KeyedOptimizerWrapper or CombinedOptimizer"
    )
