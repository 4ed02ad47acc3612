"""Read an experiment's runs: per-epoch metrics from TensorBoard event files, cost from ``summary.json``.

A run folder is what the training app writes under ``--tensorboard_dir``: event files
(scalars ``eval/epoch`` and ``<split>/<task>/<metric>`` at each evaluation, and
``train/samples_per_sec``) and ``summary.json`` (config, wall time). Runs are found
through the sweep's manifest (``sweep.json``: strategy, seed, planned epochs), or, in
a folder of runs without one, as the subfolders holding event files (strategy = the
folder name without its ``-s<seed>`` suffix). A run that cannot be used is returned
as a :class:`RunProblem` naming it, and the rest are still read.

Example::

    runs, problems = read_experiment("runs/bx")
    runs[0].curve("test", "like", "auc")      # {1: 0.7408, 2: 0.7234, ...}
"""

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from dlrm_multiepoch.sweep.plan import MANIFEST, SUMMARY, read_json, read_manifest

EPOCH_TAG = "eval/epoch"
THROUGHPUT_TAG = "train/samples_per_sec"
BEST_PREFIX = "best"  # best/<split>/<task>/<metric>: the restored best-validation model (auto schedule)
_SEED_SUFFIX = re.compile(r"^(?P<strategy>.+)-s(?P<seed>-?\d+)$")
_EVENTS = "tfevents"


class RunError(ValueError):
    """A run folder that cannot be compared; the message says why."""


@dataclass
class RunRecord:
    """One run's per-epoch evaluations and cost.

    Args:
        name: run folder name.
        path: run folder.
        strategy: its strategy (the name runs are grouped by).
        seed: its seed, if known.
        epochs_planned: epochs it was launched for, if known.
        window: for update-window runs, the epoch the tables start training.
        evals: tag (``<split>/<task>/<metric>``) -> {whole epoch: value}, from the event files.
        wall_time_s: training wall time from ``summary.json`` (None if absent).
        samples_per_s: median of the logged train throughput.
        finished: whether ``summary.json`` records the end of training (None: no summary).
        deployed: metrics of the model the run ends holding when that is not its last
            epoch's (the automatic schedule restores its best-validation weights):
            ``<split>/<task>/<metric>`` -> value, from the ``best/...`` scalars.
        deployed_epoch: the (fractional) epoch those weights come from.
        config: the run's training config from ``summary.json`` by flag name (sections merged).
    """

    name: str
    path: str
    strategy: str
    seed: Optional[int]
    epochs_planned: Optional[int]
    window: Optional[float]
    evals: Dict[str, Dict[int, float]] = field(default_factory=dict)
    wall_time_s: Optional[float] = None
    samples_per_s: Optional[float] = None
    finished: Optional[bool] = None
    deployed: Dict[str, float] = field(default_factory=dict)
    deployed_epoch: Optional[float] = None
    config: Dict[str, Any] = field(default_factory=dict)

    def curve(self, split: str, task: str, metric: str) -> Dict[int, float]:
        return self.evals.get(f"{split}/{task}/{metric}", {})

    @property
    def tasks(self) -> List[str]:
        return sorted({tag.split("/")[1] for tag in self.evals if tag.startswith("test/")})

    @property
    def epochs_done(self) -> int:
        return max((max(c) for c in self.evals.values() if c), default=0)


@dataclass(frozen=True)
class RunProblem:
    """A run left out of the comparison, by name, with the reason."""

    name: str
    path: str
    reason: str


