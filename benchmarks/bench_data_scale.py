"""Data at scale: preprocessing throughput and memory, and the per-rank loader against
the training step, on synthetic Criteo-shaped data of 10M and 50M rows.

For each size (``--sizes``) it
1. writes the TSV with ``benchmarks/tools/make_synthetic_criteo.py`` (unless present);
2. runs ``dlrm-multiepoch preprocess`` on it in a child process: rows/s and the child's
   peak RSS;
3. on 2 gloo ranks (``torchrun``, ``OMP_NUM_THREADS=1``), per rank: the loader alone
   for ``--loader_steps`` steps (samples/s summed over ranks), then the training app's
   pipeline (TorchRec DLRM, 26 tables sharded by DMP, ``TrainPipelineSparseDist``) fed by
   the same loader for ``--train_steps`` steps; each rank's peak RSS after each phase.
   The block shuffle spreads a rank's reads over the whole file, so a capped pass reads
   from everywhere;
4. once, on the smallest size, the same ranks with the split held in memory (what every
   rank did before this change), for the RSS baseline.

It prints one table: preprocessing rows/s and peak RSS; loader and training samples/s
and their ratio; peak RSS per rank. Generated data lives under ``--work`` (delete it
afterwards). The machine it ran on is noted in docs/BENCHMARKS.md.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_data_scale.py --sizes 10000000,50000000 \\
        --work /work/tmp13/scale --loader_steps 500 --train_steps 100

Without flags (as ``make bench`` runs it): 200k rows under ``.cache/``, 100 loader and 20
training steps.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
HASH_SIZE = 100_000

from benchmarks.tools.claims import claim  # noqa: E402
from dlrm_multiepoch.testing.ranks import quiet_rank_logs  # noqa: E402


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(cmd: List[str], env: Dict[str, str]) -> Dict[str, float]:
    """Run ``cmd``; its wall time and peak RSS (MB) of that child alone."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"failed ({status}): {' '.join(cmd)}")
    return {"seconds": time.perf_counter() - start, "peak_rss_mb": usage.ru_maxrss / 1024}


def worker(args: argparse.Namespace) -> None:
    """One rank: loader alone, then training fed by the loader (launched by torchrun)."""
    import itertools

    import torch.distributed as dist

    from dlrm_multiepoch.data.config import DataConfig
    from dlrm_multiepoch.distributed import init_distributed
    from dlrm_multiepoch.models.config import ModelConfig
    from dlrm_multiepoch.train.config import TrainConfig
    from dlrm_multiepoch.train.build import build_loader
    from dlrm_multiepoch.train.trainer import Trainer

    quiet_rank_logs()
    env = init_distributed()
    cfg = TrainConfig.from_flags(
        data=DataConfig(dataset="criteo", data_path=args.data),
        model=ModelConfig(embedding_dim=16),
        batch_size=args.batch_size,
        train_eval_rows=1000,
        limit_train_batches=args.train_steps,
        progress_bar=False,
        checkpoint=False,
        tensorboard_dir=str(Path(args.data).parent / "runs"),
        run_name=f"bench-{os.getpid()}",
    )
    trainer = Trainer(cfg, env)
    if args.in_memory:  # the split as every rank held it before: all of it, in memory
        train = trainer.data.splits["train"]
        trainer.data.splits["train"] = train.read(0, len(train))
        trainer.train_loader = build_loader(cfg, trainer.data, "train", env, shuffle=True)
    setup_rss = _rss_mb()
    loader = build_loader(cfg, trainer.data, "train", env, shuffle=True)
    loader.set_epoch(1)
    dist.barrier()
    start = time.perf_counter()
    rows = sum(int(b.weights.sum()) for b in itertools.islice(iter(loader), args.loader_steps))
    loader_seconds = time.perf_counter() - start
    loader_rss = _rss_mb()
    dist.barrier()
    start = time.perf_counter()
    trainer.train_epoch(0)
    train_seconds = time.perf_counter() - start
    result = {
        "rank": env.rank,
        "loader_samples_per_s": rows / loader_seconds,
        "train_samples_per_s": args.train_steps * args.batch_size / env.world_size / train_seconds,
        "rss_setup_mb": setup_rss,
        "rss_after_loader_mb": loader_rss,
        "rss_after_train_mb": _rss_mb(),
    }
    everything = [None] * env.world_size
    dist.all_gather_object(everything, result)
    if env.is_main:
        Path(args.result).write_text(json.dumps(everything))
    dist.barrier()
    dist.destroy_process_group()


