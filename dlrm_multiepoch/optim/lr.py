"""The table learning rate as its own schedule, per table, on FBGEMM's fused optimizers.

The "sparse optimizer" of Qiu et al. 2025 (arXiv 2505.05605) trains tables with their
own learning rate, about 50x the dense one. Here a table's LR at step ``s`` is::

    base(table) * schedule(s) * factor

- ``base``: ``--embedding_learning_rate``, or ``--embedding_lr_scale`` times the dense
  ``--learning_rate``, overridden per table by ``--table_lr t_user=0.02,...``. Tables
  with different base LRs get their own TBE (TorchRec groups tables by optimizer
  settings), so each fused kernel has one base LR.
- ``schedule``: linear warm-up from 0 over ``--table_lr_warmup`` (epochs ``0.5``, steps
  ``300step`` or percent of the run ``10%``), then ``constant``, ``linear`` or
  ``cosine`` decay to ``--table_lr_final`` times the peak at the end of the run.
- ``factor``: e.g. ``1/N`` under gradient accumulation (:mod:`.accumulation`).

The LR is written where the fused kernel reads it every step (see
:func:`~dlrm_multiepoch.optim.shards.set_kernel_learning_rate`). Data-parallel tables
are trained by the dense optimizer at the dense LR and are not covered.

Example::

    sched = TableLRScheduler(dmp, TableLRSchedule.parse("300step", "cosine", 0.1), steps_per_epoch=100, num_epochs=3)
    for step in range(300):
        sched.set_step(step)               # before the step's forward/backward
        pipeline.progress(batches)
    sched.lrs()                            # {table: LR}, logged per table
"""

import contextlib
from typing import Any, Callable, ContextManager, Dict, List, Mapping, Optional, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.stateful import Stateful

from dlrm_multiepoch.optim.options import TableLRSchedule
from dlrm_multiepoch.optim.shards import kernels, set_kernel_learning_rate
from dlrm_multiepoch.part import TrainPart, WindowLog
from dlrm_multiepoch.saved_state import check_count, check_state
from dlrm_multiepoch.tables import check_sharded

class TableLRScheduler(TrainPart):
    """Sets every fused table's LR to ``base * schedule(step) * factor`` before each step.

    A ``Stateful`` (``state_dict()`` holds the step), though the step is all it needs:
    :meth:`set_step` jumps anywhere, so a resumed run continues the schedule exactly.
    As a :class:`~dlrm_multiepoch.part.TrainPart` it sets each step's LR in
    ``step_context`` and logs ``lr/<table>`` every window.

    Args:
        model: a ``DistributedModelParallel`` model with fused table optimizers.
        schedule: the multiplier over the run (None: constant 1).
        steps_per_epoch: optimizer steps per epoch.
        num_epochs: epochs in the run.
        base_lrs: table -> base LR; tables left out keep the LR their kernel was built with.
        factor: constant extra multiplier (gradient-accumulation rescaling).

    Build it on every rank (as the model): it gathers the kernels' base LRs over the ranks
    once, so :meth:`lrs` lists every fused table, also one whose shards all live on other ranks.

    Example::

        sched = TableLRScheduler(dmp, None, 100, 3, base_lrs={"t_user": 0.02}, factor=0.25)
    """

    def __init__(
        self,
        model: nn.Module,
        schedule: Optional[TableLRSchedule],
        steps_per_epoch: int,
        num_epochs: int,
        base_lrs: Optional[Mapping[str, float]] = None,
        factor: float = 1.0,
    ) -> None:
        self.schedule = schedule or TableLRSchedule()
        self.steps_per_epoch = steps_per_epoch
        self.total_steps = steps_per_epoch * num_epochs
        self.warmup_steps = self.schedule.warmup_steps(steps_per_epoch, self.total_steps)  # validates it too
        self.factor = factor
        check_sharded(model, "TableLRScheduler")
        self._kernels: List[Any] = [k for k in kernels(model) if hasattr(k, "fused_optimizer")]
        given = dict(base_lrs or {})
        from_kernels: Dict[str, float] = {}
        self._kernel_base: List[float] = []
        for k in self._kernels:
            names = [t.name for t in k.config.embedding_tables]
            bases = {given[n] for n in names if n in given} or {float(k.fused_optimizer.param_groups[0]["lr"])}
            if len(bases) != 1:
                raise ValueError(
                    f"tables {names} share one fused kernel but have base LRs {sorted(bases)}; build the model with "
                    "apply_embedding_optimizer(..., table_lrs=...) so each LR gets its own kernel"
                )
            base = bases.pop()
            self._kernel_base.append(base)
            from_kernels.update({n: base for n in names if n not in given})
        self.base_lrs: Dict[str, float] = {**_on_every_rank(from_kernels), **given}
        self.step = 0
        self._applied: Optional[float] = None
        self.set_step(0)

    def multiplier(self, step: Optional[int] = None) -> float:
        step = self.step if step is None else step
        return self.schedule.multiplier(step, self.steps_per_epoch, self.total_steps, self.warmup_steps) * self.factor

    def set_step(self, step: int, force: bool = False) -> None:
        """Put the LR of step ``step`` (0-based) into every fused kernel (``force``: even if
        unchanged since the last call, e.g. after an optimizer ``load_state_dict``)."""
        self.step = step
        m = self.multiplier()
        if m == self._applied and not force:
            return  # a constant schedule writes once
        for kernel, base in zip(self._kernels, self._kernel_base):
            set_kernel_learning_rate(kernel, base * m)
        self._applied = m

    def lrs(self) -> Dict[str, float]:
        """Table -> LR in force now (every table of the model, wherever its shards live)."""
        m = self.multiplier()
        return {name: base * m for name, base in sorted(self.base_lrs.items())}

    def state_dict(self) -> Dict[str, Any]:
        # Tensors, not ints: DCP flattens dicts of plain values differently on load than on save.
        return {"step": torch.tensor(self.step)}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue at the saved step; StateMismatch when it has none, or not a count."""
        check_state("table LR schedule", state_dict, {"step": None})
        self.set_step(check_count("table LR schedule", "step", state_dict["step"]), force=True)

    # -- as a part of the training loop ---------------------------------------------

    def checkpoint_parts(self) -> Dict[str, Stateful]:
        return {"table_lr": self}

    def describe(self, log: Callable[[str], None], record: Callable[[str, Any], None]) -> None:
        log(f"table LR: {self.schedule}; at step 0: " + ", ".join(f"{t} {lr:.4g}" for t, lr in self.lrs().items()))

    def step_context(self, step: int, last_of_epoch: bool) -> ContextManager:
        self.set_step(step)
        return contextlib.nullcontext()

    def after_window(self, losses: Sequence[torch.Tensor], step: int, log: WindowLog) -> None:
        log.scalars({f"lr/{table}": lr for table, lr in self.lrs().items()}, step)


def _on_every_rank(base_lrs: Dict[str, float]) -> Dict[str, float]:
    """This rank's table -> base LR joined with every other rank's (a collective when a process group runs)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return dict(base_lrs)
    gathered: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, base_lrs)
    return {name: lr for part in gathered for name, lr in part.items()}
