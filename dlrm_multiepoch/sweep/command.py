"""``dlrm-multiepoch sweep``: train strategies x seeds on one dataset, each run launched by TorchX.

Usage::

    dlrm-multiepoch sweep EXPERIMENT_DIR [STRATEGY ...] [--epochs E] [--seeds 0,1,2] [--windows 0,0.5,1]
        [--group NAME] [-s SCHEDULER] [-j NODESxPROCS] [--dryrun] [-- TRAINING-APP FLAGS COMMON TO EVERY RUN]

    dlrm-multiepoch sweep runs/bx                                     # the default strategies, seed 0
    dlrm-multiepoch sweep runs/bx joint delayed --seeds 0,1,2 -- --model multipath --history_length 10
    dlrm-multiepoch sweep runs/bx 'late=--freeze_schedule "tables=frozen@[0,2) train@[2,end)"'
    dlrm-multiepoch sweep runs/win --windows 0,0.5,1,1.5 --epochs 2 --seeds 0,1,2
    dlrm-multiepoch sweep runs/win --windows 0,1,2 --epochs 4 --group e4      # another budget: its own group
    dlrm-multiepoch sweep runs/bx -s slurm -j 2x8 --gpu 8 --dryrun   # one job per run; print the sbatch scripts
    dlrm-multiepoch sweep --list                                      # the strategy presets

A STRATEGY is a preset name or NAME=FLAGS (shell-quoted training-app flags). Rerun the
same command after an interruption: finished runs are skipped, interrupted ones resume
from their last checkpoint, and a run whose trainer still runs (a killed sweep's, or
another sweep's) is followed, never launched twice. A run keeps its flags, ``--epochs``
included: another configuration in the same experiment needs ``--group NAME``.
Everything is checked before the first run. Then: ``dlrm-multiepoch compare EXPERIMENT_DIR``.
"""

import argparse
import os
import shlex
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from dlrm_multiepoch.command_faults import check_folder, guarded, signal_of
from dlrm_multiepoch.command_options import SweepOptions
from dlrm_multiepoch.config_section import add_arguments, from_args, options_of
from dlrm_multiepoch.launch_options import LOCAL, LaunchOptions, split_at_dashes
from dlrm_multiepoch.sweep import checks
from dlrm_multiepoch.sweep.jobs import SweepInterrupted
from dlrm_multiepoch.sweep.manifest import check_experiment, group_record, is_flag_list
from dlrm_multiepoch.run_files import manifest_path, read_manifest
from dlrm_multiepoch.sweep.plan import SweepPlan, build_plan
from dlrm_multiepoch.sweep.strategies import (
    DEFAULT_STRATEGIES,
    STRATEGIES,
    Strategy,
    flag_names,
    flag_value,
    parse_strategy,
    window_strategy,
)

if TYPE_CHECKING:
    from torchx.runner import Runner

DEFAULT_VAL_FRACTION = 0.1  # added to every run when a strategy needs a validation split and none is given


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dlrm-multiepoch sweep",
        description=__doc__.split("\n\n", 1)[0],
        epilog="Flags after -- go to every run's training app (python -m dlrm_multiepoch.train --help lists them).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False,
    )
    add_arguments(parser, options_of(SweepOptions))  # EXPERIMENT_DIR and the options; the strategies come after it
    parser.add_argument(
        "strategies",
        nargs="*",
        metavar="STRATEGY",
        help=f"a preset or NAME=FLAGS (default: {' '.join(DEFAULT_STRATEGIES)}, unless --windows is given)",
    )
    parser.add_argument("--list", action="store_true", help="print the strategy presets and exit")
    add_launch_args(parser, "run", "the dlrm_multiepoch.train component's job parameters")
    return parser


def add_launch_args(parser: argparse.ArgumentParser, unit: str, title: str) -> None:
    """The :class:`LaunchOptions` flags, for every ``unit`` (run, branch) of a command, in a group ``title``."""
    add_arguments(parser.add_argument_group(f"launch ({title})"), options_of(LaunchOptions), unit)


def launch_options(args: argparse.Namespace, runner: "Runner") -> LaunchOptions:
    """The options :func:`add_launch_args` parsed, each checked (ValueError names the flag), the entry point too."""
    options = from_args(LaunchOptions, args)
    options.check()
    options.resolve(runner)
    if options.scheduler == LOCAL and not options.dryrun:
        options.check_entry_point()
    return options


def list_strategies() -> str:
    width = max(len(n) for n in STRATEGIES)
    lines = ["strategy presets (* = in the default sweep):"]
    for name, s in STRATEGIES.items():
        mark = "*" if name in DEFAULT_STRATEGIES else " "
        lines.append(f" {mark} {name:<{width}}  {s.help}\n   {'':<{width}}  flags: {shlex.join(s.flags)}")
    return "\n".join(lines)


