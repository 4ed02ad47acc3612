"""How a search decides: the validation objective it ranks branches on, and when it compares and cuts them.

With the candidates, the budget, the seeds (the command's :class:`~dlrm_multiepoch.command_options.SearchOptions`)
and the app flags common to every branch, these define a search: a rerun into the same experiment
folder must give the same (:mod:`~dlrm_multiepoch.search.checks` refuses another, naming the flag),
so every decision follows from the run folders and these. Torch-free.

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
    """The objective and the halving rule of one search.

    Args:
        metric: the branches' ``--auto_metric``, a name of :data:`~dlrm_multiepoch.metrics.METRICS`.
        task_weights: the branches' ``--auto_task_weights`` (empty: every task weighs the same).
        eta, rung_fraction: the search's ``--eta`` and ``--rung_fraction`` (:class:`SearchOptions` says what each does).
    """

    metric: str
    task_weights: Dict[str, float]
    eta: int
    rung_fraction: float = SearchOptions.rung_fraction

    @property
    def sign(self) -> float:
        """+1 when a higher metric is better (AUC), -1 otherwise: the objective is ``sign * metric``."""
        return METRICS[self.metric].sign
