"""Read an experiment's runs: per-epoch metrics from TensorBoard event files, cost from ``summary.json``.

A run folder is what the training app writes under ``--tensorboard_dir``: event files
(scalars ``eval/epoch`` and ``<split>/<task>/<metric>`` at each evaluation, for the metrics
of :data:`~dlrm_multiepoch.metrics.METRICS`,
``best/<split>/<task>/<metric>`` for restored best-validation weights, and
``train/samples_per_sec``) and ``summary.json`` (config, every evaluation, wall time).
Runs are found through the sweep's manifest (``sweep.json``: strategy, seed, planned
epochs, the strategy's own flags), or, in a folder of runs without one, as the
subfolders holding event files (strategy = the folder name without its ``-s<seed>``
suffix). A run that cannot be used is returned as a :class:`RunProblem` naming it, and
the rest are still read; so is every other folder of the experiment that is not read.

Task names may hold any character (``a/b`` too): a tag is split by the split and task
names ``summary.json`` records, or, without a summary, by the known split and metric
names at its two ends.

Example::

    runs, problems = read_experiment("runs/bx")
    runs[0].curve("test", "like", "auc")      # {1: 0.7408, 2: 0.7234, ...}
"""

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from dlrm_multiepoch.command_faults import is_utf8, shown
from dlrm_multiepoch.metrics import METRIC_NAMES
from dlrm_multiepoch.report.recorded import checked_manifest, checked_summary
from dlrm_multiepoch.run_files import (
    MANIFEST_FILE,
    OWN_FOLDERS,
    has_event_files,
    manifest_path,
    parse_run_folder_name,
    summary_finished,
    whole_epoch_evaluations,
)
from dlrm_multiepoch.sweep.strategies import flag_names

EPOCH_TAG = "eval/epoch"
THROUGHPUT_TAG = "train/samples_per_sec"
BEST_PREFIX = "best"  # best/<split>/<task>/<metric>: the restored best-validation model (auto schedule)
# Evaluated splits, each possibly with a row slice: test, val, train_sample, test.unseen_user, ...
_SPLIT = re.compile(r"^(train_sample|val|test)(\.[^/]+)?$")

MetricKey = Tuple[str, str, str]  # (split, task, metric)


class RunError(ValueError):
    """A run folder that cannot be compared; the message says why."""


@dataclass
class RunRecord:
    """One run's per-epoch evaluations and cost.

    Args:
        name: run folder name.
        path: run folder.
        strategy: its strategy (the name runs are grouped by, with their configuration).
        seed: its seed, if known.
        epochs_planned: epochs it was launched for, if known.
        window: for update-window runs, the epoch the tables start training.
        evals: ``(split, task, metric)`` -> {whole epoch: value}, from the event files
            (NaN where the metric is undefined: an empty slice, one-class labels).
        wall_time_s: training wall time from ``summary.json`` (None if absent).
        samples_per_s: median of the logged train throughput.
        finished: whether ``summary.json`` records the end of training (None: no summary).
        deployed: metrics of restored best-validation weights, when the run ends holding
            them instead of its last epoch's model (the automatic schedule):
            ``(split, task, metric)`` -> value, from the ``best/...`` scalars.
        deployed_epoch: the (fractional) epoch those weights come from.
        config: the run's training config from ``summary.json`` by flag name (sections merged).
        logged_epochs: whole epochs with an evaluation in the event files.
        recorded_epochs: whole epochs ``summary.json`` records an evaluation of (None: no summary).
        recorded_metrics: the metrics ``summary.json`` records at whole epochs (the event files must hold each).
        restores_best: ``summary.json`` records restored best-validation weights (``best``).
        strategy_flags: names of the flags its strategy sets (from the manifest; None: unknown).
        shared_epochs: a branch's whole epochs up to the checkpoint it started from (``--start_from``): its
            parent's, read from its ``summary.json`` (its event files begin after them).
        data: the content of the data it trained on: each source file's sha256 (12 hex digits), from the data
            identity ``summary.json`` records ("" when unknown: an older run); runs of other data are never
            compared in one table.
    """

    name: str
    path: str
    strategy: str
    seed: Optional[int]
    epochs_planned: Optional[int]
    window: Optional[float]
    evals: Dict[MetricKey, Dict[int, float]] = field(default_factory=dict)
    wall_time_s: Optional[float] = None
    samples_per_s: Optional[float] = None
    finished: Optional[bool] = None
    deployed: Dict[MetricKey, float] = field(default_factory=dict)
    deployed_epoch: Optional[float] = None
    config: Dict[str, Any] = field(default_factory=dict)
    logged_epochs: List[int] = field(default_factory=list)
    recorded_epochs: Optional[List[int]] = None
    recorded_metrics: List[MetricKey] = field(default_factory=list)
    restores_best: bool = False
    strategy_flags: Optional[Tuple[str, ...]] = None
    shared_epochs: List[int] = field(default_factory=list)
    data: str = ""

    def curve(self, split: str, task: str, metric: str) -> Dict[int, float]:
        return self.evals.get((split, task, metric), {})

    def final(self, split: str, task: str, metric: str) -> Optional[float]:
        """The metric of the model the run deploys: its restored best-validation weights, else its last epoch's.

        None when the run did not evaluate it; NaN when it is undefined.
        """
        if self.deployed:
            return self.deployed.get((split, task, metric))
        return self.curve(split, task, metric).get(self.epochs_done)

    @property
    def tasks(self) -> List[str]:
        return sorted({task for _, task, _ in [*self.evals, *self.deployed]})

    @property
    def epochs_done(self) -> int:
        return max(self.logged_epochs, default=0)


