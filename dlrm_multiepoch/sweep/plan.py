"""What a sweep trains: one :class:`RunSpec` per strategy and seed, and their state on disk.

An experiment folder holds one run folder per run (``<strategy>-s<seed>``, the training
app's ``--tensorboard_dir``/``--run_name``; ``<group>/<strategy>-s<seed>`` for a sweep
given ``--group``) and ``sweep.json``, the manifest: which group, strategy, seed, epochs
and full app flags each run has (:mod:`dlrm_multiepoch.sweep.manifest`). ``compare``
reads it to group runs; a restarted sweep reads it to refuse a run whose flags changed.

Example::

    plan = build_plan("runs/bx", [parse_strategy("joint")], seeds=[0, 1], budget=3, common_flags=["--dataset", "movielens"])
    for run in plan.runs:
        print(run.name, run_state(plan.experiment_dir, run).status)
"""

import contextlib
import io
import os
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from dlrm_multiepoch.config_section import RESERVED_BY_SWEEP
from dlrm_multiepoch.lock_holder import live_holder
from dlrm_multiepoch.run_files import (
    checkpoint_progress,
    checkpoints_dir,
    complete_checkpoints,
    read_summary,
    run_folder_name,
    summary_finished,
    whole_epoch_evaluations,
)
from dlrm_multiepoch.sweep.strategies import Strategy, check_name, flag_items, flag_names, flag_value
from dlrm_multiepoch.train.config import TrainConfig, flags_with, parse_config

