"""A schedule search's folder as ``compare`` shows it: what each candidate deploys, and what the search deployed.

The search decides on one validation objective (``--auto_metric`` over the tasks with
``--auto_task_weights``) among what each candidate deploys as a preset: ``joint`` at its
best validation epoch, ``auto`` its restored best weights, any other schedule its last
epoch (a branch cut before its end deploys nothing). This view applies the search's own
functions (:func:`~dlrm_multiepoch.search.record.deploy_choice`: the best deployable whose
checkpoint verifies, each better one whose checkpoint is gone or damaged passed over and
named; the run folders read by :func:`~dlrm_multiepoch.search.record.read_branch`) to the
run folders, so its winner is what the search deployed, seed by seed; ``search.json`` adds
which rung cut which branch and why. Torch-free.

Example::

    view = search_view("runs/search")
    view.deployed        # {0: ("auto", 2.76, 0.8774), ...}
"""

import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from dlrm_multiepoch.data.fetch import default_cache_dir
from dlrm_multiepoch.metrics import METRICS
from dlrm_multiepoch.report.stats import Stat, stat_of
from dlrm_multiepoch.run_files import manifest_path, read_manifest, read_summary, search_record_path, summary_path
from dlrm_multiepoch.search.candidates import Candidate, candidate_tree, select
from dlrm_multiepoch.search.pruning import Curve, choose, rung_points
from dlrm_multiepoch.search.record import deploy_choice, read_branch, run_name
from dlrm_multiepoch.search.record_file import read_record
from dlrm_multiepoch.sweep.strategies import flag_value


@dataclass
class SearchRow:
    """One candidate over the seeds: where it ended and what it deploys.

    Args:
        candidate: its name.
        status: per seed, ``deployed``, ``finished``, ``cut at R`` or ``not trained``.
        epochs: per seed, the epoch of the model it deploys (None: nothing to deploy).
        val: the validation metric (as measured) of those models, over the seeds that have one.
        test_auc: per task, their test AUC (reported, never used to decide).
    """

    candidate: str
    status: Dict[int, str] = field(default_factory=dict)
    epochs: Dict[int, Optional[float]] = field(default_factory=dict)
    val: Optional[Stat] = None
    test_auc: Dict[str, Optional[Stat]] = field(default_factory=dict)


@dataclass
class SearchView:
    """The search's candidates, and per seed what it deployed (``(branch, epoch, validation metric)``) or why not;
    ``cut``: each run folder the search cut (``<candidate>-s<seed>``) -> ``(rung, reason)``; ``passed_over``: per
    seed, better deployables whose checkpoint is gone or damaged (:func:`~dlrm_multiepoch.search.record.deploy_choice`)."""

    metric: str
    rows: List[SearchRow]
    deployed: Dict[int, Tuple[str, float, float]]
    undecided: Dict[int, str]
    seeds: List[int]
    cut: Dict[str, Tuple[float, str]]
    damage: Optional[str] = None
    passed_over: Dict[int, List[Dict[str, Any]]] = field(default_factory=dict)
    readable: bool = True  # False: search.json is too damaged to know the search (no candidates, budget, rungs)


