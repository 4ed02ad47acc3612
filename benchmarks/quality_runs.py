"""Model-quality comparison: train each variant for several seeds, side by side, and
print mean ± std of test and train-sample AUC/logloss per epoch and task.

Each run is the real training app on 2 gloo ranks (torchrun), so the figures are what
`make demo` / `torchx run` users get. Results go to docs/RESULTS.md with this command.

Usage::

    python benchmarks/quality_runs.py                                  # joint vs delayed, Book-Crossing, 3 seeds
    python benchmarks/quality_runs.py --variant joint= --variant "early=--freeze_schedule early" --seeds 0 1
    python benchmarks/quality_runs.py --epochs 2 -- --dataset movielens    # flags after -- go to every run
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlrm_multiepoch.report import format_seed_table  # noqa: E402

DEFAULT_VARIANTS = ["joint=--freeze_schedule joint", "delayed=--freeze_schedule delayed"]


def run_variant(name: str, flags: List[str], seed: int, out: Path, common: List[str], nproc: int) -> Path:
    run_name = f"{name}-s{seed}"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
        str(REPO / "apps" / "train.py"), "--tensorboard_dir", str(out), "--run_name", run_name,
        "--seed", str(seed), "--no-progress_bar", *common, *flags,
    ]  # fmt: skip
    log = out / f"{run_name}.log"
    start = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if proc.returncode:
        raise SystemExit(f"run {run_name} failed (exit {proc.returncode}); see {log}")
    print(f"  {run_name}: {time.perf_counter() - start:.0f}s", flush=True)
    return out / run_name


def main() -> None:
    argv = sys.argv[1:]
    common = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", action="append", help="NAME=FLAGS (repeatable); default: joint and delayed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=2, help="ranks per run")
    parser.add_argument("--out", default="", help="parent folder of the runs (default: runs/quality-<time>)")
    parser.add_argument("--tasks", default="like,love")
    args = parser.parse_args(argv)
    variants: Dict[str, List[str]] = {}
    for spec in args.variant or DEFAULT_VARIANTS:
        if "=" not in spec:
            parser.error(f"--variant expects NAME=FLAGS, got {spec!r}")
        name, flags = spec.split("=", 1)
        variants[name] = flags.split()
    out = Path(args.out or REPO / "runs" / f"quality-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    common = ["--epochs", str(args.epochs), *common]
    print(f"runs in {out}; common flags: {' '.join(common)}", flush=True)
    runs: Dict[str, List[str]] = {name: [] for name in variants}
    for seed in args.seeds:  # seeds outermost: a stopped job still has every variant for the first seeds
        for name, flags in variants.items():
            runs[name].append(str(run_variant(name, flags, seed, out, common, args.nproc)))
    tasks = args.tasks.split(",")
    for split in ("test", "train_sample"):
        for metric in ("auc", "logloss"):
            print(f"\n{split} {metric}\n")
            print(format_seed_table(runs, tasks, split, metric))


if __name__ == "__main__":
    main()