# Flags each run gets from the sweep itself (their fields' RESERVED_BY_SWEEP role); a strategy may set --epochs.
SWEEP_FLAGS = flags_with(RESERVED_BY_SWEEP)


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
        group: the sweep's ``--group`` ("" for none): its runs live in ``<experiment>/<group>/``.
    """

    name: str
    strategy: str
    seed: int
    epochs: int
    flags: Tuple[str, ...]
    window: Optional[float] = None
    group: str = ""


@dataclass
class SweepPlan:
    """The runs of one sweep invocation, in launch order (seeds outermost)."""

    experiment_dir: str
    budget: int
    seeds: List[int]
    common_flags: Tuple[str, ...]
    strategies: List[Strategy]
    runs: List[RunSpec] = field(default_factory=list)
    group: str = ""


def build_plan(
    experiment_dir: str,
    strategies: Sequence[Strategy],
    seeds: Sequence[int],
    budget: int,
    common_flags: Sequence[str],
    group: str = "",
    check_paths: bool = False,
) -> SweepPlan:
    """Runs for ``strategies`` x ``seeds``, each flag list checked by the training app's parser.

    Args:
        group: put the runs in ``<experiment_dir>/<group>/`` (a configuration of their own).
        check_paths: also check the paths the flags name (``--data_path``, ...) on this machine.

    Raises:
        ValueError: a duplicate strategy, a flag the sweep sets itself, a flag set twice
            (in the common flags, in one strategy, or in both), a strategy for another
            ``--model``, or flags the training app rejects (the message names the run).
    """
    if group:
        check_name(group, "--group")
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
    _refuse_repeated_flags("the common flags", common)
    model = flag_value(common, "model") or "dlrm"
    plan = SweepPlan(experiment_dir, budget, list(seeds), common, list(strategies), group=group)
    for strategy in strategies:
        _refuse_repeated_flags(f"strategy {strategy.name!r}", strategy.flags)
        own = flag_names(strategy.flags)
        for name in own:
            if name in SWEEP_FLAGS and name != "epochs":
                raise ValueError(f"strategy {strategy.name!r} sets --{name}, which the sweep sets per run")
        both = sorted(set(own) & set(flag_names(common)))
        if both:
            raise ValueError(
                f"strategy {strategy.name!r} sets {['--' + n for n in both]}, also given in the common flags; "
                "set each flag once"
            )
        if strategy.needs_val and not _fraction(common, "val_fraction"):
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
            folder = run_folder_name(strategy.name, seed)
            flags = [*common, *strategy.flags]
            if flag_value(strategy.flags, "epochs") is None:
                flags += ["--epochs", str(epochs)]
            parent = os.path.join(experiment_dir, group) if group else experiment_dir
            flags += ["--seed", str(seed), "--tensorboard_dir", parent, "--run_name", folder, "--resume", "auto"]
            name = f"{group}/{folder}" if group else folder
            _check_app_flags(name, flags, check_paths)
            plan.runs.append(RunSpec(name, strategy.name, seed, epochs, tuple(flags), strategy.window, group))
    return plan


def _fraction(flags: Sequence[str], name: str) -> float:
    text = flag_value(tuple(flags), name) or "0"
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--{name} {text!r}: expected a fraction, e.g. 0.1") from None


def _refuse_repeated_flags(where: str, flags: Sequence[str]) -> None:
    """A flag given twice would silently keep its last value: refuse it, naming both values."""
    items = flag_items(flags)
    names = [name for name, _ in items]
    for name in dict.fromkeys(n for n in names if names.count(n) > 1):
        values = [v for n, v in items if n == name]
        raise ValueError(f"{where} set --{name} {len(values)} times ({', '.join(map(repr, values))}); set it once")


def parse_app_flags(flags: Sequence[str], check_paths: bool = False) -> TrainConfig:
    """The training app's config of ``flags`` (its parser; no data is loaded), its refusal as a ValueError
    naming the flag (argparse's message without its usage block)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parse_config(list(flags), check_paths=check_paths)
    except SystemExit:
        lines = err.getvalue().strip().splitlines()
        raise ValueError(lines[-1].split("error: ", 1)[-1] if lines else "invalid flags") from None


def _check_app_flags(run: str, flags: Sequence[str], check_paths: bool = False) -> None:
    """Parse ``flags`` with the training app's parser; its error names the run."""
    try:
        parse_app_flags(flags, check_paths)
    except ValueError as e:
        raise ValueError(f"run {run}: {e} (flags: {list(flags)})") from None


# -- state on disk ----------------------------------------------------------------


@dataclass(frozen=True)
class RunState:
    """Where a run stands: ``new``, ``running``, ``finished``, ``resumable`` (has a checkpoint) or ``stale``.

    ``running``: a live trainer holds its folder's lock (``detail`` names it). ``stale``:
    an unfinished run folder without a checkpoint; its next trainer starts over in it.
    """

    status: str
    epochs_done: int = 0
    detail: str = ""


def run_state(experiment_dir: str, run: RunSpec) -> RunState:
    """The state of ``run``'s folder: finished when its summary records the end of a ``run.epochs``-epoch training."""
    run_dir = os.path.join(experiment_dir, run.name)
    if not os.path.isdir(run_dir):
        return RunState("new")
    holder = live_holder(run_dir)
    if holder is not None:
        return RunState("running", detail=holder.describe())
    try:
        summary = read_summary(run_dir)
    except ValueError:
        summary = {}  # unreadable: not finished; the run resumes from its checkpoint or starts over
    if not isinstance(summary, dict) or not isinstance(summary.get("config", {}), dict):
        summary = {}  # not a summary the app wrote: as unreadable
    done = max((int(e["epoch"]) for e in whole_epoch_evaluations(summary)), default=0)
    # The app records the wall time when its training loop ends: after the last epoch,
    # or earlier when the automatic schedule stopped the run. (A run never continues under
    # another --epochs: the manifest checks refuse that before any launch.)
    if summary_finished(summary) and summary.get("config", {}).get("epochs", 0) >= run.epochs:
        return RunState("finished", done)
    saved = complete_checkpoints(checkpoints_dir(run_dir))
    if saved:
        step, newest = saved[-1]
        epoch = checkpoint_progress(newest).get("epoch")
        # Damaged (no epoch): the run falls back to an older checkpoint, or refuses naming it.
        epochs = epoch if isinstance(epoch, int) else 0
        return RunState("resumable", epochs, f"checkpoint at step {step}, {epochs} epoch(s) done")
    return RunState("stale", done, "no checkpoint")