@dataclass(frozen=True)
class RunProblem:
    """A run (or folder) left out of the comparison, by name, with the reason."""

    name: str
    path: str
    reason: str


def read_scalars(run_dir: str) -> Dict[str, Dict[int, float]]:
    """Every scalar of a run folder's event files: tag -> {step: value} (the last value per step wins)."""
    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def metric_key(tag: str, known: Optional[Dict[str, MetricKey]] = None) -> Optional[MetricKey]:
    """``"test/a/b/auc"`` -> ``("test", "a/b", "auc")``; None for a tag that is no evaluation metric.

    ``known`` (tag -> key, from the names ``summary.json`` records) decides when given;
    otherwise the split and the metric are the tag's first and last parts.
    """
    if known is not None:
        return known.get(tag)
    split, _, rest = tag.partition("/")
    task, _, metric = rest.rpartition("/")
    return (split, task, metric) if _SPLIT.match(split) and task and metric in METRIC_NAMES else None


def _metric_keys(evaluations: Sequence[Any]) -> Set[MetricKey]:
    """Every (split, task, metric) that evaluations as ``summary.json`` records them hold."""
    return {
        (split, task, metric)
        for entry in evaluations
        if isinstance(entry, dict)
        for split, per_task in entry.items()
        if isinstance(per_task, dict)
        for task, metrics in per_task.items()
        if isinstance(metrics, dict)
        for metric in metrics
        if metric in METRIC_NAMES
    }


def _known_tags(summary: Dict[str, Any]) -> Optional[Dict[str, MetricKey]]:
    """Tag -> key for every split and task of the evaluations ``summary.json`` records (None: none recorded)."""
    pairs = {(split, task) for split, task, _ in _metric_keys([*summary.get("evaluations", []), summary.get("best")])}
    if not pairs:
        return None
    return {f"{split}/{task}/{m}": (split, task, m) for split, task in pairs for m in METRIC_NAMES}