def run_ranks(data: Path, args: argparse.Namespace, in_memory: bool) -> List[Dict[str, float]]:
    result = data.parent / f"ranks-{data.name}-{int(in_memory)}.json"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__,
        "--worker", "--data", str(data), "--result", str(result), "--batch_size", str(args.batch_size),
        "--loader_steps", str(args.loader_steps), "--train_steps", str(args.train_steps),
    ] + (["--in_memory"] if in_memory else [])  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    _child(cmd, env)
    return json.loads(result.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Quick defaults for `make bench`; docs/BENCHMARKS.md gives the sizes of the documented figures.
    parser.add_argument("--sizes", default="200000")
    parser.add_argument("--work", default=str(REPO / ".cache" / "bench_data_scale"))
    parser.add_argument("--batch_size", type=int, default=4096)
    parser.add_argument("--loader_steps", type=int, default=100)
    parser.add_argument("--train_steps", type=int, default=20)
    parser.add_argument("--skip_in_memory", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--in_memory", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    rows_out = []
    for n in [int(s) for s in args.sizes.split(",")]:
        tsv, folder = work / f"criteo_{n}.tsv", work / f"criteo_{n}"
        if not tsv.exists():
            _child([sys.executable, str(REPO / "benchmarks" / "tools" / "make_synthetic_criteo.py"), "--rows", str(n),
                    "--out", str(tsv)], env)  # fmt: skip
        prep = {}
        if not (folder / "meta.json").exists():
            prep = _child([sys.executable, "-m", "dlrm_multiepoch.cli", "preprocess", "--dataset", "criteo",
                           "--data_path", str(tsv), "--output", str(folder),
                           "--criteo_hash_size", str(HASH_SIZE)], env)  # fmt: skip
            print(f"{n:,} rows: preprocessed in {prep['seconds']:.0f}s, peak RSS {prep['peak_rss_mb']:.0f} MB")
        ranks = run_ranks(folder, args, in_memory=False)
        rows_out.append((n, "streamed (column files)", prep, ranks))
        if not args.skip_in_memory and n == min(int(s) for s in args.sizes.split(",")):
            rows_out.append((n, "in memory (before)", {}, run_ranks(folder, args, in_memory=True)))
    print(f"\nglobal batch {args.batch_size}, 2 gloo ranks, OMP_NUM_THREADS=1; loader {args.loader_steps} steps, "
          f"training {args.train_steps} steps")  # fmt: skip
    print("| rows | split | preprocess rows/s | preprocess peak RSS | loader samples/s | train samples/s | "
          "loader / train | peak RSS per rank: setup / loader / train |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for n, how, prep, ranks in rows_out:
        loader = sum(r["loader_samples_per_s"] for r in ranks)
        train = sum(r["train_samples_per_s"] for r in ranks)
        rss = " / ".join(
            f"{max(r[k] for r in ranks):,.0f}" for k in ("rss_setup_mb", "rss_after_loader_mb", "rss_after_train_mb")
        )
        p_rate = f"{n / prep['seconds']:,.0f}" if prep else "-"
        p_rss = f"{prep['peak_rss_mb']:,.0f} MB" if prep else "-"
        ratio = f"{loader / train:.1f}x"
        print(f"| {n:,} | {how} | {p_rate} | {p_rss} | {loader:,.0f} | {train:,.0f} | {ratio} | {rss} MB |")
    n, _, _, ranks = [row for row in rows_out if row[1].startswith("streamed")][-1]
    loader, train = (sum(r[f"{k}_samples_per_s"] for r in ranks) for k in ("loader", "train"))
    claim(f"per-rank loader, {n:,} rows streamed: loader / training samples/s", loader / train)


if __name__ == "__main__":
    main()
