"""Per-epoch training checkpoints: save the whole training state, find the one to resume, load it.

A checkpoint is one folder ``<run_dir>/checkpoints/epoch_<N>/`` holding:

- a ``torch.distributed.checkpoint`` of ``{"model": dmp.state_dict(), "optimizer":
  optimizer.state_dict()}``: every rank writes its own table shards (``ShardedTensor``),
  dense weights once, and the optimizer state the same way (the fused tables'
  row-wise Adagrad momentum as ``ShardedTensor``, dense Adam moments as tensors);
- ``trainer_state.json``, written by rank 0 *after* every rank's shards are on disk:
  epochs done, step, freeze-schedule state, the metrics summary so far, the config and
  table sizes (to refuse a checkpoint whose shapes differ). A folder without it is an
  interrupted save.

Saves go to ``epoch_<N>.tmp`` first; rank 0 renames it to ``epoch_<N>`` and only then
points ``checkpoints/latest.json`` at it, so neither a folder named ``epoch_<N>`` nor
``latest.json`` ever names a partial save. DCP checkpoints of several hosts need a
folder every rank can see (a shared filesystem), as TorchRec's and torchtitan's do.

Example::

    save_checkpoint(f"{run_dir}/checkpoints", 1, dmp, optimizer, {"step": 120, ...}, keep=2)
    info = find_checkpoint("auto", f"{run_dir}/checkpoints")
    if info is not None:
        load_checkpoint(info.path, dmp, optimizer)
"""

import json
import os
import re
import shutil
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.stateful import Stateful
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizer, KeyedOptimizerWrapper

from dlrm_multiepoch.data.dataset import TableSpec

CHECKPOINTS_DIR = "checkpoints"
STATE_FILE = "trainer_state.json"  # written last inside a checkpoint folder: it marks the folder complete
LATEST_FILE = "latest.json"
FORMAT_VERSION = 1
_TMP_SUFFIX = ".tmp"
_FOLDER = re.compile(r"^epoch_(\d+)$")

# Config fields (dotted paths into TrainConfig.to_dict()) that change parameter or
# optimizer-state shapes: a checkpoint loads only into a run with the same values.
# Table sizes, which follow from every data option, are compared separately.
SHAPE_FIELDS = (
    "data.dataset",
    "data.history_length",
    "data.dense_cols",  # dense input width
    "data.task_thresholds",  # number of tasks, i.e. head widths
    "model.model",
    "model.embedding_dim",
    "model.dense_arch_layer_sizes",
    "model.over_arch_layer_sizes",
    "model.dcn_num_layers",
    "model.dcn_low_rank_dim",
    "model.transformer_layers",
    "model.transformer_heads",
    "model.transformer_ff_dim",
    "model.sequence_head_layer_sizes",
    "optim.embedding_optimizer",  # row-wise vs element-wise Adagrad state
)


@dataclass
class CheckpointInfo:
    """A complete checkpoint folder and its ``trainer_state.json``.

    Args:
        path: the checkpoint folder.
        state: the trainer state saved with it (``epoch``, ``step``, ``config``, ``tables``,
            ``freeze``, ``summary``, ``wall_time_s``).
    """

    path: str
    state: Dict[str, Any]

    @property
    def epoch(self) -> int:
        """Epochs completed when it was saved."""
        return int(self.state["epoch"])

    @property
    def step(self) -> int:
        """Optimizer steps completed when it was saved."""
        return int(self.state["step"])


# -- saving ---------------------------------------------------------------------


def checkpoint_name(epoch: int) -> str:
    return f"epoch_{epoch}"