def read_run(
    run_dir: str,
    name: Optional[str] = None,
    strategy: Optional[str] = None,
    seed: Optional[int] = None,
    epochs_planned: Optional[int] = None,
    window: Optional[float] = None,
    strategy_flags: Optional[Sequence[str]] = None,
) -> RunRecord:
    """Read one run folder; only whole-epoch evaluations (and restored best-validation ones) are kept.

    Raises:
        RunError: missing folder, no event files, no evaluations, or an unreadable ``summary.json``.
    """
    name = name or shown(os.path.basename(os.path.normpath(run_dir)))
    if not os.path.isdir(run_dir):
        raise RunError("missing: no run folder")
    if not is_utf8(run_dir):
        raise RunError("its folder's name is not UTF-8: TensorBoard reads no event file there; rename the folder")
    if not has_event_files(run_dir):
        raise RunError("no TensorBoard event files")
    summary = _read_summary(run_dir)
    scalars = read_scalars(run_dir)
    if EPOCH_TAG not in scalars:
        raise RunError(f"no evaluations in its event files (no {EPOCH_TAG!r} scalar): corrupt, or stopped before any")
    epochs = {s: int(e) for s, e in scalars[EPOCH_TAG].items() if float(e).is_integer() and e > 0}
    known = _known_tags(summary)
    evals: Dict[MetricKey, Dict[int, float]] = {}
    deployed: Dict[MetricKey, float] = {}
    for tag, values in scalars.items():
        if tag.startswith(BEST_PREFIX + "/"):
            key = metric_key(tag[len(BEST_PREFIX) + 1 :], known)
            if key is not None:
                deployed[key] = values[max(values)]
            continue
        key = metric_key(tag, known)
        whole = {epochs[s]: v for s, v in values.items() if s in epochs} if key is not None else {}
        if whole:
            evals[key] = dict(sorted(whole.items()))  # type: ignore[index]
    shared = _shared_epochs(summary, evals)  # a branch's first epochs are its parent's
    if not evals and not deployed:
        raise RunError("no whole-epoch evaluation and no restored best-validation evaluation in its event files")
    if strategy is None:
        parsed = parse_run_folder_name(name)
        strategy = parsed[0] if parsed else name
        if seed is None and parsed:
            seed = parsed[1]
    config = _by_flag(summary.get("config", {}))
    throughput = list(scalars.get(THROUGHPUT_TAG, {}).values())
    whole_evaluations = whole_epoch_evaluations(summary)
    recorded = sorted({int(e["epoch"]) for e in whole_evaluations})
    return RunRecord(
        name=name,
        path=run_dir,
        strategy=strategy,
        seed=config.get("seed") if seed is None else seed,
        epochs_planned=config.get("epochs") if epochs_planned is None else epochs_planned,
        window=window,
        evals=evals,
        wall_time_s=summary.get("wall_time_s"),
        samples_per_s=float(np.median(throughput)) if throughput else None,
        finished=summary_finished(summary) if summary else None,
        deployed=deployed,
        deployed_epoch=(summary.get("best") or {}).get("epoch"),
        config=config,
        logged_epochs=sorted(set(epochs.values()) | set(shared)),
        recorded_epochs=recorded if summary else None,
        recorded_metrics=sorted(_metric_keys(whole_evaluations)),
        restores_best=bool(summary.get("best")),
        strategy_flags=tuple(strategy_flags) if strategy_flags is not None else None,
        shared_epochs=shared,
        data=_data_content(summary),
    )


def _data_content(summary: Dict[str, Any]) -> str:
    """Each source file's sha256 (12 hex digits, comma-separated) from the data identity the run recorded."""
    identity = summary.get("data_identity")
    options = identity.get("options") if isinstance(identity, dict) else None
    digests = options.get("source_sha256") if isinstance(options, dict) else None
    digests = [digests] if isinstance(digests, str) else digests
    return ",".join(str(d)[:12] for d in digests) if isinstance(digests, list) else ""


def _shared_epochs(summary: Dict[str, Any], evals: Dict[MetricKey, Dict[int, float]]) -> List[int]:
    """A branch's whole epochs up to its start (its parent's, which ``summary.json`` records and its event files
    do not): added to ``evals``; their numbers returned."""
    started = summary.get("started_from")
    step = started.get("step") if isinstance(started, dict) else None
    if not isinstance(step, int):
        return []
    shared = [e for e in whole_epoch_evaluations(summary) if isinstance(e.get("step"), int) and e["step"] <= step]
    for entry in shared:
        epoch = int(entry["epoch"])
        for split, task, metric in _metric_keys([entry]):
            value = entry[split][task][metric]
            number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("nan")
            evals.setdefault((split, task, metric), {})[epoch] = number
    for key in evals:
        evals[key] = dict(sorted(evals[key].items()))
    return sorted(int(e["epoch"]) for e in shared)


