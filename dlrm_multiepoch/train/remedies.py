"""The table remedies of a run, built from its config: table LR schedule, FALR,
re-initialisation, gradient accumulation and id dropout (see :mod:`dlrm_multiepoch.optim`).

The trainer holds one :class:`Remedies`; it asks it for the optimizer the pipeline
drives, the batches of an epoch, what to do before an epoch and around each step, and
the parts to checkpoint.

Example::

    base_lrs = table_base_lrs(cfg, data)
    apply_embedding_optimizer(model, cfg.optim.embedding_optimizer, cfg.optim.base_table_lr(), base_lrs)
    dmp = shard_model(model, env, static_graph=cfg.optim.grad_accum_steps == 1)
    remedies = Remedies.build(cfg, data, dmp, optimizer, steps_per_epoch, env.rank, base_lrs)
"""

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional

from torch import nn
from torch.distributed.checkpoint.stateful import Stateful

from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.data.id_dropout import IdDropout
from dlrm_multiepoch.optim.accumulation import GradientAccumulation
from dlrm_multiepoch.optim.falr import FrequencyAdaptiveLR, falr_memory_fraction
from dlrm_multiepoch.optim.lr import TableLRScheduler
from dlrm_multiepoch.optim.reinit import ReinitSchedule, reinit_tables
from dlrm_multiepoch.train.config import TrainConfig


def table_base_lrs(cfg: TrainConfig, data: InteractionData) -> Dict[str, float]:
    """Each table's base LR (``--embedding_learning_rate`` or ``--embedding_lr_scale``,
    overridden by ``--table_lr``); an override of an unknown table is an error."""
    names = [t.name for t in data.tables]
    values = cfg.optim.table_lr_values
    values.check_tables(names)
    return {t: values.get(t) for t in names}


@dataclass
class Remedies:
    """What the run does to its tables beyond the freeze schedule.

    Args:
        table_lr: sets the fused tables' LR before every step.
        falr: per-row LR from lookup counts, or None.
        accumulation: gradient accumulation over micro-batches, or None (N = 1).
        id_dropout: train-time id dropout to the unknown row, or None.
        reinit: which tables are re-initialised before which epochs.
        seed: the run's seed (of re-initialised values).
    """

    table_lr: TableLRScheduler
    falr: Optional[FrequencyAdaptiveLR]
    accumulation: Optional[GradientAccumulation]
    id_dropout: Optional[IdDropout]
    reinit: ReinitSchedule
    seed: int

    @staticmethod
    def build(
        cfg: TrainConfig,
        data: InteractionData,
        model: nn.Module,
        optimizer: Any,
        steps_per_epoch: int,
        rank: int,
        base_lrs: Dict[str, float],
    ) -> "Remedies":
        names = [t.name for t in data.tables]
        reinit = cfg.optim.reinit_schedule
        reinit.check_tables(names)
        o = cfg.optim
        accumulation = (
            GradientAccumulation(model, optimizer, o.grad_accum_steps, o.grad_accum_lr_rule) if o.grad_accum_steps > 1 else None
        )
        factor = accumulation.lr_factor if accumulation is not None else 1.0
        table_lr = TableLRScheduler(model, o.lr_schedule, steps_per_epoch, cfg.epochs, base_lrs=base_lrs, factor=factor)
        falr_config = o.falr_config
        falr = FrequencyAdaptiveLR(model, falr_config, o.falr_table_list) if falr_config is not None else None
        rates = cfg.remedies.id_dropout_values
        rates.check_tables(names)
        dropout = IdDropout.for_tables(data.tables, {t: rates.get(t) for t in names}, cfg.seed, rank)
        return Remedies(table_lr, falr, accumulation, dropout if dropout else None, reinit, cfg.seed)

    def pipeline_optimizer(self, optimizer: Any) -> Any:
        """The optimizer the train pipeline calls ``zero_grad()``/``step()`` on."""
        return self.accumulation.optimizer if self.accumulation is not None else optimizer

    def checkpoint_parts(self) -> Dict[str, Stateful]:
        """Named ``Stateful`` parts saved in the run's checkpoints."""
        parts: Dict[str, Stateful] = {"table_lr": self.table_lr}
        if self.falr is not None:
            parts["falr"] = self.falr
        if self.accumulation is not None:
            parts["accumulation"] = self.accumulation
        return parts

    def before_epoch(self, epoch: int, model: nn.Module, optimizer: Any, tables: List[str]) -> List[str]:
        """Re-initialise the tables ``--reinit`` names for this epoch; returns them."""
        due = self.reinit.tables_at(epoch, tables)
        if due:
            reinit_tables(model, optimizer, due, self.seed, epoch)
        return due

    def batches(self, batches: Iterator[Batch], epoch: int, start: int = 0) -> Iterator[Batch]:
        """The epoch's training batches, from batch ``start`` of it (a mid-epoch resume)."""
        return self.id_dropout.apply(batches, epoch, start) if self.id_dropout is not None else batches

    def step(self, step: int, last_of_epoch: bool) -> ContextManager:
        """Wrap training step ``step``: its table LR, and its accumulation window."""
        self.table_lr.set_step(step)
        if self.accumulation is None:
            return contextlib.nullcontext()
        return self.accumulation.micro_batch(last_of_epoch=last_of_epoch)

    def scalars(self) -> Dict[str, float]:
        return {f"lr/{table}": lr for table, lr in self.table_lr.lrs().items()}

    def describe(self, model: nn.Module, log: Callable[[str], None], record: Callable[[str, Any], None]) -> None:
        log(f"table LR: {self.table_lr.schedule}; at step 0: " + ", ".join(f"{t} {lr:.4g}" for t, lr in self.table_lr.lrs().items()))
        if self.falr is not None:
            fraction = falr_memory_fraction(self.falr, model)
            log(
                f"FALR {self.falr.config} on {self.falr.tables}: {self.falr.memory_bytes():,} counter bytes on this "
                f"rank ({fraction:.1%} of the local shards of those tables)"
            )
            record("falr_memory", {"bytes_rank0": self.falr.memory_bytes(), "fraction_rank0": fraction})
        if self.accumulation is not None:
            log(f"gradient accumulation: {self.accumulation.steps} micro-batches per dense step, table LR x{self.accumulation.lr_factor:g}")
