"""The evaluation metrics in one table: each one's name, which way is better and how it is shown.

Torch-free, on the ground floor, so every floor reads the same table: evaluation computes
these (:mod:`dlrm_multiepoch.train.evaluate`), the logger writes them to TensorBoard
(``split/task/NAME``) and the console (:mod:`dlrm_multiepoch.train.metrics_logger`),
``compare`` reads, shows and ranks on them (:mod:`dlrm_multiepoch.report`, ``--metric``),
and the automatic schedule and the search decide on one (``--auto_metric``). A new metric
is one row here and its computation in ``train/evaluate.py``.

Example::

    METRICS["cal_ne"].sign                  # -1.0: lower is better
    METRICS["auc"].show(0.74123)            # '0.7412'
    check_metric("--metric", "cal_ne").label   # 'cal_ne'
"""

import math
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from dlrm_multiepoch.names import check_name


@dataclass(frozen=True)
class Metric:
    """One evaluation metric of a binary task.

    Args:
        name: how run records name it: ``summary.json``, TensorBoard tags (``test/like/NAME``), flags.
        sign: +1.0 when a higher value is better, -1.0 when a lower one is (an objective is ``sign * value``).
        label: how tables and prose name it.
        help: what it measures, in a few words (for ``--help``).
        digits: decimals shown.
    """

    name: str
    sign: float
    label: str
    help: str
    digits: int = 4

    def show(self, value: Optional[float]) -> str:
        """The value as tables and the console show it; ``n/a`` when undefined (None, NaN)."""
        return "n/a" if value is None or not math.isfinite(value) else f"{value:.{self.digits}f}"


METRICS: Dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("auc", 1.0, "AUC", "area under the ROC curve: how well the scores rank positives first"),
        Metric("logloss", -1.0, "logloss", "mean binary cross-entropy of the scores"),
        Metric("ne", -1.0, "NE", "normalised entropy: logloss over the entropy of the positive rate"),
        Metric(
            "cal_ne", -1.0, "cal_ne",
            "NE after refitting the scores' calibration on the split: blind to a drifting positive rate",
        ),  # fmt: skip
    )
}
#: Every metric's name, in the table's order (the console's and the run records').
METRIC_NAMES: Tuple[str, ...] = tuple(METRICS)


def check_metric(flag: str, name: str) -> Metric:
    """The metric ``name``; ``ValueError`` naming ``flag`` and the choices when there is none.

    Example::

        check_metric("--auto_metric", "cal_ne").sign    # -1.0
    """
    check_name(flag, name, METRIC_NAMES)
    return METRICS[name]
