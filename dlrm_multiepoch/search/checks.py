"""What a search checks before it launches anything: a search is what its flags define.

- **Its own record** (``search.json``): a rerun gives the same ``--epochs``, ``--eta``,
  ``--rung_fraction``, ``--candidates`` and app flags after ``--``, or is refused naming
  the flag (:func:`check_record_flags`); and as many ranks (``-j``: also each branch's
  own record, :func:`~dlrm_multiepoch.sweep.checks.check_ranks`).
- **Each run folder's own record**, through the sweep's check
  (:func:`~dlrm_multiepoch.sweep.manifest.check_experiment`): every branch keeps its flags,
  ``--epochs`` and the data flags included, whatever ``search.json`` says or lost; only what
  the search sets per launch (where it pauses, what it keeps, the checkpoint it starts from)
  may differ.
- **Lineage**: a branch started from its parent's checkpoint; it is never ranked against
  the children of a parent trained again since (:func:`check_lineage`: the parent's folder
  is gone, or its evaluation at the fork is not the one the branch started from), nor when it
  trained on other data than its parent.
- The sweep's checks of the data path, the validation split, the data every branch trained on
  (still what its paths hold) and the scheduler's request.

Every refusal is a ``ValueError`` naming the flag, file or folder and what to do.

Example::

    check_search(experiment_dir, tree, seeds, budget, common, settings, loaded.record, options, runner)
"""

import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from dlrm_multiepoch.config_section import VARIES_PER_LAUNCH
from dlrm_multiepoch.data.identity import IDENTITY, identity_changes
from dlrm_multiepoch.launch_options import LOCAL, LaunchOptions
from dlrm_multiepoch.run_files import read_summary, search_record_path
from dlrm_multiepoch.search.candidates import Candidate
from dlrm_multiepoch.search.branches import SearchError, run_name
from dlrm_multiepoch.search.settings import SearchSettings
from dlrm_multiepoch.sweep import checks
from dlrm_multiepoch.sweep.manifest import PLACE_FLAGS, check_experiment, flag_changes
from dlrm_multiepoch.sweep.plan import SweepPlan, build_plan
from dlrm_multiepoch.train.config import flags_with

if TYPE_CHECKING:
    from torchx.runner import Runner

# Flags the search sets per launch of a branch: where it pauses, what it keeps, the checkpoint it starts from.
LAUNCH_FLAGS = flags_with(VARIES_PER_LAUNCH)
_NEW_FOLDER = "search this configuration in a new experiment folder"


def search_plan(
    experiment_dir: str, tree: Sequence[Candidate], seeds: Sequence[int], budget: int, common: Sequence[str],
    check_paths: bool = False,
) -> SweepPlan:  # fmt: skip
    """Every branch of every seed as the sweep's run of the same candidate (what defines it, without launch flags)."""
    return build_plan(experiment_dir, [c.as_strategy() for c in tree], seeds, budget, common, check_paths=check_paths)


def check_search(
    experiment_dir: str,
    tree: Sequence[Candidate],
    seeds: Sequence[int],
    budget: int,
    common: Sequence[str],
    settings: SearchSettings,
    record: Mapping[str, Any],
    options: LaunchOptions,
    runner: "Runner",
) -> None:
    """Every check before the first launch (see the module docstring); ValueError names what is wrong."""
    from dlrm_multiepoch.sweep.launch import SweepLauncher

    check_record_flags(experiment_dir, record, tree, budget, common, settings)
    local = options.scheduler == LOCAL and not options.dryrun
    plan = search_plan(experiment_dir, tree, seeds, budget, common, check_paths=local)
    if local:  # this machine's paths: a missing --data_path is named now, not by every branch
        checks.check_data_path(plan)
    checks.check_validation_split(plan)
    check_experiment(plan, ignore=(*PLACE_FLAGS, *LAUNCH_FLAGS), instead=_NEW_FOLDER)
    checks.check_ranks(plan, options.j, record.get("j"), search_record_path(experiment_dir), _NEW_FOLDER)
    checks.check_same_data(plan, "search it in a new experiment folder")
    for seed in seeds:
        for c in tree:
            check_lineage(experiment_dir, c, seed)
    checks.check_request(runner, SweepLauncher(plan, options, runner=runner))