def read_experiment(experiment_dir: str) -> Tuple[List[RunRecord], List[RunProblem]]:
    """Every run of an experiment folder, and what could not be used (missing, partial, corrupt runs;
    folders that are not runs of it)."""
    if os.path.exists(experiment_dir) and not os.path.isdir(experiment_dir):
        raise ValueError(f"{shown(experiment_dir)} is a file, not an experiment folder (a folder of run folders)")
    if not os.path.isdir(experiment_dir):
        raise FileNotFoundError(f"experiment folder {shown(experiment_dir)!r} does not exist")
    if not is_utf8(experiment_dir):
        raise ValueError(
            f"{shown(experiment_dir)}: its name is not UTF-8, and TensorBoard reads no event file under such a path; "
            "rename it"
        )
    manifest = _manifest(experiment_dir)
    folders = sorted(
        d for d in os.listdir(experiment_dir) if os.path.isdir(os.path.join(experiment_dir, d)) and d not in OWN_FOLDERS
    )
    problems = []
    if manifest is None:
        # A folder's name as shown (bytes that are not UTF-8 as \xff), and the folder itself.
        entries = [{"name": shown(d), "folder": d} for d in folders if has_event_files(os.path.join(experiment_dir, d))]
        skipped, why = [d for d in folders if d not in {e["folder"] for e in entries}], "no TensorBoard event files"
    else:
        entries = list(manifest["runs"].values())
        skipped, why = [d for d in folders if d not in manifest["runs"]], f"not a run of {MANIFEST_FILE}"
    problems += [RunProblem(shown(d), os.path.join(experiment_dir, d), f"skipped: {why}") for d in skipped]
    runs = []
    # Reading many event files logs nothing a user needs.
    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    own_flags = (manifest or {}).get("strategies", {})
    for entry in entries:
        path = os.path.join(experiment_dir, entry.get("folder", entry["name"]))
        strategy = entry.get("strategy")
        flags = own_flags.get(strategy, {}).get("flags") if strategy in own_flags else None
        try:
            run = read_run(
                path, entry["name"], strategy, entry.get("seed"), entry.get("epochs"), entry.get("window"),
                flag_names(tuple(flags)) if flags is not None else None,
            )  # fmt: skip
        except RunError as e:
            problems.append(RunProblem(entry["name"], path, str(e)))
            continue
        partial = partial_reason(run)
        if partial:
            problems.append(RunProblem(run.name, path, partial))
            continue
        runs.append(run)
    return runs, problems


def partial_reason(run: RunRecord) -> Optional[str]:
    """Why a run's record is incomplete (None: complete): unfinished, fewer epochs than planned,
    or evaluations its event files lack.

    A run whose schedule stopped it early (it restores its best-validation weights) is
    complete with the epochs ``summary.json`` records; any other finished run must have
    evaluated every epoch it was configured for.
    """
    if run.finished is False:
        return "partial: its summary.json does not record the end of training (interrupted or still running)"
    if run.restores_best:
        expected = run.recorded_epochs or []
        if not run.deployed:
            return "partial: its event files lack the restored best-validation evaluation summary.json records"
    else:
        trained_for = run.config.get("epochs", run.epochs_done) if run.finished else run.epochs_done
        if run.epochs_planned is not None and trained_for < run.epochs_planned:
            return f"partial: {trained_for} of {run.epochs_planned} epochs (interrupted, or launched with fewer epochs)"
        expected = list(range(1, trained_for + 1))
    missing = sorted(set(expected) - set(run.logged_epochs))
    if missing:
        recorded = run.recorded_epochs is not None and set(missing) <= set(run.recorded_epochs)
        where = "that summary.json records (truncated or damaged event files)" if recorded else "(never evaluated)"
        return f"partial: its event files lack epoch(s) {', '.join(map(str, missing))} {where}"
    lost = [key for key in run.recorded_metrics if key not in run.evals]
    if lost:
        return (
            f"partial: its event files lack {'/'.join(lost[0])} that summary.json records "
            f"(truncated or damaged event files; {len(lost)} metric(s) lost)"
        )
    gaps = {key: sorted(set(run.logged_epochs) - set(curve)) for key, curve in run.evals.items()}
    gaps = {key: epochs for key, epochs in gaps.items() if epochs}
    if gaps:
        (split, task, metric), epochs = min(gaps.items())
        return (
            f"partial: its event files lack {split}/{task}/{metric} at epoch(s) {', '.join(map(str, epochs))} "
            f"(truncated or damaged event files; {len(gaps)} metric(s) incomplete)"
        )
    return None


def _manifest(experiment_dir: str) -> Optional[Dict[str, Any]]:
    return checked_manifest(experiment_dir) if os.path.isfile(manifest_path(experiment_dir)) else None


def _read_summary(run_dir: str) -> Dict[str, Any]:
    try:
        return checked_summary(run_dir)
    except ValueError as e:
        raise RunError(f"corrupt summary.json: {e}") from None


def _by_flag(config: Dict[str, Any]) -> Dict[str, Any]:
    """``{"epochs": 3, "optim": {"learning_rate": ..}}`` -> ``{"epochs": 3, "learning_rate": ..}`` (flag names are unique)."""
    flags = {k: v for k, v in config.items() if not isinstance(v, dict)}
    for section in (v for v in config.values() if isinstance(v, dict)):
        flags.update(section)
    return flags
