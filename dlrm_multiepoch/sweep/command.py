"""``dlrm-multiepoch sweep``: train strategies x seeds on one dataset, each run launched by TorchX.

Usage::

    dlrm-multiepoch sweep EXPERIMENT_DIR [STRATEGY ...] [--epochs E] [--seeds 0,1,2] [--windows 0,0.5,1]
        [-s SCHEDULER] [-j NODESxPROCS] [--dryrun] [-- TRAINING-APP FLAGS COMMON TO EVERY RUN]

    dlrm-multiepoch sweep runs/bx                                     # the default strategies, seed 0
    dlrm-multiepoch sweep runs/bx joint delayed --seeds 0,1,2 -- --model multipath --history_length 10
    dlrm-multiepoch sweep runs/bx 'late=--freeze_schedule "tables=frozen@[0,2) train@[2,end)"'
    dlrm-multiepoch sweep runs/win --windows 0,0.5,1,1.5 --epochs 2 --seeds 0,1,2
    dlrm-multiepoch sweep runs/bx -s slurm -j 2x8 --gpu 8 --dryrun   # one job per run; print the sbatch scripts
    dlrm-multiepoch sweep --list                                      # the strategy presets

A STRATEGY is a preset name or NAME=FLAGS (shell-quoted training-app flags). Rerun the
same command after an interruption: finished runs are skipped, interrupted ones resume
from their last checkpoint. Then: ``dlrm-multiepoch compare EXPERIMENT_DIR``.
"""

import argparse
import shlex
import sys
from typing import List, Optional

from dlrm_multiepoch.sweep.plan import build_plan, split_at_dashes
from dlrm_multiepoch.sweep.strategies import (
    DEFAULT_STRATEGIES,
    STRATEGIES,
    flag_names,
    parse_strategy,
    window_strategy,
)

DEFAULT_VAL_FRACTION = 0.1  # added to every run when a strategy needs a validation split and none is given


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dlrm-multiepoch sweep",
        description=__doc__.split("\n\n", 1)[0],
        epilog="Flags after -- go to every run's training app (apps/train.py --help lists them).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("experiment_dir", help="folder of the runs (one per strategy and seed) and sweep.json")
    parser.add_argument(
        "strategies",
        nargs="*",
        metavar="STRATEGY",
        help=f"a preset or NAME=FLAGS (default: {' '.join(DEFAULT_STRATEGIES)}, unless --windows is given)",
    )
    parser.add_argument("--epochs", type=int, default=3, help="epoch budget of every strategy (joint-1ep: 1, joint: +1)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds; each strategy runs once per seed")
    parser.add_argument(
        "--windows", default="", help="update-window sweep: epochs at which the tables start training, e.g. 0,0.5,1,1.5"
    )
    parser.add_argument("--list", action="store_true", help="print the strategy presets and exit")
    launch = parser.add_argument_group("launch (the dlrm_multiepoch.train component's job parameters)")
    launch.add_argument("-s", "--scheduler", default="local_cwd", help="TorchX scheduler: local_cwd runs one after another")
    launch.add_argument("-cfg", "--scheduler_args", default="", help="scheduler options, e.g. queue=default (TorchX -cfg)")
    launch.add_argument("--dryrun", action="store_true", help="print each run's scheduler request, submit nothing")
    launch.add_argument("-j", "--j", default="1x2", help="{nnodes}x{nproc_per_node} of every run")
    launch.add_argument("--script", default="apps/train.py", help="training script, relative to the job's working directory")
    launch.add_argument("--cpu", type=int, default=2, help="CPUs per node")
    launch.add_argument("--gpu", type=int, default=0, help="GPUs per node")
    launch.add_argument("--memMB", type=int, default=8192, help="host memory per node, in MB")
    launch.add_argument("--h", default=None, help="a registered named resource; overrides cpu, gpu and memMB")
    launch.add_argument("--image", default="", help="container image (kubernetes, docker)")
    launch.add_argument("--env", default="", help="environment of every run, e.g. NCCL_DEBUG=WARN,LOGLEVEL=INFO")
    launch.add_argument("--max_retries", type=int, default=0, help="scheduler restarts of a failed run")
    launch.add_argument("--mounts", default="", help="mounts, e.g. type=bind,src=/data,dst=/data")
    return parser


def list_strategies() -> str:
    width = max(len(n) for n in STRATEGIES)
    lines = ["strategy presets (* = in the default sweep):"]
    for name, s in STRATEGIES.items():
        mark = "*" if name in DEFAULT_STRATEGIES else " "
        lines.append(f" {mark} {name:<{width}}  {s.help}\n   {'':<{width}}  flags: {shlex.join(s.flags)}")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    from torchx.util.types import to_dict, to_list

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--list" in split_at_dashes(argv)[0]:
        print(list_strategies())
        return 0
    own, common = split_at_dashes(argv)
    parser = build_parser()
    args = parser.parse_intermixed_args(own)  # strategies may come before or after the options
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--seeds expects comma-separated integers, got {args.seeds!r}")
    try:
        windows = [float(w) for w in args.windows.split(",") if w.strip()]
    except ValueError:
        parser.error(f"--windows expects comma-separated epochs, got {args.windows!r}")
    specs = args.strategies or ([] if windows else DEFAULT_STRATEGIES)
    try:
        strategies = [parse_strategy(s) for s in specs] + [window_strategy(w, args.epochs) for w in windows]
        needing_val = [s.name for s in strategies if s.needs_val]
        if needing_val and "val_fraction" not in flag_names(tuple(common)):
            common = [*common, "--val_fraction", str(DEFAULT_VAL_FRACTION)]
            print(
                f"sweep: {', '.join(needing_val)} decide(s) on a validation split: every run gets "
                f"--val_fraction {DEFAULT_VAL_FRACTION} (the same training rows for all strategies)",
                flush=True,
            )
        plan = build_plan(args.experiment_dir, strategies, seeds, args.epochs, common)
    except ValueError as e:
        parser.error(str(e))

    from torchx.runner import get_runner

    from dlrm_multiepoch.sweep.launch import LaunchOptions, SweepLauncher

    runner = get_runner()
    try:
        cfg = runner.scheduler_run_opts(args.scheduler).cfg_from_str(args.scheduler_args)
        options = LaunchOptions(
            scheduler=args.scheduler, scheduler_cfg=cfg, j=args.j, dryrun=args.dryrun, script=args.script,
            cpu=args.cpu, gpu=args.gpu, memMB=args.memMB, h=args.h, image=args.image, env=to_dict(args.env),
            max_retries=args.max_retries, mounts=to_list(args.mounts),
        )  # fmt: skip
        runs = len(plan.runs)
        print(
            f"sweep: {runs} run(s) = {len(strategies)} strateg{'y' if len(strategies) == 1 else 'ies'} x "
            f"{len(seeds)} seed(s) in {args.experiment_dir} ({args.scheduler})",
            flush=True,
        )
        failed = SweepLauncher(plan, options, runner=runner).run()
    finally:
        runner.close()
    if failed:
        print(f"sweep: {len(failed)} run(s) failed: {', '.join(failed)}; rerun the same command to retry them")
        return 1
    if not args.dryrun and args.scheduler == "local_cwd":
        print(f"sweep: done; compare the runs with: dlrm-multiepoch compare {args.experiment_dir}")
    return 0
