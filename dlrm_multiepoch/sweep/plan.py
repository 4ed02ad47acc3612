"""What a sweep trains: one :class:`RunSpec` per strategy and seed, their state on disk, the manifest.

An experiment folder holds one run folder per run (``<strategy>-s<seed>``, the training
app's ``--tensorboard_dir``/``--run_name``) and ``sweep.json``, the manifest: which
strategy, seed, epochs and full app flags each run has. ``compare`` reads it to group
runs; a restarted sweep reads it to refuse a run whose flags changed.

Example::

    plan = build_plan("runs/bx", [parse_strategy("joint")], seeds=[0, 1], budget=3, common_flags=["--dataset", "movielens"])
    for run in plan.runs:
        print(run.name, run_state(plan.experiment_dir, run).status)
"""

import contextlib
import io
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from dlrm_multiepoch.sweep.strategies import Strategy, flag_names, flag_value

MANIFEST = "sweep.json"
SUMMARY = "summary.json"
CHECKPOINTS = "checkpoints"
# Flags each run gets from the sweep itself.
SWEEP_FLAGS = ("epochs", "seed", "tensorboard_dir", "run_name", "resume")


@dataclass(frozen=True)
class RunSpec:
    """One training run of a sweep.

    Args:
        name: run folder name under the experiment folder, ``<strategy>-s<seed>``.
        strategy: the strategy's name.
        seed: its ``--seed``.
        epochs: its ``--epochs``.
        flags: every training-app flag of the run, in order.
        window: epoch the tables start training, for update-window runs.
    """

    name: str
    strategy: str
    seed: int
    epochs: int
    flags: Tuple[str, ...]
    window: Optional[float] = None


@dataclass
class SweepPlan:
    """The runs of one sweep invocation, in launch order (seeds outermost)."""

    experiment_dir: str
    budget: int
    seeds: List[int]
    common_flags: Tuple[str, ...]
    strategies: List[Strategy]
    runs: List[RunSpec] = field(default_factory=list)


def split_at_dashes(args: Sequence[str]) -> Tuple[List[str], List[str]]:
    """``[a, b, "--", c]`` -> ``([a, b], [c])``: what comes before and after the first bare ``--``."""
    args = list(args)
    if "--" not in args:
        return args, []
    at = args.index("--")
    return args[:at], args[at + 1 :]


def build_plan(
    experiment_dir: str, strategies: Sequence[Strategy], seeds: Sequence[int], budget: int, common_flags: Sequence[str]
) -> SweepPlan:
    """Runs for ``strategies`` x ``seeds``, each flag list checked by the training app's parser.

    Raises:
        ValueError: a duplicate strategy, a flag the sweep sets itself, a flag set both in
            the common flags and by a strategy, a strategy for another ``--model``, or
            flags the training app rejects (the message names the run).
    """
    if budget <= 0:
        raise ValueError(f"--epochs must be positive, got {budget}")
    if not seeds:
        raise ValueError("--seeds must name at least one seed")
    common = tuple(common_flags)
    reserved = [n for n in flag_names(common) if n in SWEEP_FLAGS]
    if reserved:
        raise ValueError(
            f"the common flags set {['--' + n for n in reserved]}, which the sweep sets per run "
            "(use the sweep's --epochs and --seeds; run folders are <experiment>/<strategy>-s<seed>)"
        )
    names = [s.name for s in strategies]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"strategies {repeated} are given twice")
    model = flag_value(common, "model") or "dlrm"
    plan = SweepPlan(experiment_dir, budget, list(seeds), common, list(strategies))
    for strategy in strategies:
        own = flag_names(strategy.flags)
        for name in own:
            if name in SWEEP_FLAGS[1:]:
                raise ValueError(f"strategy {strategy.name!r} sets --{name}, which the sweep sets per run")
        both = sorted(set(own) & set(flag_names(common)))
        if both:
            raise ValueError(
                f"strategy {strategy.name!r} sets {['--' + n for n in both]}, also given in the common flags; "
                "set each flag once"
            )
        if strategy.needs_val and not float(flag_value(common, "val_fraction") or 0):
            raise ValueError(
                f"strategy {strategy.name!r} decides on a validation split: add --val_fraction (e.g. 0.1) to the "
                "common flags, so that every strategy trains on the same rows"
            )
        if strategy.model is not None and strategy.model != model:
            raise ValueError(
                f"strategy {strategy.name!r} needs --model {strategy.model} (its gates exist only there); "
                f"the common flags give --model {model}"
            )
    for seed in seeds:  # seeds outermost: a stopped sweep has every strategy for the first seeds
        for strategy in strategies:
            epochs = strategy.run_epochs(budget)
            name = f"{strategy.name}-s{seed}"
            flags = [*common, *strategy.flags]
            if flag_value(strategy.flags, "epochs") is None:
                flags += ["--epochs", str(epochs)]
            flags += ["--seed", str(seed), "--tensorboard_dir", experiment_dir, "--run_name", name, "--resume", "auto"]
            _check_app_flags(name, flags)
            plan.runs.append(RunSpec(name, strategy.name, seed, epochs, tuple(flags), strategy.window))
    return plan


