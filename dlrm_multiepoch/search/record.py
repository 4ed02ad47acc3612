"""What a search knows about its branches, read from their run folders (``search.json``: :mod:`.record_file`).

A branch's run folder is ``<experiment>/<candidate>-s<seed>`` (the sweep's layout, so
``dlrm-multiepoch compare`` reads a search folder too). Its ``summary.json`` holds every
evaluation (its parent's up to the fork included) and, for ``auto``, ``best``; its
``checkpoints/step_N`` are the deployable models. ``search.json`` records, per seed,
every branch (parent, fork, flags, validation curve, trained steps, launches, whether
it was kept or cut and why), every rung's cuts, the checkpoint to deploy, and the cost
against a sweep of the same candidates.

Example::

    curve, facts = read_branch("runs/search/delayed-s0", "auc", {"like": 1.0, "love": 1.0})
"""

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from dlrm_multiepoch.auto.objective import undefined_tasks
from dlrm_multiepoch.names import TEST, VAL
from dlrm_multiepoch.run_files import (
    best_checkpoint_name,
    checkpoint_name,
    checkpoint_problem,
    checkpoints_dir,
    read_summary,
    run_folder_name,
    summary_finished,
    summary_path,
)
from dlrm_multiepoch.search.candidates import Candidate
from dlrm_multiepoch.search.pruning import Curve, choose, objective
from dlrm_multiepoch.search.record_file import field_text


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
        launches: per launch that trained it, ``{"to_epoch": E, "wall_s": S, "started_at": T}`` (``wall_s``
            None while it runs; a launch of an invocation killed with it: estimated from its files, ``"estimated"``).
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
    launches: List[Dict[str, Any]] = field(default_factory=list)

    @staticmethod
    def of(c: Candidate) -> "BranchRecord":
        return BranchRecord(c.name, c.parent, c.fork, list(c.flags), c.epochs)


class SearchError(ValueError):
    """Something the search found in its folder or its runs that stops it; one line naming the file or field."""


def run_name(candidate: str, seed: int) -> str:
    """The run folder name of a branch (the sweep's ``<strategy>-s<seed>``)."""
    return run_folder_name(candidate, seed)


def read_branch(
    run_dir: str, metric: str, weights: Mapping[str, float], rungs: Sequence[float] = ()
) -> Tuple[Curve, Dict[str, Any]]:
    """A branch's validation curve and facts from its ``summary.json`` (empty when it has none yet, or when it
    cannot be read: ``facts["unreadable"]``, and the branch's next launch rewrites it from its checkpoint).

    Args:
        rungs: the search's fractional rungs: an evaluation within half a step of one (its
            ``--stop_at_epoch`` pause, at step ``round(rung * steps per epoch)``) counts there;
            other mid-epoch evaluations (auto's, ``--eval_every_n_steps``) are not in the curve.

    Returns:
        ``(curve, facts)``: facts hold ``test_auc`` (epoch -> task -> AUC), ``undefined`` (point -> the tasks
        whose undefined metric leaves the objective undefined there), ``steps``
        (epoch -> step), ``start_step`` (its fork step, 0 for a root), ``last_step`` (of its
        last evaluation), ``finished`` (the run recorded its end), ``best`` (``auto``'s restored best, with its metrics).

    Raises:
        SearchError: a ``summary.json`` that is JSON but not as the training app writes it, naming the field.
    """
    try:
        summary = read_summary(run_dir)
    except ValueError:
        summary = {"unreadable": True}
    curve = Curve()
    facts: Dict[str, Any] = {"test_auc": {}, "steps": {}, "start_step": 0, "finished": summary_finished(summary)}
    facts["unreadable"], facts["undefined"] = "unreadable" in summary, {}
    evaluations = [_evaluation(e, i, run_dir) for i, e in enumerate(_field(summary, "evaluations", list, run_dir, []))]
    for i, (_, _, e) in enumerate(evaluations):
        _check_metrics(e, f"evaluations.{i}", run_dir)
    facts["last_step"] = max((step for _, step, _ in evaluations), default=0)
    for epoch, step, e in evaluations:
        point = _point(epoch, step, rungs)
        if point is None or VAL not in e:
            continue
        curve.values[point] = objective(e[VAL], metric, weights)
        facts["undefined"][point] = undefined_tasks(e[VAL], metric, weights)
        if not float(point).is_integer():
            continue  # a rung inside an epoch is judged, not deployed
        facts["steps"][int(point)] = step
        facts["test_auc"][int(point)] = _aucs(e)
    started = _field(summary, "started_from", dict, run_dir, None)
    if started:
        facts["start_step"] = _evaluation({"epoch": 0, **started}, "started_from", run_dir, "started_from")[1]
    best = _field(summary, "best", dict, run_dir, None)
    if best and VAL in best:
        epoch, step, _ = _evaluation(best, "best", run_dir, "best")
        _check_metrics(best, "best", run_dir)
        curve.best = (epoch, objective(best[VAL], metric, weights))
        facts["best"] = {"step": step, "epoch": epoch, "test_auc": _aucs(best)}
    return curve, facts