def search_view(experiment_dir: str) -> Optional[SearchView]:
    """The view of a search folder; None when ``experiment_dir`` is not a search's; a view that is not
    ``readable`` (``damage`` says why) when its ``search.json`` is missing or too damaged to tell the search's
    candidates and rungs.

    Raises:
        ValueError: a branch's ``summary.json`` that is not as the training app writes it, naming the field.
    """
    path = search_record_path(experiment_dir)
    if not os.path.isfile(path):
        launches = _branch_launches(experiment_dir)
        if launches is None:
            return None
        missing = f"{path} is missing, and {launches} records a search's branch launches (--stop_at_epoch)"
        return SearchView("", [], {}, {}, [], {}, missing, readable=False)
    loaded = read_record(experiment_dir)
    record = loaded.record
    unreadable = SearchView("", [], {}, {}, [], {}, loaded.damage, readable=False)
    if not {"budget", "metric", "task_weights", "rung_fraction", "candidates"} <= set(record):
        return unreadable
    try:
        tree = select(candidate_tree(record["budget"]), list(record["candidates"]))
    except ValueError as e:  # candidates of another version of the search, or values no search has
        unreadable.damage = unreadable.damage or f"{search_record_path(experiment_dir)}: {e}"
        return unreadable
    seeds = sorted(int(s) for s in record["seeds"])
    rows = {c.name: SearchRow(c.name) for c in tree}
    vals: Dict[str, List[float]] = {c.name: [] for c in tree}
    tests: Dict[str, Dict[str, List[Optional[float]]]] = {c.name: {} for c in tree}
    deployed, undecided, cut, passed = {}, {}, {}, {}
    cache = flag_value(tuple(record["common_flags"]), "cache_dir") if "common_flags" in record else None
    cache = cache or default_cache_dir()  # where checkpoint digests are remembered
    rungs = rung_points(tree, record["rung_fraction"])
    sign = METRICS[record["metric"]].sign if record["metric"] in METRICS else 1.0
    for seed in seeds:
        entry = record["seeds"][str(seed)]
        curves, points = _curves(experiment_dir, tree, seed, record, rungs)
        recorded = entry["deploy"]
        choice, passed[seed] = None, []
        if recorded is not None:  # the search's own choice: the best deployable whose checkpoint verifies
            metric, weights = record["metric"], record["task_weights"]
            choice, passed[seed] = deploy_choice(experiment_dir, tree, seed, curves, metric, weights, sign, cache)
        same = choice is not None and (choice["branch"], choice["epoch"]) == (recorded["branch"], recorded["epoch"])
        if recorded is not None and not same and not passed[seed]:  # no checkpoint failed: a branch's record moved
            now = f"{choice['branch']} after epoch {choice['epoch']:g}" if choice is not None else "no deployable model"
            undecided[seed] = (
                f"search.json records deploying {recorded['branch']} after epoch {recorded['epoch']:g}, but its run "
                f"folders now give {now} (a branch's record changed or is gone since): rerun the search to decide again"
            )
            choice = None
        if choice is not None:
            deployed[seed] = (choice["branch"], choice["epoch"], choice["val_metric"])
        elif seed not in undecided:
            undecided[seed] = entry.get("no_decision") or "the search has not decided yet (interrupted?)"
            if passed[seed]:  # the search deployed one; every deployable checkpoint has been damaged since
                undecided[seed] = "no deployable checkpoint verifies any more (damaged since the search decided?)"
        for c in tree:
            row, branch = rows[c.name], entry["branches"].get(c.name, {})
            point = points.get(c.name)
            status = branch.get("status", "live")
            if status == "cut":
                row.status[seed] = f"cut at {branch.get('cut_at', 0):g}"
                cut[run_name(c.name, seed)] = (float(branch.get("cut_at", 0)), branch.get("reason", ""))
            else:
                row.status[seed] = {"finished": "finished", "live": "not trained to its end"}.get(status, status)
            if choice is not None and choice["branch"] == c.name:
                row.status[seed] = "deployed"
            if any(p["branch"] == c.name for p in passed[seed]):
                row.status[seed] += ", its checkpoint fails verification"
            row.epochs[seed] = point[0] if point else None
            if point:
                vals[c.name].append(sign * point[1])
                for task, auc in point[2].items():
                    tests[c.name].setdefault(task, []).append(auc)
    for c in tree:
        rows[c.name].val = stat_of(vals[c.name]) if vals[c.name] else None
        rows[c.name].test_auc = {t: stat_of(aucs) for t, aucs in tests[c.name].items()}
    return SearchView(record["metric"], list(rows.values()), deployed, undecided, seeds, cut, loaded.damage, passed)


def _branch_launches(experiment_dir: str) -> Optional[str]:
    """Which record says ``experiment_dir`` holds a search's branch launches (each pauses at a rung:
    ``--stop_at_epoch``): ``sweep.json``'s strategies, else a run folder's ``summary.json``; None: none does."""
    try:
        strategies = read_manifest(experiment_dir).get("strategies")
    except ValueError:
        strategies = None
    flags = [s.get("flags") for s in strategies.values() if isinstance(s, dict)] if isinstance(strategies, dict) else []
    if any(isinstance(f, list) and "--stop_at_epoch" in f for f in flags):
        return manifest_path(experiment_dir)
    for name in sorted(os.listdir(experiment_dir)):
        try:
            config = read_summary(os.path.join(experiment_dir, name)).get("config")
        except (OSError, ValueError):
            continue
        if isinstance(config, dict) and config.get("stop_at_epoch"):
            return summary_path(os.path.join(experiment_dir, name))
    return None


def _curves(
    experiment_dir: str, tree: List[Candidate], seed: int, record: Dict, rungs: List[float]
) -> Tuple[Dict[str, Curve], Dict[str, Tuple[float, float, Dict[str, Optional[float]]]]]:
    """Each branch's curve, and its deployable: ``(epoch, objective, test AUC per task)`` (absent: none)."""
    curves: Dict[str, Curve] = {}
    points: Dict[str, Tuple[float, float, Dict[str, Optional[float]]]] = {}
    for c in tree:
        run_dir = os.path.join(experiment_dir, run_name(c.name, seed))
        curve, facts = read_branch(run_dir, record["metric"], record["task_weights"], rungs)
        curves[c.name] = curve
        best = choose([c], {c.name: curve})
        if best is None:
            continue
        test = facts["best"]["test_auc"] if c.adaptive and "best" in facts else facts["test_auc"].get(int(best.epoch), {})
        if not math.isnan(best.objective):
            points[c.name] = (best.epoch, best.objective, test)
    return curves, points
