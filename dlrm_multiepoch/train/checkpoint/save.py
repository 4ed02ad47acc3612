"""Saving a checkpoint (DCP shards, then the state file with every file's checksum) and pruning old ones."""

import os
import shutil
from typing import Any, Callable, List, Mapping

import torch.distributed.checkpoint as dcp
from torch import nn
from torchrec.optim.keyed import KeyedOptimizer

from dlrm_multiepoch import distributed as D
from dlrm_multiepoch.json_io import write_json
from dlrm_multiepoch.run_files import (
    FORMAT_VERSION,
    PROTECTED_FILE,
    TMP_SUFFIX,
    checkpoint_name,
    complete_checkpoints,
    is_protected,
    state_path,
    step_of,
)
from dlrm_multiepoch.train.checkpoint.find import record_files


def write_checkpoint(
    path: str,
    model: nn.Module,
    optimizer: KeyedOptimizer,
    state: Mapping[str, Any],
    tensor_state: Mapping[str, Any] = {},
) -> str:
    """Save model, optimizer and ``tensor_state`` to the checkpoint folder ``path``, atomically; returns ``path``.

    Collective: every rank writes its own shards with ``torch.distributed.checkpoint``
    into ``<path>.tmp``; the ranks then record each file's size and sha256, rank 0
    writes ``trainer_state.json`` (``state`` plus that manifest) last and renames the
    folder to ``path`` (replacing an older one). No pruning: :func:`save_checkpoint`
    adds that.

    Args:
        path: the checkpoint folder to write.
        model: the ``DistributedModelParallel`` model.
        optimizer: its ``CombinedOptimizer`` (fused table optimizers and dense optimizer).
        state: JSON-able state; must hold ``step``; non-finite numbers become ``null``.
        tensor_state: further state dicts holding tensors, saved beside ``model`` and
            ``optimizer`` (sharded tensors reshard on load).

    Example::

        write_checkpoint("runs/auto/checkpoints/best_step_120", dmp, optimizer, {"step": 120})
    """
    tmp = path + TMP_SUFFIX
    main = D.rank() == 0
    if main:
        shutil.rmtree(tmp, ignore_errors=True)  # left by an earlier interrupted save
        os.makedirs(tmp)
    D.barrier()
    dcp.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), **tensor_state}, checkpoint_id=tmp)
    D.barrier()  # every rank's shards are on disk before they are hashed
    files = record_files(tmp)
    if main:
        full = {"format": FORMAT_VERSION, **state, "tensor_parts": sorted(tensor_state), "files": files}
        write_json(state_path(tmp), full)
        if os.path.exists(path):  # re-saving a step after resuming from an older checkpoint
            shutil.rmtree(path)
        os.rename(tmp, path)
        _fsync_dir(os.path.dirname(os.path.abspath(path)))
    D.barrier()
    return path


def save_checkpoint(
    folder: str,
    step: int,
    model: nn.Module,
    optimizer: KeyedOptimizer,
    state: Mapping[str, Any],
    tensor_state: Mapping[str, Any] = {},
    keep: int = 2,
    log: Callable[[str], None] = print,
) -> str:
    """Save the training state after ``step`` optimizer steps to ``<folder>/step_<step>``; returns that path.

    Collective (see :func:`write_checkpoint`); rank 0 then prunes old checkpoints.

    Args:
        folder: the run's checkpoint folder (``<run_dir>/checkpoints``).
        step: optimizer steps done; names the folder.
        model, optimizer, state, tensor_state: as for :func:`write_checkpoint`.
        keep: complete checkpoints to keep (>= 1), not counting protected ones.
        log: rank-0 logger for pruned folders.

    Example::

        save_checkpoint("runs/joint/checkpoints", 240, dmp, optimizer, {"config": cfg.to_dict()}, keep=2)
    """
    if keep < 1:
        raise ValueError(f"--keep_checkpoints must be >= 1, got {keep}")
    path = write_checkpoint(
        os.path.join(folder, checkpoint_name(step)), model, optimizer, {**state, "step": step}, tensor_state
    )
    if D.rank() == 0:
        for removed in prune(folder, keep, step):
            log(f"removed checkpoint {removed}")
    D.barrier()
    return path


def prune(folder: str, keep: int, saved: int) -> List[str]:
    """Keep the ``keep`` newest unprotected complete checkpoints up to step ``saved``; return what went.

    Checkpoints past ``saved`` belong to a run that this one resumed from an older
    checkpoint and superseded (protected ones too: their timeline is gone);
    interrupted saves never resume. Both go. Protected checkpoints up to ``saved``
    stay and do not count toward ``keep``.
    """
    done = complete_checkpoints(folder)
    later = [p for s, p in done if s > saved]
    kept_candidates = [p for s, p in done if s <= saved and not is_protected(p)]
    stale = later + kept_candidates[:-keep]
    stale += [
        os.path.join(folder, n)
        for n in os.listdir(folder)
        if n.endswith(TMP_SUFFIX) and step_of(n[: -len(TMP_SUFFIX)]) is not None
    ]
    for path in stale:
        shutil.rmtree(path)
    return stale


def protect(path: str, reason: str) -> None:
    """Keep the checkpoint at ``path`` from pruning (e.g. the best validation checkpoint)."""
    write_json(os.path.join(path, PROTECTED_FILE), {"reason": reason})


def unprotect(path: str) -> None:
    """Let pruning remove the checkpoint at ``path`` again."""
    file = os.path.join(path, PROTECTED_FILE)
    if os.path.exists(file):
        os.remove(file)


def _fsync_dir(path: str) -> None:
    # The rename is durable only once the folder's own entry is on disk.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
