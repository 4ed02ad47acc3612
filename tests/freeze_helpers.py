"""What changed between two snapshots (``tests.sharding_helpers.snapshot``), per table, for the freeze tests."""

import re
from typing import Dict, Iterable, Optional

import torch


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
