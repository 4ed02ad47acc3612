"""The remedies' flags in parsed form, torch-free: the config, the TorchX components and
the ``dlrm-multiepoch`` command import them without loading torch.

Example::

    FALRConfig("log", floor=0.05)
    TableLRSchedule.parse("5%", "cosine", 0.0).multiplier(step=10, steps_per_epoch=100, total_steps=300)
    ReinitSchedule.parse("tables@each", num_epochs=3).tables_at(1, ["t_user", "t_item"])
    check_accumulation(4, "1/N")
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

from dlrm_multiepoch.names import FALR_KINDS, TABLE_LR_DECAYS
from dlrm_multiepoch.schedule import Bound

if TYPE_CHECKING:  # tensors only in FALRConfig.multiplier's signature: this module loads without torch
    import torch


@dataclass(frozen=True)
class FALRConfig:
    """How a row's lookup count becomes its learning-rate multiplier.

    Args:
        kind: ``"log"`` or ``"power"`` (see :mod:`dlrm_multiepoch.optim.falr`).
        power: exponent of ``"power"``.
        floor: smallest multiplier (0 allows near-zero steps for rows seen once).
        ref: count that gets the full LR; ``None`` = the table's largest count so far,
            over all ranks (the paper's ``max_j count_j``).

    Example::

        FALRConfig("power", power=0.5, floor=0.1, ref=1000).multiplier(torch.tensor([1., 100.]), torch.tensor(1000.))
    """

    kind: str = "log"
    power: float = 0.5
    floor: float = 0.0
    ref: Optional[int] = None

    def __post_init__(self) -> None:
        if self.kind not in FALR_KINDS:
            raise ValueError(f"--falr must be one of {', '.join(FALR_KINDS)} (or empty to disable), got {self.kind!r}")
        if not 0.0 <= self.floor <= 1.0:
            raise ValueError(f"--falr_floor must be in [0, 1], got {self.floor}")
        if not (math.isfinite(self.power) and self.power > 0.0):
            raise ValueError(f"--falr_power must be a finite number > 0, got {self.power}")
        if self.ref is not None and self.ref < 1:
            raise ValueError(f"--falr_ref must be 'max' or a count >= 1, got {self.ref}")

    def multiplier(self, counts: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
        """``f(counts)`` as float32, for counts >= 1 and ``ref`` >= 1 (broadcast)."""
        c, r = counts.float(), ref.float()
        if self.kind == "log":
            m = c.log1p() / r.log1p()
        else:
            m = (c / r) ** self.power
        return m.clamp(min=self.floor, max=1.0)


def parse_falr_ref(text: str) -> Optional[int]:
    """``--falr_ref``: ``"max"`` -> None, else a positive integer count."""
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--falr_ref must be 'max' or a positive integer count, got {text!r}") from None
    if value < 1:
        raise ValueError(f"--falr_ref must be 'max' or a positive integer count, got {text!r}")
    return value


@dataclass(frozen=True)
class TableLRSchedule:
    """Warm-up then decay of the table LR, as a multiplier of the base LR.

    Args:
        warmup: warm-up length as a :class:`~dlrm_multiepoch.schedule.Bound` (epochs,
            steps or percent of the run); the LR rises linearly from ``1/W`` to 1.
        decay: ``constant``, ``linear`` or ``cosine`` after the warm-up.
        final: multiplier reached at the end of the run by ``linear``/``cosine``.

    Example::

        s = TableLRSchedule.parse("10%", "cosine", 0.0)
        [s.multiplier(step, steps_per_epoch=10, total_steps=20) for step in range(3)]  # [0.5, 1.0, 1.0]
    """

    warmup: Bound = Bound(Fraction(0))
    decay: str = "constant"
    final: float = 0.0

    @staticmethod
    def parse(warmup: str = "0", decay: str = "constant", final: float = 0.0) -> "TableLRSchedule":
        """From the flags; errors name the flag."""
        try:
            bound = Bound.parse(str(warmup))
        except ValueError as e:
            raise ValueError(f"--table_lr_warmup: {e}") from None
        if bound.from_end:
            raise ValueError(f"--table_lr_warmup must count from the start of the run, got {warmup!r}")
        if decay not in TABLE_LR_DECAYS:
            raise ValueError(f"--table_lr_decay must be one of {', '.join(TABLE_LR_DECAYS)}, got {decay!r}")
        if not 0.0 <= final <= 1.0:
            raise ValueError(f"--table_lr_final must be in [0, 1], got {final}")
        return TableLRSchedule(bound, decay, final)

    def warmup_steps(self, steps_per_epoch: int, total_steps: int) -> int:
        steps = math.ceil(self.warmup.to_step(steps_per_epoch, total_steps))
        if steps > total_steps:
            raise ValueError(
                f"--table_lr_warmup {self.warmup} is {steps} steps, longer than the run ({total_steps} steps)"
            )
        return steps

    def multiplier(self, step: int, steps_per_epoch: int, total_steps: int, warm: Optional[int] = None) -> float:
        """The multiplier in force during step ``step`` (0-based); ``warm``: the run's
        :meth:`warmup_steps`, when the caller has it (it is called every training step)."""
        warm = self.warmup_steps(steps_per_epoch, total_steps) if warm is None else warm
        if step < warm:
            return (step + 1) / warm
        if self.decay == "constant" or total_steps <= warm:
            return 1.0
        progress = min(1.0, (step - warm) / max(1, total_steps - warm))
        if self.decay == "linear":
            return 1.0 - (1.0 - self.final) * progress
        return self.final + (1.0 - self.final) * 0.5 * (1.0 + math.cos(math.pi * progress))

    def __str__(self) -> str:
        return f"warmup {self.warmup}, then {self.decay}" + (f" to {self.final:g}x" if self.decay != "constant" else "")


@dataclass(frozen=True)
class ReinitSchedule:
    """Which tables are re-initialised before which epochs (0-based epoch index >= 1).

    Args:
        events: ``(group, epochs)`` pairs; a group is ``"tables"`` or ``"table:NAME"``.

    Example::

        ReinitSchedule.parse("table:t_user@1,2", num_epochs=3).tables_at(1, ["t_user", "t_item"])   # ["t_user"]
    """

    events: Tuple[Tuple[str, Tuple[int, ...]], ...] = ()

    @staticmethod
    def parse(text: str, num_epochs: int) -> "ReinitSchedule":
        """Parse ``--reinit``; epochs must be whole boundaries inside the run (1..epochs-1)."""
        events: List[Tuple[str, Tuple[int, ...]]] = []
        for entry in (e.strip() for e in text.split(";")):
            if not entry:
                continue
            group, at, when = (x.strip() for x in entry.partition("@"))
            if not at or not when:
                raise ValueError(f"--reinit: entry {entry!r} must be GROUP@EPOCHS, e.g. tables@1,2 or table:t_user@each")
            if group != "tables" and not (group.startswith("table:") and group[len("table:") :]):
                raise ValueError(f"--reinit: group {group!r} in {entry!r} must be 'tables' or 'table:NAME'")
            if when == "each":
                epochs = tuple(range(1, num_epochs))
            else:
                if not re.fullmatch(r"\d+(,\d+)*", when.replace(" ", "")):
                    raise ValueError(f"--reinit: epochs {when!r} in {entry!r} must be 'each' or comma-separated integers")
                epochs = tuple(sorted({int(x) for x in when.replace(" ", "").split(",")}))
                bad = [e for e in epochs if not 1 <= e < num_epochs]
                if bad:
                    raise ValueError(
                        f"--reinit: {entry!r} re-initialises after epoch(s) {bad}, but with --epochs {num_epochs} the "
                        f"boundaries are 1..{num_epochs - 1} (k = after k epochs, before epoch k+1)"
                    )
            events.append((group, epochs))
        return ReinitSchedule(tuple(events))

    def check_tables(self, tables: Sequence[str]) -> None:
        for group, _ in self.events:
            if group.startswith("table:") and group[len("table:") :] not in tables:
                raise ValueError(f"--reinit: unknown table {group[len('table:'):]!r}; tables: {sorted(tables)}")

    def tables_at(self, epoch: int, tables: Sequence[str]) -> List[str]:
        """Tables to re-initialise before 0-based epoch ``epoch`` (i.e. after ``epoch`` epochs)."""
        out = set()
        for group, epochs in self.events:
            if epoch in epochs:
                out |= set(tables) if group == "tables" else {group[len("table:") :]}
        return sorted(out)

    def __bool__(self) -> bool:
        return bool(self.events)


ACCUMULATION_RULES: Dict[str, Callable[[int], float]] = {
    "1/N": lambda n: 1.0 / n,
    "none": lambda n: 1.0,
}


def check_accumulation(steps: int, rule: str) -> None:
    """Raise naming the flag for a bad ``--grad_accum_steps`` / ``--grad_accum_lr_rule``."""
    if steps < 1:
        raise ValueError(f"--grad_accum_steps must be >= 1, got {steps}")
    if rule not in ACCUMULATION_RULES:
        raise ValueError(f"--grad_accum_lr_rule must be one of {', '.join(ACCUMULATION_RULES)}, got {rule!r}")