def _check_app_flags(run: str, flags: Sequence[str]) -> None:
    """Parse ``flags`` with the training app's parser (no data is loaded); its error names the run."""
    from dlrm_multiepoch.train.config import parse_config  # torch-heavy: imported when a sweep is planned

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parse_config(list(flags))
    except SystemExit:
        message = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "invalid flags"
        raise ValueError(f"run {run}: {message.split('error: ', 1)[-1]} (flags: {list(flags)})") from None


# -- state on disk ----------------------------------------------------------------


@dataclass(frozen=True)
class RunState:
    """Where a run stands: ``new``, ``finished``, ``resumable`` (has a checkpoint) or ``stale``.

    ``stale``: an unfinished run folder without a checkpoint; it restarts from scratch.
    """

    status: str
    epochs_done: int = 0
    detail: str = ""


def run_state(experiment_dir: str, run: RunSpec) -> RunState:
    """The state of ``run``'s folder: finished when its summary records the end of a ``run.epochs``-epoch training."""
    run_dir = os.path.join(experiment_dir, run.name)
    if not os.path.isdir(run_dir):
        return RunState("new")
    try:
        summary = read_json(os.path.join(run_dir, SUMMARY))
    except ValueError:
        summary = {}  # unreadable: not finished; the run resumes from its checkpoint or starts over
    done = max((int(e["epoch"]) for e in summary.get("evaluations", []) if float(e["epoch"]).is_integer()), default=0)
    # The app records the wall time when its training loop ends: after the last epoch,
    # or earlier when the automatic schedule stopped the run. A finished run trained for
    # fewer epochs than asked now (a larger --epochs) resumes.
    if "wall_time_s" in summary and summary.get("config", {}).get("epochs", 0) >= run.epochs:
        return RunState("finished", done)
    checkpoints = os.path.join(run_dir, CHECKPOINTS)
    from dlrm_multiepoch.train.checkpoint import STATE_FILE, complete_checkpoints  # torch-heavy: unfinished runs only

    saved = complete_checkpoints(checkpoints) if os.path.isdir(checkpoints) else []
    if saved:
        step, newest = saved[-1]
        try:
            progress = read_json(os.path.join(newest, STATE_FILE)).get("parts", {}).get("progress", {})
        except ValueError:
            progress = {}  # damaged: the run falls back to an older checkpoint, or refuses naming it
        epochs = int(progress.get("epoch", 0))
        return RunState("resumable", epochs, f"checkpoint at step {step}, {epochs} epoch(s) done")
    return RunState("stale", done, "no checkpoint")


def read_json(path: str) -> Dict[str, Any]:
    """A JSON file's content; empty when the file does not exist.

    Raises:
        ValueError: the file exists but is not valid JSON (the message names it).
    """
    if not os.path.isfile(path):
        return {}
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError as e:
        raise ValueError(f"{path} is not valid JSON ({e})") from None


# -- manifest -----------------------------------------------------------------------


def read_manifest(experiment_dir: str) -> Dict[str, Any]:
    """``sweep.json`` of an experiment folder (empty when there is none); invalid JSON raises ValueError."""
    return read_json(os.path.join(experiment_dir, MANIFEST))


def update_manifest(plan: SweepPlan, handles: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Merge ``plan`` into the experiment's manifest (earlier sweeps' runs stay) and write it.

    Raises:
        ValueError: a run of ``plan`` already in the manifest with other flags (``--epochs``
            may grow: the run resumes). Start a new experiment folder for other flags.
    """
    manifest = read_manifest(plan.experiment_dir) or {"runs": {}}
    for run in plan.runs:
        before = manifest["runs"].get(run.name)
        if before is not None and _without_epochs(before["flags"]) != _without_epochs(run.flags):
            raise ValueError(
                f"run {run.name} exists in {plan.experiment_dir} with other flags:\n  before: {before['flags']}\n"
                f"  now:    {list(run.flags)}\nuse a new experiment folder (or another strategy name)"
            )
        entry = asdict(run)
        entry["flags"] = list(run.flags)
        if before is not None and "handle" in before:
            entry["handle"] = before["handle"]
        manifest["runs"][run.name] = entry
    for name, handle in (handles or {}).items():
        manifest["runs"][name]["handle"] = handle
    manifest["budget"] = plan.budget
    manifest["common_flags"] = list(plan.common_flags)
    manifest["strategies"] = {
        **manifest.get("strategies", {}),
        **{s.name: {"flags": list(s.flags), "help": s.help, "window": s.window} for s in plan.strategies},
    }
    os.makedirs(plan.experiment_dir, exist_ok=True)
    path = os.path.join(plan.experiment_dir, MANIFEST)
    with open(path + ".tmp", "w") as f:
        json.dump(manifest, f, indent=2)
    os.replace(path + ".tmp", path)
    return manifest


def _without_epochs(flags: Sequence[str]) -> List[str]:
    # How far a run trains (--epochs; --stop_at_epoch, a search's pause) may change between launches.
    out, skip = [], False
    for token in flags:
        if skip:
            skip = False
        elif token in ("--epochs", "--stop_at_epoch"):
            skip = True
        elif not token.startswith(("--epochs=", "--stop_at_epoch=")):
            out.append(token)
    return out