def _field(summary: Mapping[str, Any], name: str, kind: type, run_dir: str, default: Any) -> Any:
    value = summary.get(name, default)
    if value is not default and not isinstance(value, kind):
        raise SearchError(f"{summary_path(run_dir)}: {name} is not a {kind.__name__} (damaged); move the file aside: "
                          "the branch's next launch rewrites it from its newest checkpoint")  # fmt: skip
    return value


def _evaluation(e: Any, i: Any, run_dir: str, where: str = "evaluations") -> Tuple[float, int, Dict[str, Any]]:
    """``(epoch, step, entry)`` of one recorded evaluation, or SearchError naming the damaged field."""
    epoch, step = (e.get("epoch"), e.get("step")) if isinstance(e, dict) else (None, None)
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (epoch, step))
    if not numbers or not math.isfinite(epoch) or epoch < 0 or step < 0 or step != int(step):  # type: ignore[operator]
        field_name = f"evaluations.{i}" if where == "evaluations" else where
        raise SearchError(
            f"{summary_path(run_dir)}: {field_name} has no epoch and step (damaged); move the file aside: the "
            "branch's next launch rewrites it from its newest checkpoint"
        )
    return float(epoch), int(step), e  # type: ignore[arg-type]


# Where the evaluator's metrics lie (the others: any finite number).
_RANGES = {"auc": (0.0, 1.0), "positive_rate": (0.0, 1.0), "logloss": (0.0, math.inf), "ne": (0.0, math.inf),
           "cal_ne": (0.0, math.inf), "rows": (0.0, math.inf), "auc_error_bound": (0.0, math.inf)}  # fmt: skip


def _check_metrics(e: Mapping[str, Any], where: str, run_dir: str) -> None:
    """SearchError naming the field when an evaluation's validation or test metrics are not as the app writes
    them: per task, metric -> a finite number in its range, or null (undefined). Never read as undefined nor
    ranked: a value the app did not write would silently change what the search ranks and deploys."""
    for split in (VAL, TEST):
        if split not in e:
            continue
        per_task, found = e[split], None
        if not isinstance(per_task, dict) or not per_task:
            found = (f"{where}.{split}", per_task, "an object of each task's metrics")
        for task, metrics in per_task.items() if found is None else ():
            if not isinstance(metrics, dict):
                found = (f"{where}.{split}.{task}", metrics, "an object of metrics")
                break
            bad = next((k for k, v in metrics.items() if v is not None and not _in_range(k, v)), None)
            if bad is not None:
                low, high = _RANGES.get(bad, (-math.inf, math.inf))
                within = f" from {low:g}" + (f" to {high:g}" if math.isfinite(high) else "") if math.isfinite(low) else ""
                found = (f"{where}.{split}.{task}.{bad}", metrics[bad], f"a number{within}, or null where undefined")
                break
        if found is not None:
            field_name, value, expected = found
            raise SearchError(
                f"{summary_path(run_dir)}: {field_name} is {field_text(value)}, expected {expected} (damaged); move the "
                "file aside: the branch's next launch rewrites it from its newest checkpoint"
            )


def _in_range(metric: str, value: Any) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return False
    low, high = _RANGES.get(metric, (-math.inf, math.inf))
    return low <= value <= high


