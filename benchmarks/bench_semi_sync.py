"""Samples/s and exposed communication wait: semi_sync vs sparse_dist, side by side.

Both pipelines train their own copy of the same sharded DLRM (same data, same seeds)
in the same 2 processes; epochs alternate between them so machine noise hits both.
Per contender: median samples/s over the timed epochs, and the time the main thread
spends blocked in communication waits, per step:

- ``fwd_wait``: waits on the output dist (pooled-embedding all-to-all) and on the
  input dist (KJT all-to-alls) — what the semi-sync schedule can hide;
- ``bwd``: the backward pass incl. its gradient all-to-all (not hidden by either).

TorchRec's ``TrainPipelineSemiSync`` is run when the device is CUDA; on CPU it fails
(``RuntimeError: unknown parameter type`` from ``record_stream``) and is reported so.

Run (glibc's mmap threshold pinned so large frees do not swing timings); the documented run, then CUDA::

    python benchmarks/bench_semi_sync.py --epochs 21 --contenders sparse_dist,semi_sync,semi_sync:nomeasure,semi_sync:exact
    torchrun --nproc_per_node 2 benchmarks/bench_semi_sync.py --epochs 21   # 2 nccl ranks

Without flags (``make bench``): 7 epochs of ``sparse_dist`` and ``semi_sync`` (2 gloo ranks).
"""

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 30))  # inherited by the spawned ranks

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torchrec.distributed import comm_ops  # noqa: E402
from torchrec.distributed import dist_data  # noqa: E402

from benchmarks.tools.claims import claim  # noqa: E402
from dlrm_multiepoch.data.loader import BatchLoader  # noqa: E402
from dlrm_multiepoch.distributed import init_distributed  # noqa: E402
from dlrm_multiepoch.pipeline import SemiSyncTrainPipeline, make_train_pipeline  # noqa: E402
from dlrm_multiepoch.testing.dlrm_job import build_job  # noqa: E402
from dlrm_multiepoch.testing.ranks import run_on_ranks  # noqa: E402

WAITS: Dict[str, float] = defaultdict(float)