def check_record_flags(
    experiment_dir: str,
    record: Mapping[str, Any],
    tree: Sequence[Candidate],
    budget: int,
    common: Sequence[str],
    settings: SearchSettings,
) -> None:
    """Refuse a rerun whose flags differ from those ``search.json`` recorded (its intact fields), naming the flag."""
    path = search_record_path(experiment_dir)
    own = {
        "budget": ("--epochs", budget), "eta": ("--eta", settings.eta),
        "rung_fraction": ("--rung_fraction", settings.rung_fraction),
        "candidates": ("--candidates", [c.name for c in tree]),
    }  # fmt: skip
    for key, (flag, now) in own.items():
        if key in record and record[key] != now:
            before, after = (",".join(v) if isinstance(v, list) else f"{v:g}" for v in (record[key], now))
            why = " (a schedule is laid out over the whole budget: a branch never continues under another one)"
            raise ValueError(
                f"{path} records a search with {flag} {before}, this one has {after}"
                f"{why if flag == '--epochs' else ''}: its branches and decisions are that search's. Rerun it with "
                f"{flag} {before}, or {_NEW_FOLDER}"
            )
    changes = flag_changes(record["common_flags"], common) if "common_flags" in record else []
    if changes:
        raise ValueError(
            f"{path} records a search whose branches were trained with other flags after --: {'; '.join(changes)}. "
            f"Give the same flags, or {_NEW_FOLDER}"
        )


def check_lineage(experiment_dir: str, c: Candidate, seed: int) -> None:
    """Refuse a branch whose parent was trained again since it started from the parent's checkpoint.

    Raises:
        SearchError: the parent's folder is gone, or its evaluation at the step the branch started from is not
            the one the branch copied then (another parent: other data, another seed of the world), naming both.
    """
    if c.parent is None:
        return
    child = os.path.join(experiment_dir, run_name(c.name, seed))
    parent = os.path.join(experiment_dir, run_name(c.parent, seed))
    started = _summary(child).get("started_from")
    if not isinstance(started, dict) or not isinstance(started.get("step"), int):
        return  # not started yet (or its record is repaired by its next launch)
    if not os.path.isdir(parent):
        raise SearchError(
            f"branch {child} started from {parent}'s checkpoint after step {started['step']}, but {parent} is gone: "
            f"the parent would be trained again and {run_name(c.name, seed)} would not be its branch. Put "
            f"{run_name(c.parent, seed)} back, or move {run_name(c.name, seed)} aside too (both are then trained again)"
        )
    child_summary, parent_summary = _summary(child), _summary(parent)
    mine, theirs = _at_step(child_summary, started["step"]), _at_step(parent_summary, started["step"])
    if theirs is None and not parent_summary:
        return  # the parent's record is unreadable: repaired from its checkpoint by its next launch
    if mine != theirs:
        raise SearchError(
            f"branch {child} started from {parent} at step {started['step']}, but {parent}'s evaluation there is not "
            f"the one the branch started from: the parent was trained again since (other data or flags?). Move "
            f"{run_name(c.name, seed)} aside (it is then trained again from the new {run_name(c.parent, seed)}), or "
            f"{_NEW_FOLDER}"
        )
    ours, theirs = child_summary.get(IDENTITY), parent_summary.get(IDENTITY)
    changes = identity_changes(theirs, ours) if isinstance(ours, Mapping) and isinstance(theirs, Mapping) else []
    if changes:  # a cluster's data, changed between the parent's launch and the branch's: the trainer fine-tuned
        raise SearchError(
            f"branch {child} trained on other data than its parent {parent}: {'; '.join(changes)}. Its curve does not "
            f"continue its parent's: the data changed under the search; {_NEW_FOLDER}"
        )


def _summary(run_dir: str) -> Mapping[str, Any]:
    try:
        return read_summary(run_dir)
    except ValueError:
        return {}


def _at_step(summary: Mapping[str, Any], step: int) -> Any:
    evaluations = summary.get("evaluations")
    if not isinstance(evaluations, list):
        return None
    found = [e for e in evaluations if isinstance(e, dict) and e.get("step") == step]
    return found[-1] if found else None
