"""What one search is: its candidates, budget, seeds, the app flags of every branch and its decision settings.

A search is what these define: a rerun into the same experiment folder must give the same
(:mod:`~dlrm_multiepoch.search.checks` refuses another, naming the flag), so every
decision follows from the run folders and the settings. Torch-free.

Example::

    settings = SearchSettings("cal_ne", {}, eta=3, rung_fraction=0.3)
    settings.sign          # -1.0: a lower cal_ne is better
"""

from dataclasses import dataclass
from typing import Dict

from dlrm_multiepoch.command_options import SearchOptions
from dlrm_multiepoch.metrics import METRICS


@dataclass
class SearchSettings:
    """What a search decides on: the validation objective, the halving factor, where first judgements fall.

    Args:
        metric: validation metric (``cal_ne``, ``auc``, ``logloss``, ``ne``): the runs' ``--auto_metric``.
        task_weights: ``--auto_task_weights`` of the runs, e.g. ``{"like": 1.0}`` (empty: equal).
        eta: successive-halving factor: the top ``ceil(n / eta)`` judged branches go on.
        rung_fraction: a candidate is first judged this fraction of an epoch after its tables
            (and its own suffix) started (``--rung_fraction``; 1: after a whole epoch).
    """

    metric: str
    task_weights: Dict[str, float]
    eta: int
    rung_fraction: float = SearchOptions.rung_fraction

    @property
    def sign(self) -> float:
        """+1 when a higher metric is better (AUC), -1 otherwise: the objective is ``sign * metric``."""
        return METRICS[self.metric].sign
