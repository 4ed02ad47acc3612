"""Schedule search (``dlrm-multiepoch search``): the candidate tree, the pruning rule, the launches, the record."""

from dlrm_multiepoch.search.candidates import Candidate, candidate_tree, select
from dlrm_multiepoch.search.pruning import Choice, Curve, can_cut, choose, objective, prune_rung

__all__ = ["Candidate", "Choice", "Curve", "can_cut", "candidate_tree", "choose", "objective", "prune_rung", "select"]
