"""One seed's entry of ``search.json`` and the console's account of it: its branches, rungs (:class:`Rung`), cost, decision.

The record of a seed is rewritten after every launch and rung (and when the search is
interrupted), so it always holds what was decided and what the launches cost, those of
killed invocations included (:func:`restore_launches`), and those of another search writing
into the same folder at the same time (:func:`merge_launches`).

Example::

    entry = SeedEntry(branches, previous_wall_s=12.0)
    record["seeds"]["0"] = seed_record(entry, cost(entry, steps_per_epoch=71, sweep_epochs=19))
    for line in summary_lines(entry, record["seeds"]["0"]["cost"], "cal_ne"):
        print(line)
"""

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from dlrm_multiepoch.search.pruning import shown_value
from dlrm_multiepoch.search.branches import BranchRecord, branch_dict, format_curve


@dataclass
class Rung:
    """One rung of a seed's search: where branches were compared, and what came of it.

    Args:
        epoch: where (whole epochs, or a fraction inside one).
        judged: the branches compared there.
        cuts: each branch cut there, with why.
        kept: the compared branches that went on.
        references: the compared branches ranked but not judged yet (their tables younger than the rung's cohort).
    """

    epoch: float
    judged: List[str]
    cuts: Dict[str, str] = field(default_factory=dict)
    kept: List[str] = field(default_factory=list)
    references: List[str] = field(default_factory=list)


@dataclass
class SeedEntry:
    """What one seed's search has found so far.

    Args:
        branches: every candidate's record, by name.
        rungs: each rung where branches were compared: who, the cuts and why, who went on.
        previous_wall_s: wall time of earlier invocations of this seed's search.
        started: ``time.perf_counter()`` when this invocation started it.
        deploy: the checkpoint to deploy, once decided.
        no_decision: why nothing can be deployed (an undefined validation objective), once known.
    """

    branches: Dict[str, BranchRecord]
    rungs: List[Rung] = field(default_factory=list)
    previous_wall_s: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    deploy: Optional[Dict[str, Any]] = None
    no_decision: Optional[str] = None


def restore_launches(earlier: Mapping[str, Any], run_dir: str) -> List[Dict[str, Any]]:
    """An earlier invocation's launches of a branch; one it was killed during (``wall_s`` null) gets the time
    from its start to the branch's newest file (marked ``estimated``)."""
    launches = [dict(entry) for entry in earlier.get("launches", [])]
    for entry in launches:
        if entry.get("wall_s") is None:
            started = entry.get("started_at")
            newest = _newest_mtime(run_dir)
            known = isinstance(started, (int, float)) and newest is not None
            entry["wall_s"] = round(max(newest - started, 0.0), 1) if known else 0.0  # type: ignore[operator]
            entry["estimated"] = True
    return launches


def _newest_mtime(folder: str) -> Optional[float]:
    newest = None
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                mtime = os.path.getmtime(os.path.join(root, name))
            except OSError:
                continue
            newest = mtime if newest is None else max(newest, mtime)
    return newest


def merge_launches(entry: SeedEntry, on_disk: Optional[Mapping[str, Any]]) -> None:
    """Add to ``entry`` the launches another search into the same folder recorded for this seed (``search.json``
    as on disk now): two writers' launches are both counted, never the last writer's alone. A launch is known
    by its start and target; a finished copy replaces one still running or estimated."""
    branches = on_disk.get("branches", {}) if isinstance(on_disk, Mapping) else {}
    for name, branch in branches.items():
        if name not in entry.branches or not isinstance(branch, Mapping):
            continue
        mine = entry.branches[name].launches
        index = {_launch_key(launch): i for i, launch in enumerate(mine)}
        for launch in branch.get("launches", []):
            i = index.get(_launch_key(launch))
            if i is None:
                mine.append(dict(launch))
            elif launch.get("wall_s") is not None and not launch.get("estimated") and (
                mine[i].get("wall_s") is None or mine[i].get("estimated")
            ):
                mine[i] = dict(launch)


def _launch_key(launch: Mapping[str, Any]) -> Tuple[Any, Any]:
    return launch.get("started_at"), launch.get("to_epoch")


def killed_wall_s(launches: List[Dict[str, Any]]) -> float:
    """The wall time of launches whose invocation was killed during them (estimated: not in its saved wall time)."""
    return sum(entry["wall_s"] for entry in launches if entry.get("estimated"))


def cost(entry: SeedEntry, steps_per_epoch: int, sweep_epochs: int) -> Dict[str, Any]:
    """Trained steps against a sweep of the same candidates, segments, launches (training jobs started),
    seconds before their first steps and wall time (every invocation's)."""
    segments = [launch for b in entry.branches.values() for launch in b.launches]
    wall = entry.previous_wall_s + time.perf_counter() - entry.started
    return {
        "trained_steps": sum(b.trained_steps for b in entry.branches.values()),
        "sweep_steps": sweep_epochs * steps_per_epoch, "steps_per_epoch": steps_per_epoch, "wall_s": round(wall, 1),
        "launch_wall_s": round(sum(launch["wall_s"] or 0.0 for launch in segments), 1), "segments": len(segments),
        "launches": sum(1 for launch in segments if launch.get("new_job", True)),
        "before_first_step_s": round(sum(launch.get("before_first_step_s") or 0.0 for launch in segments), 1),
    }  # fmt: skip


def seed_record(entry: SeedEntry, costs: Dict[str, Any]) -> Dict[str, Any]:
    """The seed's entry of ``search.json``."""
    record: Dict[str, Any] = {
        "branches": {n: branch_dict(b) for n, b in entry.branches.items()}, "rungs": [asdict(r) for r in entry.rungs],
        "deploy": entry.deploy, "cost": costs,
    }  # fmt: skip
    if entry.no_decision is not None:
        record["no_decision"] = entry.no_decision
    return record


def summary_lines(entry: SeedEntry, costs: Mapping[str, Any], metric: str, seed: int) -> List[str]:
    """The console's account of a finished seed: every branch, the cost, the decision."""
    lines = [f"search seed {seed}: every branch (validation {metric} per epoch and rung)"]
    for b in entry.branches.values():
        origin = f"from {b.parent}@{b.fork}" if b.parent else "from scratch"
        lines.append(f"  {b.name:<10} {origin:<14} {b.status:<8} {format_curve(b.curve)}  {b.reason}")
    share = costs["trained_steps"] / costs["sweep_steps"] if costs["sweep_steps"] else float("nan")
    lines.append(
        f"  cost: {costs['trained_steps']} trained steps ({share:.0%} of the {costs['sweep_steps']} a sweep of the same "
        f"candidates trains), {costs['segments']} segments in {costs['launches']} launch(es), "
        f"{costs['before_first_step_s']:.0f} s before their first steps, {costs['wall_s']:.0f} s in all"
    )
    deploy = entry.deploy
    if deploy is not None:
        test = " ".join(f"{t} {shown_value(a)}" for t, a in deploy["test_auc"].items())
        lines.append(
            f"  deploy: {deploy['checkpoint']} ({deploy['branch']} after epoch {deploy['epoch']:g}, validation "
            f"{metric} {shown_value(deploy['val_metric'])}; test AUC, reported only: {test})"
        )
    elif entry.no_decision is not None:
        lines.append(f"  no decision: {entry.no_decision}")
    return lines