# How a sweep goes on once an interruption or a fault of its folder is over.
RERUN = "then rerun the same command to continue (finished runs are kept)"


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--list" in split_at_dashes(argv)[0]:
        print(list_strategies())
        return 0
    own, common = split_at_dashes(argv)
    parser = build_parser()
    args = parser.parse_intermixed_args(own)  # strategies may come before or after the options
    return guarded("sweep", lambda: _main(parser, args, common), RERUN)


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace, common: List[str]) -> int:
    from torchx.runner import get_runner
    from torchx.schedulers.local_scheduler import SignalException

    runner = get_runner()
    try:
        try:
            plan, options = _prepare(args, common, runner)
        except ValueError as e:
            parser.error(str(e))
        return _launch(plan, options, runner, args)
    except (KeyboardInterrupt, SignalException) as e:  # before or between runs: nothing to stop
        print(f"\nsweep: interrupted ({signal_of(e)}; no run was running). Rerun the same command to continue.")
        return 130
    finally:
        runner.close()


def _prepare(args: argparse.Namespace, common: List[str], runner: "Runner") -> Tuple[SweepPlan, LaunchOptions]:
    """The plan and launch options, every check done before the first run (ValueError names the flag)."""
    from dlrm_multiepoch.sweep.launch import SweepLauncher

    own = from_args(SweepOptions, args)
    own.check()
    if not args.dryrun:
        check_folder(own.experiment_dir, "EXPERIMENT_DIR")
    checks.check_not_a_search(own.experiment_dir)
    options = launch_options(args, runner)
    local = args.scheduler == LOCAL and not args.dryrun
    specs = args.strategies or ([] if own.window_list else DEFAULT_STRATEGIES)
    strategies = [parse_strategy(s) for s in specs] + [window_strategy(w, own.epochs) for w in own.window_list]
    common = _with_validation_split(args, strategies, common)
    # Local runs see this machine's paths: a missing --data_path is named now, not by every run.
    plan = build_plan(own.experiment_dir, strategies, own.seed_list, own.epochs, common, group=own.group, check_paths=local)
    if local:
        checks.check_data_path(plan)
    checks.check_validation_split(plan)
    check_experiment(plan)
    new_folder = "sweep it in a new experiment folder"
    recorded = group_record(_manifest(own.experiment_dir), own.group).get("j")
    checks.check_ranks(plan, options.j, recorded, manifest_path(own.experiment_dir), new_folder)
    checks.check_same_data(plan, new_folder)
    checks.check_request(runner, SweepLauncher(plan, options, runner=runner))
    return plan, options


def _with_validation_split(args: argparse.Namespace, strategies: List[Strategy], common: List[str]) -> List[str]:
    """Every run gets the same --val_fraction when a strategy decides on validation (or the group had one)."""
    if "val_fraction" in flag_names(tuple(common)):
        return common
    recorded = group_record(_manifest(args.experiment_dir), args.group).get("common_flags")
    earlier = flag_value(tuple(recorded), "val_fraction") if is_flag_list(recorded) else None
    needing_val = [s.name for s in strategies if s.needs_val]
    if earlier is None and not needing_val:
        return common
    value = earlier or str(DEFAULT_VAL_FRACTION)
    why = "as the experiment's earlier sweeps" if earlier else f"{', '.join(needing_val)} decide(s) on a validation split"
    print(f"sweep: every run gets --val_fraction {value} ({why}; the same training rows for all strategies)", flush=True)
    return [*common, "--val_fraction", value]


def _manifest(experiment_dir: str) -> Dict[str, Any]:
    try:
        return read_manifest(experiment_dir)
    except ValueError:
        return {}  # damaged: check_experiment names it


def _launch(plan: SweepPlan, options: LaunchOptions, runner: "Runner", args: argparse.Namespace) -> int:
    """Launch the runs; Ctrl-C, SIGTERM and SIGHUP print one line (exit 130)."""
    from dlrm_multiepoch.sweep.launch import SweepLauncher

    runs = len(plan.runs)
    n = len(plan.strategies)
    where = os.path.join(args.experiment_dir, args.group) if args.group else args.experiment_dir
    print(f"sweep: {runs} run(s) = {n} strateg{'y' if n == 1 else 'ies'} x {len(plan.seeds)} seed(s) in {where} ({args.scheduler})", flush=True)
    launcher = SweepLauncher(plan, options, runner=runner)
    try:
        failed = launcher.run()
    except SweepInterrupted as e:
        stopped = f"; stopped run {e.run}, which resumes from its last checkpoint" if e.run else ""
        print(f"\nsweep: interrupted ({e.signal_name}){stopped}. Rerun the same command to continue.", flush=True)
        return 130
    if launcher.data_failure is not None:
        print(
            f"sweep: {len(failed)} run(s) not done ({', '.join(failed)}): {launcher.data_failure}'s data failed to load "
            "(its error is above); fix the data, then rerun the same command"
        )
        return 1
    if failed:
        print(f"sweep: {len(failed)} run(s) failed: {', '.join(failed)}; rerun the same command to retry them")
        return 1
    if not args.dryrun and args.scheduler == LOCAL:
        print(f"sweep: done; compare the runs with: dlrm-multiepoch compare {args.experiment_dir}")
    return 0
