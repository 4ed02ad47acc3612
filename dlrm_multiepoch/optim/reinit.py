"""Re-initialise embedding tables and their optimizer state at epoch boundaries (MEDA).

MEDA (arXiv 2305.19531, 2407.01607) resets the embedding tables at the start of each
epoch so they never see an example twice, while the rest of the model keeps training.
``--reinit`` names the events::

    tables@each                 every table, before every epoch after the first
    tables@1,2                  every table, before epochs 2 and 3 (after 1 and 2 epochs)
    table:t_user@1; table:t_item@2

Values are drawn from the table's own initialiser (TorchRec's uniform
``[weight_init_min, weight_init_max]``, by default ``+-sqrt(1/num_embeddings)``) with a
generator seeded by ``(seed, table, epoch, block of rows)``, so a table gets the same
values however it is sharded, and equals :func:`init_values` of the full table. The
table's optimizer state is zeroed: the fused optimizer's accumulators in the TBE, and
the dense optimizer's state for data-parallel tables.

Example::

    events = ReinitSchedule.parse("tables@each", num_epochs=3)
    for epoch in range(3):
        reinit_tables(dmp, optimizer, events.tables_at(epoch, table_names(dmp)), seed=0, epoch=epoch)
        train_one_epoch()
"""

import zlib
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import nn

from dlrm_multiepoch.optim.options import ReinitSchedule  # noqa: F401  (re-exported)
from dlrm_multiepoch.optim.shards import TableShard, table_shards
from dlrm_multiepoch.part import TrainPart
from dlrm_multiepoch.tables import check_sharded, table_names

ROWS_PER_BLOCK = 1 << 16  # rows drawn per seeded generator: the unit of sharding independence


def _block_seed(seed: int, table: str, epoch: int, block: int) -> int:
    return zlib.crc32(f"{seed}/{table}/{epoch}/{block}".encode())


def init_values(
    table: str, num_embeddings: int, dim: int, low: float, high: float, seed: int, epoch: int, rows: slice
) -> torch.Tensor:
    """The re-initialised values of rows ``rows`` (all columns) of ``table``, on the CPU.

    Rows are drawn in blocks of :data:`ROWS_PER_BLOCK`, each from its own seeded generator,
    so any shard's values are a slice of the full table's.
    """
    start, stop = rows.start or 0, min(rows.stop if rows.stop is not None else num_embeddings, num_embeddings)
    parts = []
    for block in range(start // ROWS_PER_BLOCK, (max(stop, 1) - 1) // ROWS_PER_BLOCK + 1):
        first = block * ROWS_PER_BLOCK
        n = min(ROWS_PER_BLOCK, num_embeddings - first)
        gen = torch.Generator().manual_seed(_block_seed(seed, table, epoch, block))
        values = torch.empty(n, dim).uniform_(low, high, generator=gen)
        parts.append(values[max(start - first, 0) : stop - first])
    return torch.cat(parts) if parts else torch.empty(0, dim)


def _reinit_shard(shard: TableShard, seed: int, epoch: int) -> None:
    cfg = shard.config
    values = init_values(
        cfg.name,
        cfg.num_embeddings,
        cfg.embedding_dim,
        cfg.get_weight_init_min(),
        cfg.get_weight_init_max(),
        seed,
        epoch,
        slice(shard.row_offset, shard.row_offset + shard.local_rows),
    )
    weight = shard.weight()
    with torch.no_grad():
        weight.copy_(values[:, shard.col_offset : shard.col_offset + shard.local_cols])
        for state in shard.optimizer_states():
            state.zero_()


def _reset_dense_state(optimizer: Any, table: str) -> int:
    """Zero the dense optimizer's state of a data-parallel table; returns tensors reset."""
    reset = 0
    params: Dict[str, Any] = dict(getattr(optimizer, "params", {}))
    state = getattr(optimizer, "state", {})
    for key, param in params.items():
        parts = key.split(".")
        if len(parts) >= 2 and parts[-2] == table and param in state:
            for value in state[param].values():
                if isinstance(value, torch.Tensor):
                    value.zero_()
                    reset += 1
    return reset


def reinit_tables(model: nn.Module, optimizer: Any, tables: Sequence[str], seed: int, epoch: int) -> None:
    """Re-initialise ``tables`` of a sharded ``model`` (local shards, collective-free) and zero
    their optimizer state.

    Args:
        model: the ``DistributedModelParallel`` model.
        optimizer: its optimizer (for data-parallel tables' dense optimizer state).
        tables: table names (every rank passes the same).
        seed: the run's seed.
        epoch: the event's epoch; part of the values' seed.
    """
    check_sharded(model, "reinit_tables")
    known = table_names(model)
    unknown = sorted(set(tables) - set(known))
    if unknown:
        raise ValueError(f"--reinit: unknown table(s) {unknown}; tables: {known}")
    wanted = set(tables)
    for shard in table_shards(model):
        if shard.name in wanted:
            _reinit_shard(shard, seed, epoch)
            if not shard.fused:
                _reset_dense_state(optimizer, shard.name)


class TableReinit(TrainPart):
    """Re-initialises the tables a :class:`ReinitSchedule` names before each epoch (a training-loop part).

    Args:
        model: the ``DistributedModelParallel`` model.
        optimizer: its optimizer (for data-parallel tables' dense optimizer state).
        schedule: which tables before which epochs (e.g. ``ReinitSchedule.parse("tables@each", 3)``).
        seed: the run's seed (of the new values).
        tables: the tables the schedule's ``tables`` group covers (default: every table of ``model``).
        log: where to say what was re-initialised (default: nowhere).

    Example::

        reinit = TableReinit(dmp, optimizer, ReinitSchedule.parse("tables@each", 3), seed=0, log=print)
        reinit.before_epoch(1)     # every table, with its optimizer state zeroed
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: Any,
        schedule: ReinitSchedule,
        seed: int = 0,
        tables: Optional[Sequence[str]] = None,
        log: Callable[[str], None] = lambda _: None,
    ) -> None:
        check_sharded(model, "TableReinit")
        self.model, self.optimizer, self.schedule, self.seed, self.log = model, optimizer, schedule, seed, log
        self.tables: List[str] = list(table_names(model) if tables is None else tables)
        schedule.check_tables(self.tables)

    def before_epoch(self, epoch: int) -> None:
        due = self.schedule.tables_at(epoch, self.tables)
        if due:
            reinit_tables(self.model, self.optimizer, due, self.seed, epoch)
            self.log(f"re-initialised {due} before epoch {epoch + 1} (optimizer state zeroed)")
