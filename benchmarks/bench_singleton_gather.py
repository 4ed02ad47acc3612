"""Singleton-bag gather vs the pooled paths, forward and forward+backward.

One table, one feature with exactly one id per bag. Contenders, timed side by side in one
process (interleaved repeats, medians):

- ``singleton``: ``SingletonEmbeddingBagCollection`` (our module; an unpooled gather)
- ``ebc``: TorchRec's unsharded ``EmbeddingBagCollection`` (the stock module)
- ``tbe``: FBGEMM's table-batched embedding bag (what a sharded EBC runs), sum pooling,
  in-backward SGD
- ``F.embedding_bag`` and ``index_select``: the bare kernels under the two modules
- ``memcpy``: a plain copy of the output's size, the physical reference

Prints time, achieved bytes/s (rows read + output written, 2 * B * D * 4 bytes) and the
ratio to the EBC time. Pins glibc malloc thresholds (re-exec) since the backward allocates
a dense table gradient.

    python benchmarks/bench_singleton_gather.py --batches 1024 16384 131072
"""

import argparse
import os
import statistics
import sys
import time
from typing import Callable, Dict, List

if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
    os.environ.update(MALLOC_MMAP_THRESHOLD_="4294967296", MALLOC_TRIM_THRESHOLD_="4294967296")
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from fbgemm_gpu.split_embedding_configs import EmbOptimType  # noqa: E402
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode  # noqa: E402
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (  # noqa: E402
    ComputeDevice,
    SplitTableBatchedEmbeddingBagsCodegen,
)
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.tools.claims import claim  # noqa: E402
from dlrm_multiepoch.lookup import SingletonEmbeddingBagCollection  # noqa: E402
from dlrm_multiepoch.testing.ranks import quiet_rank_logs  # noqa: E402


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _medians(fns: Dict[str, Callable[[], None]], repeats: int, device: torch.device) -> Dict[str, float]:
    times: Dict[str, List[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1024, 16384, 131072])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    quiet_rank_logs()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    print(f"device={device} rows={args.rows} dim={args.dim} threads={args.threads} torch={torch.__version__}")

    torch.manual_seed(0)
    config = EmbeddingBagConfig(name="item", embedding_dim=args.dim, num_embeddings=args.rows, feature_names=["item"])
    ebc = EmbeddingBagCollection([config], device=device)
    single = SingletonEmbeddingBagCollection.from_embedding_bag_collection(ebc, ["item"])
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        [(args.rows, args.dim, EmbeddingLocation.HOST if device.type == "cpu" else EmbeddingLocation.DEVICE,
          ComputeDevice.CPU if device.type == "cpu" else ComputeDevice.CUDA)],
        optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.0, pooling_mode=PoolingMode.SUM, device=device,
    )
    weight = ebc.embedding_bags["item"].weight

    print("batch | pass | contender | ms | GB/s | x EBC time")
    for batch in args.batches:
        ids = torch.randint(0, args.rows, (batch,), device=device)
        kjt = KeyedJaggedTensor(keys=["item"], values=ids, lengths=torch.ones(batch, dtype=torch.long, device=device))
        offsets = torch.arange(batch + 1, device=device)
        src = torch.randn(batch, args.dim, device=device)
        dst = torch.empty_like(src)
        grad = torch.randn(batch, args.dim, device=device)
        forward = {
            "memcpy": lambda: dst.copy_(src),
            "index_select": lambda: torch.index_select(weight.detach(), 0, ids),
            "F.embedding_bag": lambda: F.embedding_bag(ids, weight.detach(), offsets, mode="sum", include_last_offset=True),
            "tbe": lambda: tbe(ids, offsets),
            "ebc": lambda: ebc(kjt).values(),
            "singleton": lambda: single(kjt).values(),
        }

        def fwd_bwd(module: torch.nn.Module) -> Callable[[], None]:
            def step() -> None:
                module.zero_grad(set_to_none=True)
                module(kjt).values().backward(grad)

            return step

        def tbe_step() -> None:
            tbe(ids, offsets).backward(grad)

        backward = {"tbe": tbe_step, "ebc": fwd_bwd(ebc), "singleton": fwd_bwd(single)}
        for label, fns in (("fwd", forward), ("fwd+bwd", backward)):
            with torch.no_grad() if label == "fwd" else torch.enable_grad():
                t = _medians(fns, args.repeats, device)
            nbytes = 2 * batch * args.dim * 4
            for name, seconds in t.items():
                print(
                    f"{batch:6d} | {label:7s} | {name:15s} | {seconds * 1e3:8.3f} | {nbytes / seconds / 1e9:6.2f} | "
                    f"{seconds / t['ebc']:.2f}x"
                )
            if batch == max(args.batches):
                claim(f"singleton gather, batch {batch}, {label}: EBC / singleton time", t["ebc"] / t["singleton"])


if __name__ == "__main__":
    main()