def _timed(cls: type, method: str, key: str) -> None:
    original = getattr(cls, method)

    def wrapper(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            WAITS[key] += time.perf_counter() - t0

    setattr(cls, method, wrapper)


def _instrument() -> None:
    # Forward-side waits: output dist requests and the input dist's KJT all-to-alls.
    _timed(comm_ops.Request, "_wait_impl", "fwd_wait")
    _timed(dist_data.KJTAllToAllSplitsAwaitable, "_wait_impl", "fwd_wait")
    _timed(dist_data.KJTAllToAllTensorsAwaitable, "_wait_impl", "fwd_wait")
    _timed(torch.Tensor, "backward", "bwd")


def _bench(rank: int, world_size: int, args: argparse.Namespace) -> None:
    _instrument()
    names = args.contenders.split(",")
    job_kwargs = dict(
        num_rows=args.rows,
        table_sizes={"user": args.table_rows, "item": args.table_rows * 2, "age": 8},
        embedding_dim=args.dim,
        dense_arch=f"256,{args.dim}",
        over_arch="256,128",
    )
    if torch.cuda.is_available() and "torchrec_semi_sync" not in names:
        names.append("torchrec_semi_sync")  # runs only on CUDA
    jobs, pipelines = {}, {}
    for name in names:
        kind, _, variant = name.partition(":")
        jobs[name] = job = build_job(**job_kwargs)
        # "semi_sync:nomeasure": no staleness measurement; "semi_sync:exact": measured every step.
        extra = {"nomeasure": {"measure_staleness": False}, "exact": {"staleness_interval": 1}}.get(variant, {})
        pipelines[name] = make_train_pipeline(kind, job.model, job.optimizer, job.env.device, **extra)
    device = jobs[names[0]].env.device

    rates: Dict[str, List[float]] = defaultdict(list)
    waits: Dict[str, Dict[str, List[float]]] = defaultdict(lambda: defaultdict(list))
    for epoch in range(args.epochs):
        for name in names:
            loader = BatchLoader(jobs[name].data, "train", args.batch_size, rank, world_size, shuffle=True)
            loader.set_epoch(epoch)
            it, steps = iter(loader), 0
            WAITS.clear()
            dist.barrier()
            t0 = time.perf_counter()
            while True:
                try:
                    pipelines[name].progress(it)
                except StopIteration:
                    break
                steps += 1
            if device.type == "cuda":
                torch.cuda.synchronize()
            elapsed = torch.tensor([time.perf_counter() - t0, WAITS["fwd_wait"], WAITS["bwd"]])
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            if epoch == 0:
                continue  # warm-up epoch: tracing, allocator growth
            rates[name].append(len(jobs[name].data.splits["train"]) / elapsed[0].item())
            waits[name]["fwd_wait"].append(elapsed[1].item() / steps * 1e3)
            waits[name]["bwd"].append(elapsed[2].item() / steps * 1e3)
    if rank != 0:
        return
    print(f"device {device}, 2 ranks, global batch {args.batch_size}, {steps} steps/epoch, "
          f"{args.epochs - 1} timed epochs per contender (alternating), medians:")
    base = statistics.median(rates[names[0]])
    base_wait = statistics.median(waits[names[0]]["fwd_wait"])
    for name in names:
        rate = statistics.median(rates[name])
        fwd = statistics.median(waits[name]["fwd_wait"])
        bwd = statistics.median(waits[name]["bwd"])
        print(
            f"  {name:20s} {rate:10.0f} samples/s  ratio {rate / base:5.3f}  "
            f"exposed fwd comm wait {fwd:7.3f} ms/step ({fwd / base_wait:5.1%} of {names[0]})  "
            f"backward {bwd:7.2f} ms/step"
        )
    if "semi_sync" in rates and "sparse_dist" in rates:
        claim("semi-sync pipeline: samples/s, semi_sync / sparse_dist",
              statistics.median(rates["semi_sync"]) / statistics.median(rates["sparse_dist"]))
    if "semi_sync:nomeasure" in rates:  # what measuring costs, per step, against not measuring
        bare = statistics.median(rates["semi_sync:nomeasure"])
        for name in ("semi_sync", "semi_sync:exact"):
            if name in rates:
                cost = bare / statistics.median(rates[name]) - 1
                print(f"  staleness measurement cost, {name}: {cost:+.1%} of a step")
    for name in names:
        if isinstance(pipelines[name], SemiSyncTrainPipeline) and pipelines[name].measure_staleness:
            print(f"  {name}: mean stale-row fraction {pipelines[name].mean_stale_fraction:.3f}")
    if device.type != "cuda":
        print("  torchrec_semi_sync: not run (CPU: RuntimeError 'unknown parameter type' in record_stream)")


def _torchrun_entry(args: argparse.Namespace) -> None:
    env = init_distributed()
    _bench(env.rank, env.world_size, args)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Quick defaults for `make bench` (short runs are noisy: quote only the documented run);
    # docs/BENCHMARKS.md gives the sizes of the documented figures.
    parser.add_argument("--epochs", type=int, default=7, help="epochs per contender; the first is not timed")
    parser.add_argument("--rows", type=int, default=65536, help="synthetic rows (3/4 train)")
    parser.add_argument("--batch_size", type=int, default=2048, help="global batch size")
    parser.add_argument("--table_rows", type=int, default=100_000, help="rows of the user table (item: 2x)")
    parser.add_argument("--dim", type=int, default=64, help="embedding dimension")
    parser.add_argument(
        "--contenders",
        default="sparse_dist,semi_sync",
        help="the first is the baseline; semi_sync:nomeasure / semi_sync:exact measure staleness never / every step",
    )
    args = parser.parse_args()
    if "RANK" in os.environ:  # launched by torchrun/torchx (needed for nccl on CUDA)
        _torchrun_entry(args)
    else:  # CPU: 2 gloo ranks spawned here
        run_on_ranks(_bench, 2, args)


if __name__ == "__main__":
    main()
