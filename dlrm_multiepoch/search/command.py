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
to deploy. Rerun the same command after an interruption: it continues.
"""

import argparse
import sys
from typing import List, Optional

from dlrm_multiepoch.launch_options import split_at_dashes
from dlrm_multiepoch.search.candidates import candidate_tree, select
from dlrm_multiepoch.search.pruning import DEFAULT_ETA, DEFAULT_RUNG_FRACTION
from dlrm_multiepoch.sweep.command import DEFAULT_VAL_FRACTION, add_launch_args, launch_options
from dlrm_multiepoch.sweep.strategies import flag_names
from dlrm_multiepoch.train.config import parse_config

# App flags the search sets per branch: its schedule, its launch horizon and checkpoints.
BRANCH_FLAGS = (
    "freeze_schedule", "reinit", "start_from", "stop_at_epoch", "keep_checkpoints", "checkpoint",
    "checkpoint_every_n_steps",
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dlrm-multiepoch search",
        description=__doc__.split("\n\n", 1)[0],
        epilog="Flags after -- go to every branch's training app (python -m dlrm_multiepoch.train --help lists them).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "experiment_dir", help="folder of the branches (one run folder each), sweep.json and search.json"
    )
    parser.add_argument("--epochs", type=int, default=3, help="epoch budget E of every schedule (joint: E + 1)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds; one independent search per seed")
    parser.add_argument(
        "--candidates",
        default="",
        help="comma-separated subset of the candidates (default: all; a branch needs its parent)",
    )
    parser.add_argument("--eta", type=int, default=DEFAULT_ETA, help="successive halving: the top 1/eta go on")
    parser.add_argument(
        "--rung_fraction", type=float, default=DEFAULT_RUNG_FRACTION,
        help="a branch is first judged (against its cohort: tables as young) this fraction of an epoch after the "
        "tables it deploys start; 1: after a whole epoch, with every branch",
    )  # fmt: skip
    add_launch_args(parser, "branch", "as for dlrm-multiepoch sweep")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    own, common = split_at_dashes(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args = parser.parse_args(own)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--seeds expects comma-separated integers, got {args.seeds!r}")
    if not seeds:
        parser.error("--seeds must name at least one seed")
    if args.eta < 2:
        parser.error(f"--eta must be at least 2, got {args.eta}")
    if not 0 < args.rung_fraction <= 1:
        parser.error(f"--rung_fraction must be in (0, 1], got {args.rung_fraction:g}")
    taken = sorted(set(flag_names(tuple(common))) & set(BRANCH_FLAGS))
    if taken:
        parser.error(
            f"the app flags set {['--' + n for n in taken]}, which the search sets per branch (the schedule is "
            "what it searches; checkpoints are how branches share prefixes)"
        )
    if "val_fraction" not in flag_names(tuple(common)):
        common = [*common, "--val_fraction", str(DEFAULT_VAL_FRACTION)]
        print(
            f"search: decides on a validation split: every branch gets --val_fraction {DEFAULT_VAL_FRACTION}",
            flush=True,
        )
    cfg = parse_config([*common, "--epochs", str(args.epochs)])  # a bad app flag exits here, naming it
    try:
        names = [n.strip() for n in args.candidates.split(",") if n.strip()]
        tree = select(candidate_tree(args.epochs, cfg.auto.auto_frozen_cap), names)
        weights = _weights(cfg.auto.auto_task_weights)
    except ValueError as e:
        parser.error(str(e))

    from torchx.runner import get_runner

    from dlrm_multiepoch.search.driver import ScheduleSearch, SearchSettings

    runner = get_runner()
    try:
        options = launch_options(args, runner)
    except ValueError as e:
        parser.error(str(e))
    finally:
        runner.close()
    settings = SearchSettings(cfg.auto.auto_metric, weights, args.eta, args.rung_fraction)
    try:
        search = ScheduleSearch(args.experiment_dir, tree, seeds, args.epochs, common, options, settings)
        failed = search.run()
    except ValueError as e:
        parser.error(str(e))
    if failed:
        print(f"search: {len(failed)} launch(es) failed: {', '.join(failed)}; rerun the same command to continue")
        return 1
    if not args.dryrun:
        print(
            f"search: done; its record is {args.experiment_dir}/search.json (compare the branches: "
            f"dlrm-multiepoch compare {args.experiment_dir})"
        )
    return 0


def _weights(text: str) -> dict:
    """``--auto_task_weights`` as ``{task: weight}``; the tasks are checked by the runs (empty: equal weights)."""
    from dlrm_multiepoch.auto.config import parse_task_weights

    names = [part.partition(":")[0].strip() for part in text.split(",") if part.strip()]
    return parse_task_weights(text, names) if names else {}
