"""Model-quality comparison, the older command line: a thin wrapper around ``dlrm-multiepoch sweep`` + ``compare``.

Each ``--variant NAME=FLAGS`` becomes a free strategy of the sweep (every variant runs
``--epochs``), each run the real training app on ``--nproc`` ranks under TorchX; then
the comparison is printed. New work should call the two commands directly::

    dlrm-multiepoch sweep runs/q 'joint-E=--freeze_schedule joint' delayed \\
        --epochs 3 --seeds 0,1,2 -- --dataset movielens
    dlrm-multiepoch compare runs/q

Usage (unchanged)::

    python benchmarks/quality/quality_runs.py                                  # joint vs delayed, Book-Crossing, 3 seeds
    python benchmarks/quality/quality_runs.py --variant joint-E= --variant early --seeds 0 1
    python benchmarks/quality/quality_runs.py --epochs 2 -- --dataset movielens    # flags after -- go to every run
"""

import argparse
import sys
import time
from pathlib import Path

from dlrm_multiepoch.launch_options import split_at_dashes
from dlrm_multiepoch.report.command import main as compare_main
from dlrm_multiepoch.sweep.command import main as sweep_main

REPO = Path(__file__).resolve().parents[2]
# joint over --epochs (the preset joint runs one more), and the preset delayed; a free NAME is not a preset's.
DEFAULT_VARIANTS = ["joint-E=--freeze_schedule joint", "delayed"]


def main() -> int:
    own, common = split_at_dashes(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", action="append", help="a preset or NAME=FLAGS (repeatable); default: joint-E and delayed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=2, help="ranks per run")
    parser.add_argument("--out", default="", help="experiment folder (default: runs/quality-<time>)")
    args = parser.parse_args(own)
    out = args.out or str(REPO / "runs" / f"quality-{time.strftime('%Y%m%d-%H%M%S')}")
    variants = args.variant or DEFAULT_VARIANTS
    seeds = ",".join(map(str, args.seeds))
    code = sweep_main([out, *variants, "--epochs", str(args.epochs), "--seeds", seeds, "-j", f"1x{args.nproc}", "--", *common])
    return code or compare_main([out])


if __name__ == "__main__":
    sys.exit(main())
