"""``dlrm-multiepoch search``: decide on validation which multi-epoch schedule to deploy, cheaper than a sweep.

Usage::

    dlrm-multiepoch search EXPERIMENT_DIR [--epochs E] [--seeds 0,1,2] [--eta 3] [--rung_fraction 0.3]
        [-s SCHEDULER] [-j NODESxPROCS] [--dryrun] [-- TRAINING-APP FLAGS COMMON TO EVERY BRANCH]

    dlrm-multiepoch search runs/ml --seeds 0,1,2 -- --dataset movielens --val_fraction 0.1
    dlrm-multiepoch search /shared/runs/bx -s slurm -j 2x8 --gpu 8 -- --dataset bookcrossing

The candidates are every fixed preset (joint at its best epoch, early, reinit, tables
starting at each whole epoch: window@W and delayed) and the greedy ``auto``; branches
share prefixes through checkpoints (``--start_from``), losers are cut on the validation
objective (``--auto_metric``, ``--auto_task_weights`` of the runs; the ``auto`` candidate
follows the same), first among branches whose tables are equally young a fraction of an
epoch after the tables they deploy start (``--rung_fraction``), then at whole epochs; the record of
every branch goes to the console and ``EXPERIMENT_DIR/search.json`` with the checkpoint
to deploy. Rerun the same command after an interruption: it continues; a rerun is checked
against ``search.json`` and each branch's run folder (``--epochs``, every app flag) and
refused, naming the flag, if it would change what was searched.
"""

import argparse
import sys
from typing import TYPE_CHECKING, List, Optional

from dlrm_multiepoch.command_faults import check_folder, guarded, signal_of
from dlrm_multiepoch.command_options import SearchOptions
from dlrm_multiepoch.config_section import RESERVED_BY_SEARCH, add_arguments, from_args, options_of
from dlrm_multiepoch.launch_options import split_at_dashes
from dlrm_multiepoch.search.candidates import candidate_tree, select
from dlrm_multiepoch.search.checks import check_search
from dlrm_multiepoch.search.branches import SearchError
from dlrm_multiepoch.search.search_json import keep_damaged, read_record
from dlrm_multiepoch.search.settings import SearchSettings
from dlrm_multiepoch.sweep.command import DEFAULT_VAL_FRACTION, add_launch_args, launch_options
from dlrm_multiepoch.sweep.jobs import SweepInterrupted
from dlrm_multiepoch.sweep.plan import parse_app_flags
from dlrm_multiepoch.sweep.strategies import flag_names
from dlrm_multiepoch.train.config import flags_with

if TYPE_CHECKING:
    from torchx.runner import Runner

    from dlrm_multiepoch.search.driver import ScheduleSearch

# App flags the search sets per branch: its schedule, its launch horizon and checkpoints.
BRANCH_FLAGS = flags_with(RESERVED_BY_SEARCH)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dlrm-multiepoch search",
        description=__doc__.split("\n\n", 1)[0],
        epilog="Flags after -- go to every branch's training app (python -m dlrm_multiepoch.train --help lists them).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False,
    )
    add_arguments(parser, options_of(SearchOptions))
    add_launch_args(parser, "branch", "as for dlrm-multiepoch sweep")
    return parser


# How a search goes on once an interruption or a fault of its folder is over.
RERUN = "then rerun the same command to continue (what was trained is kept)"


def main(argv: Optional[List[str]] = None) -> int:
    own, common = split_at_dashes(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args = parser.parse_args(own)
    return guarded("search", lambda: _main(parser, args, common), RERUN)


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace, common: List[str]) -> int:
    from torchx.runner import get_runner
    from torchx.schedulers.local_scheduler import SignalException

    runner = get_runner()
    try:
        try:
            search = _prepare(args, common, runner)
        except ValueError as e:
            parser.error(str(e))
        return _run(search, args)
    except (KeyboardInterrupt, SignalException) as e:  # before or between launches: nothing to stop
        print(f"\nsearch: interrupted ({signal_of(e)}; no branch was training). Rerun the same command to continue.")
        return 130
    finally:
        runner.close()


def _prepare(args: argparse.Namespace, common: List[str], runner: "Runner") -> "ScheduleSearch":
    """The search, every check done before its first launch (ValueError names the flag, file or field)."""
    own = from_args(SearchOptions, args)
    own.check()
    if not args.dryrun:
        check_folder(own.experiment_dir, "EXPERIMENT_DIR")
    taken = sorted(set(flag_names(tuple(common))) & set(BRANCH_FLAGS))
    if taken:
        raise ValueError(
            f"the app flags set {['--' + n for n in taken]}, which the search sets per branch (the schedule is "
            "what it searches; checkpoints are how branches share prefixes)"
        )
    if "val_fraction" not in flag_names(tuple(common)):
        common = [*common, "--val_fraction", str(DEFAULT_VAL_FRACTION)]
        print(
            f"search: decides on a validation split: every branch gets --val_fraction {DEFAULT_VAL_FRACTION}",
            flush=True,
        )
    cfg = parse_app_flags([*common, "--epochs", str(own.epochs)])
    tree = select(candidate_tree(own.epochs, cfg.auto.auto_frozen_cap), own.candidate_names())
    settings = SearchSettings(cfg.auto.auto_metric, cfg.auto.task_weight_values, own.eta, own.rung_fraction)
    options = launch_options(args, runner)
    folder = own.experiment_dir
    loaded = read_record(folder)
    check_search(folder, tree, own.seed_list, own.epochs, common, settings, loaded.record, options, runner)
    if loaded.damage:  # every decision follows from the run folders: the record is rebuilt from them
        kept = "" if args.dryrun else f"; the damaged file is kept as {keep_damaged(folder)}"
        print(f"search: {loaded.damage}: rebuilt from the run folders{kept}", flush=True)
    from dlrm_multiepoch.search.driver import ScheduleSearch

    return ScheduleSearch(
        folder, tree, own.seed_list, own.epochs, common, options, settings, earlier=loaded.record.get("seeds"),
        shared_job=own.jobs == "shared",
    )  # fmt: skip


def _run(search: "ScheduleSearch", args: argparse.Namespace) -> int:
    """Search; Ctrl-C, SIGTERM and SIGHUP print one line (exit 130), a problem found on the way one line (exit 1)
    (a fault of its folder, an ``OSError``, is the boundary's: :func:`~dlrm_multiepoch.command_faults.guarded`)."""
    from torchx.schedulers.local_scheduler import SignalException

    try:
        failed = search.run()
    except (SweepInterrupted, KeyboardInterrupt, SignalException) as e:  # the record is saved; nothing is lost
        name = e.signal_name if isinstance(e, SweepInterrupted) else signal_of(e)
        run = e.run if isinstance(e, SweepInterrupted) else None
        stopped = f"; stopped branch {run}, which resumes from its last checkpoint" if run else ""
        print(f"\nsearch: interrupted ({name}){stopped}. Rerun the same command to continue.", flush=True)
        return 130
    except SearchError as e:
        print(f"search: {e}", flush=True)
        return 1
    if failed:
        print(f"search: {len(failed)} launch(es) failed: {', '.join(failed)}; rerun the same command to continue")
        return 1
    if search.undecided:
        seeds = ", ".join(map(str, search.undecided))
        print(f"search: no decision for seed(s) {seeds} (the reason is above and in {args.experiment_dir}/search.json)")
        return 1
    if not args.dryrun:
        print(
            f"search: done; its record is {args.experiment_dir}/search.json (compare the branches: "
            f"dlrm-multiepoch compare {args.experiment_dir})"
        )
    return 0

