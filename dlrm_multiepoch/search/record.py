"""What a search knows about its branches, read from their run folders, and its record ``search.json``.

A branch's run folder is ``<experiment>/<candidate>-s<seed>`` (the sweep's layout, so
``dlrm-multiepoch compare`` reads a search folder too). Its ``summary.json`` holds every
evaluation (its parent's up to the fork included) and, for ``auto``, ``best``; its
``checkpoints/step_N`` are the deployable models. ``search.json`` records, per seed,
every branch (parent, fork, flags, validation curve, trained steps, launches, whether
it was kept or cut and why), every rung's cuts, the checkpoint to deploy, and the cost
against a sweep of the same candidates.

Example::

    curve, evals = read_branch("runs/search/delayed-s0", "auc", {"like": 1.0, "love": 1.0})
    write_record("runs/search", record)
"""

import json
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from dlrm_multiepoch.names import TEST, VAL
from dlrm_multiepoch.run_files import (
    best_checkpoint_name,
    checkpoint_name,
    checkpoints_dir,
    read_search_record,
    read_summary,
    run_folder_name,
    search_record_path,
    summary_finished,
)
from dlrm_multiepoch.search.candidates import Candidate
from dlrm_multiepoch.search.pruning import Choice, Curve, objective


@dataclass
class BranchRecord:
    """One branch of one seed's search, as ``search.json`` keeps it.

    Args:
        name: the candidate; run folder ``<name>-s<seed>``.
        parent, fork: the candidate and epoch it starts from (None, 0: from scratch).
        flags: its schedule flags.
        epochs: its ``--epochs``.
        status: ``live`` (may go on), ``finished`` (trained to its end or stopped itself), ``cut``.
        reason: why it was cut, or kept.
        cut_at: the rung (epochs) of the cut.
        curve: validation metric (``--auto_metric``, as measured) after each whole epoch and rung (its prefix's included).
        test_auc: test AUC per task after each whole epoch (reported, never used to decide).
        trained_steps: optimizer steps it trained itself (not its prefix).
        launches: ``{"to_epoch": E, "wall_s": S}`` per launch that trained it.
    """

    name: str
    parent: Optional[str]
    fork: int
    flags: List[str]
    epochs: int
    status: str = "live"
    reason: str = ""
    cut_at: Optional[float] = None
    curve: Dict[str, float] = field(default_factory=dict)
    test_auc: Dict[str, Dict[str, Optional[float]]] = field(default_factory=dict)
    trained_steps: int = 0
    launches: List[Dict[str, float]] = field(default_factory=list)

    @staticmethod
    def of(c: Candidate) -> "BranchRecord":
        return BranchRecord(c.name, c.parent, c.fork, list(c.flags), c.epochs)


def run_name(candidate: str, seed: int) -> str:
    """The run folder name of a branch (the sweep's ``<strategy>-s<seed>``)."""
    return run_folder_name(candidate, seed)


def read_branch(
    run_dir: str, metric: str, weights: Mapping[str, float], rungs: Sequence[float] = ()
) -> Tuple[Curve, Dict[str, Any]]:
    """A branch's validation curve and facts from its ``summary.json`` (empty when it has none yet).

    Args:
        rungs: the search's fractional rungs: an evaluation within half a step of one (its
            ``--stop_at_epoch`` pause, at step ``round(rung * steps per epoch)``) counts there;
            other mid-epoch evaluations (auto's, ``--eval_every_n_steps``) are not in the curve.

    Returns:
        ``(curve, facts)``: facts hold ``test_auc`` (epoch -> task -> AUC), ``steps``
        (epoch -> step), ``start_step`` (its fork step, 0 for a root), ``last_step`` (of its
        last evaluation), ``finished`` (the run recorded its end), ``best`` (``auto``'s restored best, with its metrics).
    """
    summary = read_summary(run_dir)
    curve = Curve()
    facts: Dict[str, Any] = {"test_auc": {}, "steps": {}, "start_step": 0, "finished": summary_finished(summary)}
    facts["last_step"] = max((int(e["step"]) for e in summary.get("evaluations", [])), default=0)
    for e in summary.get("evaluations", []):
        point = _point(float(e["epoch"]), int(e["step"]), rungs)
        if point is None or VAL not in e:
            continue
        curve.values[point] = objective(e[VAL], metric, weights)
        if not float(point).is_integer():
            continue  # a rung inside an epoch is judged, not deployed
        epoch = int(point)
        facts["steps"][epoch] = int(e["step"])
        facts["test_auc"][epoch] = {task: m.get("auc") for task, m in e.get(TEST, {}).items()}
    started = summary.get("started_from")
    if started:
        facts["start_step"] = int(started["step"])
    best = summary.get("best")
    if best and VAL in best:
        curve.best = (float(best["epoch"]), objective(best[VAL], metric, weights))
        test = {task: m.get("auc") for task, m in best.get(TEST, {}).items()}
        facts["best"] = {"step": best["step"], "epoch": best["epoch"], "test_auc": test}
    return curve, facts


def _point(epoch: float, step: int, rungs: Sequence[float]) -> Optional[float]:
    """The whole epoch or rung an evaluation stands for (None: another mid-epoch evaluation)."""
    if epoch.is_integer():
        return int(epoch)
    half_step = 0.5 * epoch / step  # half a step, in epochs
    return next((r for r in rungs if abs(epoch - r) <= half_step + 1e-9), None)


def json_number(value: float) -> Optional[float]:
    """A float for strict JSON: NaN (an undefined metric) becomes null."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def write_record(experiment_dir: str, record: Mapping[str, Any]) -> str:
    """Write ``search.json`` atomically; returns its path."""
    os.makedirs(experiment_dir, exist_ok=True)
    path = search_record_path(experiment_dir)
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, indent=2, allow_nan=False)
    os.replace(path + ".tmp", path)
    return path


def read_record(experiment_dir: str) -> Dict[str, Any]:
    """``search.json`` of an experiment folder (empty when there is none)."""
    return read_search_record(experiment_dir)


def branch_dict(b: BranchRecord) -> Dict[str, Any]:
    """A branch record as JSON (undefined objectives as null)."""
    out = asdict(b)
    out["curve"] = {k: json_number(v) for k, v in b.curve.items()}
    return out


def format_curve(curve: Mapping[str, Optional[float]]) -> str:
    """``1: 0.7412  2: 0.7398`` for the console."""
    return "  ".join(f"{e}: {'n/a' if v is None else f'{v:.4f}'}" for e, v in curve.items()) or "(not trained)"


def deployable(run_dir: str, choice: Choice, metric: str, weights: Mapping[str, float]) -> Dict[str, Any]:
    """The checkpoint folder of ``choice`` (a whole-epoch ``step_N``, or ``auto``'s ``best_step_N``) and its figures.

    Raises:
        FileNotFoundError: the checkpoint is gone (pruned or deleted), naming it.
    """
    _, facts = read_branch(run_dir, metric, weights)
    if "best" in facts:  # the adaptive schedule ends on its best-validation weights
        name, test = best_checkpoint_name(facts["best"]["step"]), facts["best"]["test_auc"]
    else:
        name, test = checkpoint_name(facts["steps"][int(choice.epoch)]), facts["test_auc"][int(choice.epoch)]
    path = os.path.join(checkpoints_dir(run_dir), name)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"the checkpoint to deploy, {path}, is missing (pruned or deleted?)")
    return {
        "branch": choice.branch, "epoch": choice.epoch, "checkpoint": path,
        "val_objective": json_number(choice.objective), "test_auc": test,
    }  # fmt: skip
