"""Embedding tables in and out of ``torch.distributed.checkpoint``, keyed by table name.

A table checkpoint holds one tensor per table, named by the table (``"user"``,
``"item"``, ...), not by its module path: the pre-training model and any fine-tuning
model (TorchRec's DLRM, the multi-path model) share tables by name whatever their
module layout. ``torch.distributed.checkpoint`` stores each rank's shards and reshards
on load, so the fine-tuning run may use another sharding plan or world size.
"""

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from dlrm_multiepoch.json_io import read_json
from dlrm_multiepoch.tables import duplicate_table_names, embedding_modules, quiet_sharded_tensors

SUMMARY_FILE = "pretrain.json"  # written by the pre-training app (python -m dlrm_multiepoch.pretrain) beside the tables


def table_state_dict(model: nn.Module) -> Dict[str, torch.Tensor]:
    """Every embedding table's weight in ``model``, keyed by table name.

    Works on unsharded collections and on ``DistributedModelParallel`` (sharded tables
    come as ``ShardedTensor`` views of the live weights; data-parallel ones as plain
    tensors).

    Example::

        table_state_dict(dmp)  # {"user": ShardedTensor(...), "item": ShardedTensor(...)}
    """
    modules = embedding_modules(model)
    duplicates = duplicate_table_names(modules)
    if duplicates:
        name, paths = sorted(duplicates.items())[0]
        raise ValueError(
            f"table {name!r} appears in both {paths[0]!r} and {paths[1]!r}: table checkpoints are keyed "
            f"by table name, so names must be unique in a model"
        )
    return {name: tensor for m in modules for name, tensor in m.weights().items()}


def save_tables(model: nn.Module, path: str) -> List[str]:
    """Save every table of ``model`` to the checkpoint folder ``path``; returns the table names.

    Collective: every rank of the model's process group must call it.

    Example::

        save_tables(dmp, "checkpoints/pretrained-bookcrossing")
    """
    tables = table_state_dict(model)
    if not tables:
        raise ValueError("model has no EmbeddingBagCollection or EmbeddingCollection tables to save")
    dcp.save(tables, checkpoint_id=path)
    return sorted(tables)


@dataclass
class PretrainedTablesReport:
    """Which tables came from the checkpoint and which kept their fresh initialisation."""

    path: str
    loaded: List[str] = field(default_factory=list)
    fresh: List[str] = field(default_factory=list)
    unused: List[str] = field(default_factory=list)  # in the checkpoint, not in the model

    def __str__(self) -> str:
        lines = [f"pre-trained tables from {self.path}:", f"  loaded: {', '.join(self.loaded) or '(none)'}"]
        lines.append(f"  freshly initialised: {', '.join(self.fresh) or '(none)'}")
        if self.unused:
            lines.append(f"  in the checkpoint but not in the model: {', '.join(self.unused)}")
        return "\n".join(lines)


def load_pretrained_tables(
    model: nn.Module,
    path: str,
    log: Callable[[str], None] = print,
    strict: bool = False,
    data_options: Optional[Mapping[str, Any]] = None,
) -> PretrainedTablesReport:
    """Load the tables saved by :func:`save_tables` into ``model``, by table name, in place.

    The model may be sharded differently, or over another world size, than the model
    that saved them. Tables the checkpoint lacks keep their initialisation and are
    reported as fresh. Collective on a sharded model.

    Args:
        model: the (usually ``DistributedModelParallel``) model whose tables to fill.
        path: checkpoint folder (``--pretrained_tables``).
        log: receives the report.
        strict: raise instead of leaving any model table fresh.
        data_options: this run's data flags (``DataConfig.cache_options()``): a table of
            another size is then explained by the flags that differ from pre-training's.

    Raises:
        FileNotFoundError: ``path`` holds no checkpoint.
        ValueError: a table's shape or dtype differs from the model's (naming the table),
            no model table is in the checkpoint, or (``strict``) one is missing.

    Example::

        report = load_pretrained_tables(dmp, cfg.freeze.pretrained_tables, logger.info)
        report.fresh  # tables that were not pre-trained
    """
    tables = table_state_dict(model)
    if not os.path.isfile(os.path.join(path, ".metadata")):
        raise FileNotFoundError(
            f"--pretrained_tables {path!r}: no torch.distributed.checkpoint there (no {path}/.metadata); "
            f"the model's tables are {sorted(tables)}. Run python -m dlrm_multiepoch.pretrain --pretrain_output {path} first."
        )
    saved = {
        name: meta
        for name, meta in FileSystemReader(path).read_metadata().state_dict_metadata.items()
        if isinstance(meta, TensorStorageMetadata)
    }
    with quiet_sharded_tensors():
        shapes = {name: (tuple(tensor.shape), tensor.dtype) for name, tensor in tables.items()}
    for name, (want, dtype) in shapes.items():
        if name not in saved:
            continue
        have = tuple(saved[name].size)
        if want != have:
            raise ValueError(
                f"--pretrained_tables {path!r}: table {name!r} is {have[0]} rows x {have[1]} dims in the checkpoint "
                f"but {want[0]} x {want[1]} in the model (pre-train with the same dataset encoding and "
                f"--embedding_dim){_encoding_changes(path, data_options)}"
            )
        if saved[name].properties.dtype != dtype:
            raise ValueError(
                f"--pretrained_tables {path!r}: table {name!r} is {saved[name].properties.dtype} in the checkpoint "
                f"but {dtype} in the model"
            )
    report = PretrainedTablesReport(
        path=path,
        loaded=[n for n in tables if n in saved],
        fresh=[n for n in tables if n not in saved],
        unused=sorted(set(saved) - set(tables)),
    )
    if not report.loaded:
        raise ValueError(
            f"--pretrained_tables {path!r}: none of the model's tables {sorted(tables)} is in the checkpoint "
            f"(it holds {sorted(saved)})"
        )
    if strict and report.fresh:
        raise ValueError(f"--pretrained_tables {path!r}: table(s) {report.fresh} missing from the checkpoint")
    with quiet_sharded_tensors():
        dcp.load({name: tables[name] for name in report.loaded}, checkpoint_id=path)
    log(str(report))
    return report


def _encoding_changes(path: str, data_options: Optional[Mapping[str, Any]]) -> str:
    """``: pre-trained with --val_fraction 0.0, this run has 0.1`` from ``pretrain.json``; '' if unknown."""
    try:
        saved = read_json(os.path.join(path, SUMMARY_FILE)).get("data") or {}
    except (OSError, ValueError):
        return ""
    changed = [
        f"--{k} {saved[k]!r} in pre-training, {v!r} here"
        for k, v in (data_options or {}).items()
        if k in saved and saved[k] != v
    ]
    return f"; the data flags differ: {'; '.join(changed)}" if changed else ""