def save_checkpoint(
    folder: str,
    epoch: int,
    model: nn.Module,
    optimizer: KeyedOptimizer,
    trainer_state: Mapping[str, Any],
    keep: int = 2,
    parts: Optional[Mapping[str, Stateful]] = None,
) -> str:
    """Save the training state after ``epoch`` epochs to ``<folder>/epoch_<epoch>``; returns that path.

    Collective: every rank calls it. Rank 0 then keeps only the newest ``keep``
    complete checkpoints and removes folders of interrupted saves.

    Args:
        folder: the run's checkpoint folder (``<run_dir>/checkpoints``).
        epoch: epochs completed (1-based).
        model: the ``DistributedModelParallel`` model.
        optimizer: its ``CombinedOptimizer`` (fused table optimizers and dense optimizer).
        trainer_state: JSON-serialisable trainer state; must hold ``step``.
        keep: complete checkpoints to keep (>= 1).
        parts: more training state by name (``Stateful``: e.g. FALR counters, sharded
            like their tables), saved in the same DCP checkpoint beside model and optimizer.

    Example::

        save_checkpoint("runs/joint/checkpoints", 2, dmp, optimizer, {"step": 240, "summary": {...}})
    """
    if keep < 1:
        raise ValueError(f"--keep_checkpoints must be >= 1, got {keep}")
    final = write_checkpoint(
        os.path.join(folder, checkpoint_name(epoch)), model, optimizer, {**trainer_state, "epoch": epoch}, parts
    )
    if _rank() == 0:
        _write_json(
            os.path.join(folder, LATEST_FILE),
            {"path": checkpoint_name(epoch), "epoch": epoch, "step": int(trainer_state["step"])},
        )
        _prune(folder, keep, epoch)
    _barrier()
    return final


def write_checkpoint(
    path: str,
    model: nn.Module,
    optimizer: KeyedOptimizer,
    trainer_state: Mapping[str, Any],
    parts: Optional[Mapping[str, Stateful]] = None,
) -> str:
    """Save model, optimizer and the named ``parts`` to the checkpoint folder ``path``,
    atomically; returns ``path``.

    Collective. The save lands in ``<path>.tmp``; ``trainer_state.json`` is written after
    every rank's shards are on disk, then the folder is renamed to ``path`` (replacing an
    older one). No ``latest.json``, no pruning: :func:`save_checkpoint` adds those.

    Example::

        write_checkpoint("runs/auto/checkpoints/best_step_120", dmp, optimizer, {"step": 120})
    """
    tmp = path + _TMP_SUFFIX
    main = _rank() == 0
    if main:
        shutil.rmtree(tmp, ignore_errors=True)  # left by an earlier interrupted save
        os.makedirs(tmp)
    _barrier()
    dcp.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), **_parts(parts)}, checkpoint_id=tmp)
    _barrier()  # every rank's shards are on disk before the folder is marked complete
    if main:
        _write_json(os.path.join(tmp, STATE_FILE), {"format": FORMAT_VERSION, **trainer_state})
        if os.path.exists(path):  # re-training after resuming from an older checkpoint
            shutil.rmtree(path)
        os.rename(tmp, path)
    _barrier()
    return path


def _prune(folder: str, keep: int, saved: int) -> None:
    """Keep the ``keep`` newest complete checkpoints up to the one just ``saved``.

    Checkpoints of later epochs belong to the run this one resumed from an older
    checkpoint and superseded; interrupted saves are never resumable. Both go.
    """
    done = [epoch for epoch, _ in complete_checkpoints(folder)]
    stale = [e for e in done if e > saved] + [e for e in done if e <= saved][:-keep]
    for epoch in stale:
        shutil.rmtree(os.path.join(folder, checkpoint_name(epoch)))
    for name in os.listdir(folder):
        if name.endswith(_TMP_SUFFIX) and _FOLDER.match(name[: -len(_TMP_SUFFIX)]):
            shutil.rmtree(os.path.join(folder, name))


# -- finding one to resume ---------------------------------------------------------


