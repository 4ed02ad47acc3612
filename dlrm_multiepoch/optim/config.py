"""The optimizer section of the training config: the fused table optimizer, the dense
Adam, and the table remedies' flags (torch-free: the ``dlrm-multiepoch`` command
validates runs' flags without loading torch). ``validate()`` parses the remedies' text
flags once into the typed values the builders read (``table_lr_values``, ``lr_schedule``,
``falr_config``, ``falr_table_list``, ``reinit_schedule``)."""

import math
from dataclasses import dataclass
from typing import Optional, Tuple

from dlrm_multiepoch.config_section import (
    BRANCH_MAY_CHANGE,
    CHANGES_SHAPES,
    IGNORED_BY_PRETRAINING,
    RESERVED_BY_SEARCH,
    SWEEP_SEARCH_COMPONENT,
    TRAIN_COMPONENT,
    option,
    parsed,
)
from dlrm_multiepoch.names import EMBEDDING_OPTIMIZERS, check_name
from dlrm_multiepoch.optim.options import FALRConfig, ReinitSchedule, TableLRSchedule, check_accumulation, parse_falr_ref
from dlrm_multiepoch.table_values import TableValues


@dataclass
class OptimConfig:
    """Optimizers: fused in-backward for tables, Adam for dense weights; the table-LR remedies."""

    learning_rate: float = option(
        1e-3, "Adam learning rate of the dense weights",
        roles=(TRAIN_COMPONENT, SWEEP_SEARCH_COMPONENT),
    )
    embedding_optimizer: str = option(
        "rowwise_adagrad", "fused table optimizer: rowwise_adagrad, adagrad or sgd",
        roles=(CHANGES_SHAPES,),
    )
    embedding_learning_rate: float = option(
        0.05, "learning rate of the embedding tables",
        roles=(TRAIN_COMPONENT, SWEEP_SEARCH_COMPONENT),
    )
    embedding_lr_scale: float = option(
        0.0, "> 0: the table LR is this times --learning_rate (replaces --embedding_learning_rate)",
    )
    table_lr: str = option("", "per-table base LR overrides, e.g. 't_user=0.02,t_item=0.05'")
    table_lr_warmup: str = option(
        "0", "linear warm-up of the table LR: epochs (0.5), steps (300step) or percent of the run (10%%)",
        roles=(IGNORED_BY_PRETRAINING,),
    )
    table_lr_decay: str = option(
        "constant", "table LR after the warm-up: constant, linear or cosine (to the run's end)",
        roles=(IGNORED_BY_PRETRAINING,),
    )
    table_lr_final: float = option(
        0.0, "linear/cosine decay: final table LR as a fraction of the peak",
        roles=(IGNORED_BY_PRETRAINING,),
    )
    falr: str = option(
        "",
        "frequency-adaptive per-row table LR: lr * f(count), count = the row's lookups so far; "
        "'log' (log(1+c)/log(1+ref)), 'power' ((c/ref)^--falr_power) or empty (off)",
        roles=(IGNORED_BY_PRETRAINING,),
    )
    falr_power: float = option(0.5, "exponent of --falr power")
    falr_floor: float = option(0.0, "smallest FALR multiplier")
    falr_ref: str = option("max", "count with the full LR: 'max' (the table's largest count so far) or a number")
    falr_tables: str = option("", "comma-separated tables FALR applies to (empty: every fused table)")
    reinit: str = option(
        "",
        "re-initialise tables (seeded, optimizer state zeroed) before epochs: 'tables@each', "
        "'tables@1,2' (after 1 and 2 epochs), 'table:t_user@1; table:t_item@2'",
        roles=(RESERVED_BY_SEARCH, BRANCH_MAY_CHANGE, IGNORED_BY_PRETRAINING),
    )
    grad_accum_steps: int = option(
        1, "micro-batches per dense optimizer step (DDP all-reduces only at that step)",
        roles=(IGNORED_BY_PRETRAINING,),
    )
    grad_accum_lr_rule: str = option(
        "1/N", "fused table LR under accumulation: '1/N' (rescaled) or 'none'",
        roles=(IGNORED_BY_PRETRAINING,),
    )
    # Parsed by validate() from the flags above.
    table_lr_values: TableValues[float] = parsed()  # --table_lr over the base table LR
    lr_schedule: TableLRSchedule = parsed()  # --table_lr_warmup, --table_lr_decay, --table_lr_final
    falr_config: Optional[FALRConfig] = parsed()  # --falr and its knobs; None: off
    falr_table_list: Optional[Tuple[str, ...]] = parsed()  # --falr_tables; None: every fused table
    reinit_schedule: ReinitSchedule = parsed()  # --reinit against --epochs

    def validate(self, epochs: int) -> None:
        """Syntax and range checks of every optimizer flag, and the parsed values (tables are checked
        once the model exists).

        Args:
            epochs: the run's ``--epochs`` (``--reinit`` epochs must fall inside it).
        """
        for name in ("learning_rate", "embedding_learning_rate"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"--{name} must be a finite number > 0, got {value}")
        if not (math.isfinite(self.embedding_lr_scale) and self.embedding_lr_scale >= 0):
            raise ValueError(f"--embedding_lr_scale must be a finite number >= 0 (0: off), got {self.embedding_lr_scale}")
        check_name("--embedding_optimizer", self.embedding_optimizer, EMBEDDING_OPTIMIZERS)
        self.table_lr_values = TableValues.parse(
            self.table_lr, "--table_lr", float, default=self.base_table_lr(),
            check=lambda v: math.isfinite(v) and v >= 0, expected="must be a finite number >= 0",
        )  # fmt: skip
        self.lr_schedule = TableLRSchedule.parse(self.table_lr_warmup, self.table_lr_decay, self.table_lr_final)
        ref = parse_falr_ref(self.falr_ref)  # parsed with FALR off too: a typo fails now, not when it is turned on
        self.falr_config = FALRConfig(self.falr, power=self.falr_power, floor=self.falr_floor, ref=ref) if self.falr else None
        self.falr_table_list = tuple(t.strip() for t in self.falr_tables.split(",") if t.strip()) or None
        self.reinit_schedule = ReinitSchedule.parse(self.reinit, epochs)
        check_accumulation(self.grad_accum_steps, self.grad_accum_lr_rule)

    def base_table_lr(self) -> float:
        """The table LR before per-table overrides and schedules."""
        return self.embedding_lr_scale * self.learning_rate if self.embedding_lr_scale > 0 else self.embedding_learning_rate
