"""Schedule search (``dlrm-multiepoch search``): the candidate tree, the pruning rule, the launches, the record."""

from dlrm_multiepoch.search.candidates import Candidate, candidate_tree, select
from dlrm_multiepoch.search.pruning import (
    Choice,
    Curve,
    can_cut,
    choose,
    compared_at,
    objective,
    prune_rung,
    rung_points,
)

__all__ = [
    "Candidate", "Choice", "Curve", "can_cut", "candidate_tree", "choose", "compared_at", "objective", "prune_rung",
    "rung_points", "select",
]  # fmt: skip