def complete_checkpoints(folder: str) -> List[Tuple[int, str]]:
    """``(epoch, path)`` of every complete checkpoint in ``folder``, oldest first."""
    if not os.path.isdir(folder):
        return []
    found = []
    for name in os.listdir(folder):
        match = _FOLDER.match(name)
        path = os.path.join(folder, name)
        if match and os.path.isfile(os.path.join(path, STATE_FILE)):
            found.append((int(match.group(1)), path))
    return sorted(found)


def read_checkpoint(path: str) -> CheckpointInfo:
    """The complete checkpoint at ``path``.

    Raises:
        FileNotFoundError: ``path`` is not a folder.
        ValueError: the folder is an interrupted save (no ``trainer_state.json`` or no
            DCP ``.metadata``) or of an unknown format.
    """
    if not os.path.isdir(path):
        raise FileNotFoundError(f"--resume {path!r}: no such checkpoint folder")
    missing = [f for f in (".metadata", STATE_FILE) if not os.path.isfile(os.path.join(path, f))]
    if missing:
        parent = os.path.dirname(os.path.normpath(path))
        others = [p for _, p in complete_checkpoints(parent)]
        raise ValueError(
            f"--resume {path!r}: incomplete checkpoint (no {' and no '.join(missing)}; {STATE_FILE} is written "
            f"last, so this save was interrupted). Complete checkpoints beside it: {others or 'none'}"
        )
    with open(os.path.join(path, STATE_FILE)) as f:
        state = json.load(f)
    if state.get("format") != FORMAT_VERSION:
        raise ValueError(
            f"--resume {path!r}: checkpoint format {state.get('format')!r}, this version reads {FORMAT_VERSION}"
        )
    return CheckpointInfo(path=path, state=state)


def find_checkpoint(resume: str, folder: str) -> Optional[CheckpointInfo]:
    """The checkpoint ``--resume`` asks for; None to start fresh.

    Args:
        resume: ``""`` (start fresh), ``"auto"`` (the latest complete checkpoint in
            ``folder``, if any) or a checkpoint folder.
        folder: this run's checkpoint folder (``<run_dir>/checkpoints``).

    Raises:
        FileNotFoundError / ValueError: an explicit path that is missing or incomplete,
            or a ``latest.json`` naming a folder that is gone.

    Example::

        info = find_checkpoint(cfg.resume, f"{run_dir}/checkpoints")
    """
    if not resume:
        return None
    if resume != "auto":
        return read_checkpoint(resume)
    latest = os.path.join(folder, LATEST_FILE)
    if not os.path.isfile(latest):
        return None
    with open(latest) as f:
        name = json.load(f)["path"]
    path = os.path.join(folder, name)
    if not os.path.isfile(os.path.join(path, STATE_FILE)):
        raise ValueError(
            f"--resume auto: {latest} names {name!r}, which is missing or incomplete; complete checkpoints: "
            f"{[p for _, p in complete_checkpoints(folder)] or 'none'} (pass one as --resume PATH)"
        )
    return read_checkpoint(path)


