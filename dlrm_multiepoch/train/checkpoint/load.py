"""Loading a checkpoint into a built model, optimizer and further stateful parts, in place."""

from typing import Any, Dict, Iterator, Mapping, Sequence, Tuple

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemReader
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizer, KeyedOptimizerWrapper

from dlrm_multiepoch.tables import quiet_sharded_tensors


def _leaf_optimizers(optimizer: KeyedOptimizer, prefix: str = "") -> Iterator[Tuple[str, KeyedOptimizer]]:
    """``(key prefix, optimizer)`` of every non-combined optimizer inside ``optimizer``."""
    if isinstance(optimizer, CombinedOptimizer):
        for key, sub in optimizer.optimizers:
            yield from _leaf_optimizers(sub, CombinedOptimizer.prepend_opt_key(key, prefix))
    else:
        yield prefix, optimizer


def _materialize_optimizer_state(optimizer: KeyedOptimizer, saved_keys: Sequence[str], key: str = "optimizer") -> None:
    """Create the lazily-built optimizer state the checkpoint has values for, drop the state it has none for.

    DCP loads in place into the state dict it is given, and ``KeyedOptimizer.load_state_dict``
    refuses to load state into an optimizer that has none. A fresh ``torch.optim.Adam``
    has no state until its first step, so its moments must exist before loading. The
    fused table optimizers build theirs at sharding time. Only parameters with state in
    the checkpoint get it: a parameter frozen all along has none, and must stay without
    (Adam's step count starts at its first real step, as in an uninterrupted run). For
    the same reason a parameter that has state now but had none when the checkpoint was
    saved (loading an earlier checkpoint mid-run, e.g. the best-validation one) loses it.
    """
    prefix = f"{key}.state."
    saved = {k[len(prefix) :] for k in saved_keys if k.startswith(prefix)}

    def has_saved_state(key: str) -> bool:
        return any(k.startswith(key + ".") for k in saved)

    for prefix, leaf in _leaf_optimizers(optimizer):
        for key, param in leaf.params.items():
            if param in leaf.state and not has_saved_state(CombinedOptimizer.prepend_opt_key(key, prefix)):
                del leaf.state[param]
        missing = {
            key: param
            for key, param in leaf.params.items()
            if param not in leaf.state and has_saved_state(CombinedOptimizer.prepend_opt_key(key, prefix))
        }
        if not missing:
            continue
        if not isinstance(leaf, KeyedOptimizerWrapper):
            raise ValueError(
                f"cannot restore optimizer state of {type(leaf).__name__} for {sorted(missing)[:3]}...: it has no "
                "state yet and only torch optimizers wrapped by KeyedOptimizerWrapper can build it"
            )
        # A step on all-zero gradients builds the state (Adam: zero moments, step 1),
        # like KeyedOptimizer.init_state() but only for these parameters; the load then
        # overwrites state and weights alike. Other parameters keep grad None: skipped.
        grads = {key: p.grad for key, p in leaf.params.items()}
        for key, param in leaf.params.items():
            param.grad = torch.zeros_like(param) if key in missing else None
        leaf.step()
        for key, param in leaf.params.items():
            param.grad = grads[key]


def init_optimizer_state(optimizer: KeyedOptimizer, checkpoint_id: str, key: str = "optimizer") -> None:
    """Give ``optimizer`` exactly the state the checkpoint ``checkpoint_id`` holds for it, so ``dcp.load`` fills it.

    ``dcp.load`` loads in place into the state dict it builds from the optimizer, but a
    fresh ``torch.optim.Adam`` has no state until its first step (TorchRec's fused table
    optimizers have theirs from sharding): without this call its moments and step counts
    stay unloaded. A parameter the saved run never stepped (frozen all along) gets none,
    as it had none. Call it before ``dcp.load``; reads only the checkpoint's metadata.

    Args:
        optimizer: e.g. ``CombinedOptimizer([dmp.fused_optimizer, dense_optimizer])``, as saved.
        checkpoint_id: the folder ``dcp.save`` wrote.
        key: the optimizer's key in the saved dict.

    Example::

        state = {"model": dmp, "optimizer": optimizer, "freeze": freeze}
        init_optimizer_state(optimizer, path)
        dcp.load(state, checkpoint_id=path)
    """
    _materialize_optimizer_state(optimizer, list(FileSystemReader(checkpoint_id).read_metadata().state_dict_metadata), key)


def load_checkpoint(
    path: str, model: nn.Module, optimizer: KeyedOptimizer, tensor_state: Mapping[str, Dict[str, Any]] = {}
) -> None:
    """Load a checkpoint written by :func:`~dlrm_multiepoch.train.checkpoint.save.save_checkpoint`, in place.

    Collective. The model may be sharded differently or on another world size than
    when saved (DCP reshards), with the same parameter shapes (see
    :func:`~dlrm_multiepoch.train.checkpoint.compat.check_compatible`).

    Args:
        path: the checkpoint folder.
        model: the ``DistributedModelParallel`` model.
        optimizer: its ``CombinedOptimizer``.
        tensor_state: name -> a state dict with tensors, filled in place from the
            entries saved under that name (the caller passes them to its part's
            ``load_state_dict``).

    Example::

        load_checkpoint("runs/joint/checkpoints/step_240", dmp, optimizer)
    """
    saved_keys = list(FileSystemReader(path).read_metadata().state_dict_metadata)
    saved_parts = {key.split(".", 1)[0] for key in saved_keys}
    missing = sorted(set(tensor_state) - saved_parts)
    if missing:
        raise ValueError(f"checkpoint {path} holds no state for {missing}: it was saved by a run without them")
    _materialize_optimizer_state(optimizer, saved_keys)
    model_state = model.state_dict()
    optimizer_state = optimizer.state_dict()
    with quiet_sharded_tensors():
        dcp.load({"model": model_state, "optimizer": optimizer_state, **tensor_state}, checkpoint_id=path)
    # DCP filled the tensors in place; these calls also cover state_dict() entries that are copies.
    model.load_state_dict(model_state)
    optimizer.load_state_dict(optimizer_state)