def _aucs(e: Mapping[str, Any]) -> Dict[str, Optional[float]]:
    test = e.get(TEST)
    if not isinstance(test, dict):
        return {}
    return {task: m.get("auc") if isinstance(m, dict) else None for task, m in test.items()}


def _point(epoch: float, step: int, rungs: Sequence[float]) -> Optional[float]:
    """The whole epoch or rung an evaluation stands for (None: another mid-epoch evaluation)."""
    if epoch.is_integer():
        return int(epoch)
    if step <= 0:
        return None
    half_step = 0.5 * epoch / step  # half a step, in epochs
    return next((r for r in rungs if abs(epoch - r) <= half_step + 1e-9), None)


def json_number(value: float) -> Optional[float]:
    """A float for strict JSON: NaN (an undefined metric) becomes null."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def branch_dict(b: BranchRecord) -> Dict[str, Any]:
    """A branch record as JSON (undefined objectives as null)."""
    out = asdict(b)
    out["curve"] = {k: json_number(v) for k, v in b.curve.items()}
    return out


def format_curve(curve: Mapping[str, Optional[float]]) -> str:
    """``1: 0.7412  2: 0.7398`` for the console."""
    return "  ".join(f"{e}: {'n/a' if v is None else f'{v:.4f}'}" for e, v in curve.items()) or "(not trained)"


def deploy_choice(
    experiment_dir: str, tree: Sequence[Candidate], seed: int, curves: Mapping[str, Curve], metric: str,
    weights: Mapping[str, float], sign: float, cache_dir: Optional[str] = None,
) -> Tuple[Optional[Dict[str, Any]], List[Dict[str, Any]]]:  # fmt: skip
    """The checkpoint to deploy: the best validation objective (:func:`~.pruning.choose`) whose checkpoint
    verifies (every file of its save's size and sha256, :func:`~dlrm_multiepoch.run_files.checkpoint_problem`).

    A better deployable whose checkpoint is gone or damaged is passed over, with the reason, and the
    next is taken: the search and ``compare`` apply this one function to the run folders, so they name the
    same deploy, and never another without saying why.

    Returns:
        ``(deploy, passed_over)``: the deploy (``branch``, ``epoch``, ``checkpoint`` folder: a whole-epoch
        ``step_N`` or ``auto``'s ``best_step_N``, ``metric``, ``val_metric``: the metric as measured, the
        console's and the curves' figure, the objective being ``sign * val_metric``; ``test_auc``,
        ``passed_over``) or None when none verifies; each passed-over deployable (``branch``, ``epoch``,
        ``checkpoint``, ``problem``: one line naming the file).
    """
    passed: List[Dict[str, Any]] = []
    while True:
        choice = choose(tree, curves, {(p["branch"], p["epoch"]) for p in passed})
        if choice is None:
            return None, passed
        run_dir = os.path.join(experiment_dir, run_name(choice.branch, seed))
        _, facts = read_branch(run_dir, metric, weights)
        if "best" in facts:  # the adaptive schedule ends on its best-validation weights
            name, test = best_checkpoint_name(facts["best"]["step"]), facts["best"]["test_auc"]
        else:
            name, test = checkpoint_name(facts["steps"][int(choice.epoch)]), facts["test_auc"][int(choice.epoch)]
        path = os.path.join(checkpoints_dir(run_dir), name)
        problem = checkpoint_problem(path, cache_dir)
        if problem is not None:
            passed.append({"branch": choice.branch, "epoch": choice.epoch, "checkpoint": path, "problem": problem})
            continue
        return {
            "branch": choice.branch, "epoch": choice.epoch, "checkpoint": path, "metric": metric,
            "val_metric": json_number(sign * choice.objective), "test_auc": test, "passed_over": passed,
        }, passed  # fmt: skip


def passed_over_line(passed: Mapping[str, Any], run_dir: str) -> str:
    """The console's line for a deployable passed over: which, why, and how to train it again."""
    return (
        f"not deployed: {passed['branch']} after epoch {passed['epoch']:g} ({passed['problem']}); the next best is "
        f"taken. Move {run_dir} aside and rerun the same command to train that branch again"
    )
