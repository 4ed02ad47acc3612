"""Step time of frozen tables vs joint training, and the wrapper's overhead, on 2 gloo ranks.

Runs the default model (``build_dlrm`` with ``ModelConfig()``, tables sharded table-wise/
row-wise with fused row-wise Adagrad, dense Adam) under ``TrainPipelineSparseDist``.
Three contenders run interleaved, round after round, on the same model and data:

- ``bare``:   no wrapper (TorchRec as is);
- ``joint``:  ``FreezeScheduleWrapper`` with the ``joint`` preset (hooks installed, nothing frozen);
- ``frozen``: the ``frozen`` preset (every table's output cut from the graph).

Prints the median per-step time (rank 0) of each and the ratios bare/frozen (speed-up of a frozen
epoch) and joint/bare (wrapper overhead). glibc's malloc thresholds are pinned
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) because dense-gradient
benchmarks swing with them.

Usage::

    python benchmarks/bench_freeze.py [--rounds 7] [--steps 20] [--batch_size 1024]
"""

import argparse
import os
import statistics
import sys
import time
from itertools import cycle

os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 30))
os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(1 << 30))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist  # noqa: E402

from dlrm_multiepoch.data.dataset import BatchLoader  # noqa: E402
from dlrm_multiepoch.data.synthetic import synthetic_data  # noqa: E402
from dlrm_multiepoch.distributed import init_distributed  # noqa: E402
from dlrm_multiepoch.freeze import FreezeScheduleWrapper  # noqa: E402
from dlrm_multiepoch.models.dlrm import ModelConfig, build_dlrm  # noqa: E402
from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, shard_model  # noqa: E402
from tests.multiprocess import run_on_ranks  # noqa: E402


def _bench(rank: int, world_size: int, rounds: int, steps: int, batch_size: int) -> None:
    env = init_distributed()
    torch.manual_seed(0)
    data = synthetic_data(32768, {"user": 20000, "item": 50000, "author": 10000, "age": 8})
    model = build_dlrm(data, ModelConfig(), env.device)
    apply_embedding_optimizer(model, "rowwise_adagrad", 0.05)
    dmp = shard_model(model, env)
    opt = build_optimizer(dmp, 1e-3)
    loader = BatchLoader(data, "train", batch_size, rank, world_size, shuffle=True)
    pipeline = TrainPipelineSparseDist(dmp, opt, env.device)
    batches = cycle(list(loader))
    times = {"bare": [], "joint": [], "frozen": []}
    for _ in range(rounds):
        for mode in times:
            wrapper = None if mode == "bare" else FreezeScheduleWrapper(dmp, mode, steps_per_epoch=10**6, num_epochs=1)
            for _ in range(3):  # warm-up, and flush batches queued under the previous mode
                pipeline.progress(batches)
            dist.barrier()
            for _ in range(steps):
                # Per-step times: on a shared machine the median step resists bursts of load.
                start = time.perf_counter()
                pipeline.progress(batches)
                if wrapper is not None:
                    wrapper.step()
                times[mode].append(time.perf_counter() - start)
            if wrapper is not None:
                wrapper.remove()
    if rank == 0:
        med = {m: statistics.median(t) for m, t in times.items()}
        for m, t in times.items():
            q = statistics.quantiles(t, n=4)
            print(f"{m:7s} median {med[m] * 1e3:7.2f} ms/step  (quartiles {q[0] * 1e3:.2f}-{q[2] * 1e3:.2f}, {len(t)} steps)")
        print(f"frozen speed-up (bare / frozen step time): {med['bare'] / med['frozen']:.2f}x")
        print(f"wrapper overhead (joint / bare step time): {(med['joint'] / med['bare'] - 1) * 100:+.1f}%")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=1024, help="global batch size")
    args = parser.parse_args()
    run_on_ranks(_bench, 2, args.rounds, args.steps, args.batch_size)