def _get(config: Mapping[str, Any], dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = value[part]
    return value


def _flat(config: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[prefix + key] = value
    return out


def check_compatible(info: CheckpointInfo, config: Mapping[str, Any], tables: Sequence[TableSpec]) -> List[str]:
    """Refuse a checkpoint whose shapes differ from this run's; list the other changed settings.

    Args:
        info: the checkpoint to resume.
        config: this run's ``TrainConfig.to_dict()``.
        tables: this run's embedding tables (``InteractionData.tables``).

    Returns:
        ``"--flag saved -> now"`` for each other setting that differs (e.g. a longer
        ``--epochs``), for the log.

    Raises:
        ValueError: naming the first differing shape field (``--embedding_dim``, ...) or table.

    Example::

        for change in check_compatible(info, cfg.to_dict(), data.tables):
            log(f"resuming with {change}")
    """
    saved = info.state["config"]
    for dotted in SHAPE_FIELDS:
        before, now = _get(saved, dotted), _get(config, dotted)
        if before != now:
            flag = "--" + dotted.split(".")[-1]
            raise ValueError(
                f"--resume {info.path!r}: the checkpoint was trained with {flag} {before!r}, this run has {now!r}; "
                f"{flag} changes parameter shapes, so the checkpoint cannot be loaded (use {flag} {before!r} or "
                f"start fresh)"
            )
    saved_tables: Dict[str, int] = info.state["tables"]
    current = {t.name: t.num_embeddings for t in tables}
    changed_data = [f"--{k.split('.')[-1]}" for k, v in _flat(saved["data"], "data.").items() if _get(config, k) != v]
    for name in sorted(set(saved_tables) | set(current)):
        if saved_tables.get(name) != current.get(name):
            raise ValueError(
                f"--resume {info.path!r}: table {name!r} has {saved_tables.get(name)} rows in the checkpoint but "
                f"{current.get(name)} in this run's data (data options changed: {changed_data or 'none'}; the "
                f"dataset's encoding must match)"
            )
    flat_now = _flat(config)
    return [
        f"--{key.split('.')[-1]} {value!r} -> {flat_now.get(key)!r}"
        for key, value in _flat(saved).items()
        if key != "resume" and flat_now.get(key) != value
    ]


# -- loading ----------------------------------------------------------------------


def _leaf_optimizers(optimizer: KeyedOptimizer, prefix: str = "") -> Iterator[Tuple[str, KeyedOptimizer]]:
    """``(key prefix, optimizer)`` of every non-combined optimizer inside ``optimizer``."""
    if isinstance(optimizer, CombinedOptimizer):
        for key, sub in optimizer.optimizers:
            yield from _leaf_optimizers(sub, CombinedOptimizer.prepend_opt_key(key, prefix))
    else:
        yield prefix, optimizer


def _materialize_optimizer_state(optimizer: KeyedOptimizer, saved_keys: Sequence[str]) -> None:
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
    saved = {k[len("optimizer.state.") :] for k in saved_keys if k.startswith("optimizer.state.")}

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


def load_checkpoint(
    path: str, model: nn.Module, optimizer: KeyedOptimizer, parts: Optional[Mapping[str, Stateful]] = None
) -> None:
    """Load a checkpoint written by :func:`save_checkpoint` into ``model``, ``optimizer``
    and the named ``parts`` (DCP calls their ``load_state_dict``), in place.

    Collective. The model must be sharded the same way as when saved or differently
    (DCP reshards), with the same parameter shapes (see :func:`check_compatible`).

    Example::

        load_checkpoint("runs/joint/checkpoints/epoch_2", dmp, optimizer)
    """
    saved_keys = list(FileSystemReader(path).read_metadata().state_dict_metadata)
    saved_parts = {k.split(".")[0] for k in saved_keys}
    missing = sorted(set(_parts(parts)) - saved_parts)
    if missing:
        raise ValueError(
            f"--resume {path!r}: the checkpoint holds no {missing} state; it was trained without the options that "
            "create it (e.g. --falr): resume with the checkpoint's options or start fresh"
        )
    _materialize_optimizer_state(optimizer, saved_keys)
    model_state = model.state_dict()
    optimizer_state = optimizer.state_dict()
    dcp.load({"model": model_state, "optimizer": optimizer_state, **_parts(parts)}, checkpoint_id=path)
    # DCP filled the tensors in place; these calls also cover state_dict() entries that are copies.
    model.load_state_dict(model_state)
    optimizer.load_state_dict(optimizer_state)


# -- helpers -----------------------------------------------------------------------


def _parts(parts: Optional[Mapping[str, Stateful]]) -> Dict[str, Stateful]:
    parts = dict(parts or {})
    clash = sorted(set(parts) & {"model", "optimizer"})
    if clash:
        raise ValueError(f"checkpoint part names {clash} are taken by the model and optimizer")
    return parts


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _write_json(path: str, value: Any) -> None:
    tmp = path + _TMP_SUFFIX
    with open(tmp, "w") as f:
        json.dump(value, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
