"""Bitwise snapshots of a sharded model and its optimizers, for the freeze-schedule tests.

A snapshot holds this rank's copy of every parameter, table shard and optimizer state
tensor (fused table state such as row-wise Adagrad's ``momentum1`` included), keyed
``w.<state_dict key>`` or ``opt.<optimizer state key>``. A table-wise table lives on one
rank: the others hold no key of it.
"""

import re
from typing import Any, Dict, Iterable, Optional

import torch
from torchrec.distributed import DistributedModelParallel


def _flat(prefix: str, value: Any, out: Dict[str, torch.Tensor]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}", v, out)
    elif hasattr(value, "local_shards"):  # ShardedTensor: this rank's shards
        shards = [s.tensor for s in value.local_shards()]
        if shards:
            out[prefix] = torch.cat([s.flatten() for s in shards]).clone()
    elif isinstance(value, torch.Tensor):
        out[prefix] = value.detach().clone()


def snapshot(dmp: DistributedModelParallel, optimizer: Any) -> Dict[str, torch.Tensor]:
    """Copies of this rank's weights (``w.``) and optimizer state (``opt.``)."""
    out: Dict[str, torch.Tensor] = {}
    _flat("w", dmp.state_dict(), out)
    _flat("opt", optimizer.state_dict()["state"], out)
    return out


def table_of(key: str, tables: Iterable[str]) -> Optional[str]:
    """The table a snapshot key belongs to (EmbeddingBagCollection or EmbeddingCollection), else None."""
    return next((t for t in tables if re.search(rf"\.(embedding_bags|embeddings)\.{re.escape(t)}\.", key)), None)


def changed(
    before: Dict[str, torch.Tensor],
    after: Dict[str, torch.Tensor],
    tables: Iterable[str],
    table: Optional[str] = None,
) -> Dict[str, bool]:
    """Key -> whether it differs (or appeared/vanished), for ``table``'s keys, or every non-table key."""
    tables = list(tables)
    keys = [k for k in before.keys() | after.keys() if table_of(k, tables) == table]
    return {k: k not in before or k not in after or not torch.equal(before[k], after[k]) for k in sorted(keys)}


def held_tables(snap: Dict[str, torch.Tensor], tables: Iterable[str]) -> list:
    """Tables with a weight shard on this rank."""
    return [t for t in tables if any(k.startswith("w.") and table_of(k, [t]) for k in snap)]