def read_scalars(run_dir: str) -> Dict[str, Dict[int, float]]:
    """Every scalar of a run folder's event files: tag -> {step: value} (the last value per step wins)."""
    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def read_run(
    run_dir: str,
    name: Optional[str] = None,
    strategy: Optional[str] = None,
    seed: Optional[int] = None,
    epochs_planned: Optional[int] = None,
    window: Optional[float] = None,
) -> RunRecord:
    """Read one run folder; only whole-epoch evaluations are kept.

    Raises:
        RunError: missing folder, no event files, no evaluations, or an unreadable ``summary.json``.
    """
    name = name or os.path.basename(os.path.normpath(run_dir))
    if not os.path.isdir(run_dir):
        raise RunError("missing: no run folder")
    if not any(_EVENTS in f for f in os.listdir(run_dir)):
        raise RunError("no TensorBoard event files")
    summary = _read_summary(run_dir)
    scalars = read_scalars(run_dir)
    if EPOCH_TAG not in scalars:
        raise RunError(f"no evaluations in its event files (no {EPOCH_TAG!r} scalar): corrupt, or stopped before epoch 1")
    epochs = scalars[EPOCH_TAG]
    evals: Dict[str, Dict[int, float]] = {}
    deployed: Dict[str, float] = {}
    for tag, values in scalars.items():
        parts = tag.split("/")
        if len(parts) == 4 and parts[0] == BEST_PREFIX:
            deployed["/".join(parts[1:])] = values[max(values)]
        if len(parts) != 3 or tag == EPOCH_TAG:
            continue
        whole = {int(epochs[s]): v for s, v in values.items() if s in epochs and float(epochs[s]).is_integer()}
        if whole:
            evals[tag] = dict(sorted(whole.items()))
    if not any(tag.startswith("test/") for tag in evals):
        raise RunError("no whole-epoch test evaluation in its event files")
    if strategy is None:
        match = _SEED_SUFFIX.match(name)
        strategy = match["strategy"] if match else name
        if seed is None and match:
            seed = int(match["seed"])
    if seed is None:
        seed = summary.get("config", {}).get("seed")
    if epochs_planned is None:
        epochs_planned = summary.get("config", {}).get("epochs")
    throughput = list(scalars.get(THROUGHPUT_TAG, {}).values())
    return RunRecord(
        name=name,
        path=run_dir,
        strategy=strategy,
        seed=seed,
        epochs_planned=epochs_planned,
        window=window,
        evals=evals,
        wall_time_s=summary.get("wall_time_s"),
        samples_per_s=float(np.median(throughput)) if throughput else None,
        finished=("wall_time_s" in summary) if summary else None,
        deployed=deployed,
        deployed_epoch=summary.get("best", {}).get("epoch") if deployed else None,
        config=_by_flag(summary.get("config", {})),
    )


def read_experiment(experiment_dir: str) -> Tuple[List[RunRecord], List[RunProblem]]:
    """Every run of an experiment folder, and the runs that could not be used (missing, partial, corrupt)."""
    if not os.path.isdir(experiment_dir):
        raise FileNotFoundError(f"experiment folder {experiment_dir!r} does not exist")
    entries = _manifest_runs(experiment_dir)
    if entries is None:
        entries = [
            {"name": d}
            for d in sorted(os.listdir(experiment_dir))
            if os.path.isdir(os.path.join(experiment_dir, d))
            and any(_EVENTS in f for f in os.listdir(os.path.join(experiment_dir, d)))
        ]
    runs, problems = [], []
    # Reading many event files logs nothing a user needs.
    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    for entry in entries:
        path = os.path.join(experiment_dir, entry["name"])
        try:
            run = read_run(
                path, entry["name"], entry.get("strategy"), entry.get("seed"), entry.get("epochs"), entry.get("window")
            )
        except RunError as e:
            problems.append(RunProblem(entry["name"], path, str(e)))
            continue
        partial = _partial(run)
        if partial:
            problems.append(RunProblem(run.name, path, partial))
            continue
        runs.append(run)
    return runs, problems


def _partial(run: RunRecord) -> Optional[str]:
    if run.finished and run.deployed:  # the auto schedule may end a run early, on its restored best weights
        return None
    if run.epochs_planned is not None and run.epochs_done < run.epochs_planned:
        return f"partial: {run.epochs_done} of {run.epochs_planned} epochs evaluated (interrupted or still running)"
    if run.finished is False:
        return "partial: its summary.json does not record the end of training (interrupted or still running)"
    return None


def _manifest_runs(experiment_dir: str) -> Optional[List[Dict[str, Any]]]:
    if not os.path.isfile(os.path.join(experiment_dir, MANIFEST)):
        return None
    manifest = read_manifest(experiment_dir)
    if not isinstance(manifest.get("runs"), dict):
        raise ValueError(f"{os.path.join(experiment_dir, MANIFEST)} is not a sweep manifest (no 'runs'); fix or remove it")
    return list(manifest["runs"].values())


def _read_summary(run_dir: str) -> Dict[str, Any]:
    try:
        return read_json(os.path.join(run_dir, SUMMARY))
    except ValueError as e:
        raise RunError(f"corrupt summary.json: {e}") from None


def _by_flag(config: Dict[str, Any]) -> Dict[str, Any]:
    """``{"epochs": 3, "optim": {"learning_rate": ..}}`` -> ``{"epochs": 3, "learning_rate": ..}`` (flag names are unique)."""
    flags = {k: v for k, v in config.items() if not isinstance(v, dict)}
    for section in (v for v in config.values() if isinstance(v, dict)):
        flags.update(section)
    return flags
