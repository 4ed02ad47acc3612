"""Mean ± std over seeds, and what counts as a defined metric.

A metric is undefined (None in ``summary.json``, NaN in event files) on an empty slice,
on labels of one class, or where a task is absent from a split. An undefined value
never enters a mean: a figure over seeds is defined only if every seed's value is.

Example::

    stat_of([0.74, 0.76])            # Stat(mean=0.75, std=0.0141..., n=2)
    stat_of([0.74, float("nan")])    # None: "n/a" in the table, never ranked
"""

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np


@dataclass(frozen=True)
class Stat:
    """Mean and sample standard deviation over seeds (std None with one seed)."""

    mean: float
    std: Optional[float]
    n: int

    @staticmethod
    def of(values: Sequence[float]) -> "Stat":
        a = np.asarray(values, dtype=np.float64)
        return Stat(float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else None, len(a))


def is_defined(value: Optional[float]) -> bool:
    """A finite number (not None, NaN or infinite)."""
    return value is not None and math.isfinite(value)


def stat_of(values: Sequence[Optional[float]]) -> Optional[Stat]:
    """:class:`Stat` of ``values``, or None when there are none or any is undefined."""
    if not values or not all(is_defined(v) for v in values):
        return None
    return Stat.of(values)  # type: ignore[arg-type]
