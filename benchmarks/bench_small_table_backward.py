"""Dense-GEMM (one-hot) vs stock scatter-add embedding-bag backward, across table sizes.

Runs both side by side in one process (interleaved repeats, medians) for each row count
and thread count, prints time per forward+backward and the ratio dense/stock, and the
largest row count where the dense backward wins: the crossover that sets
``DENSE_BACKWARD_MAX_ROWS`` for this device (dlrm_multiepoch/lookup/small_table.py).

glibc's malloc settings swing dense-gradient benchmarks by up to 3x; the script re-execs
itself with MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ pinned unless already set.

    python benchmarks/bench_small_table_backward.py --lookups 1048576 --rows 8 16 32 64 128 512 --threads 1 2 --repeats 5
"""

import argparse
import os
import statistics
import sys
import time
from typing import Callable, List

if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
    os.environ.update(MALLOC_MMAP_THRESHOLD_="4294967296", MALLOC_TRIM_THRESHOLD_="4294967296")
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.tools.claims import claim  # noqa: E402
from dlrm_multiepoch.lookup import dense_grad_embedding_bag  # noqa: E402
from dlrm_multiepoch.lookup.small_table import DENSE_BACKWARD_MAX_ROWS  # noqa: E402


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_times(fns: List[Callable[[], None]], repeats: int, device: torch.device) -> List[float]:
    times: List[List[float]] = [[] for _ in fns]
    for fn in fns:  # warm-up
        fn()
    for _ in range(repeats):
        for i, fn in enumerate(fns):  # interleaved: both see the same machine noise
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # Quick defaults for `make bench`; docs/BENCHMARKS.md gives the sizes of the documented figures.
    parser.add_argument("--lookups", type=int, default=1 << 18, help="ids per step (singleton bags)")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--rows", type=int, nargs="+", default=[8, 32, 128, 512])
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--bag-size", type=int, default=1, help="ids per bag")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"device={device} lookups={args.lookups} dim={args.dim} bag_size={args.bag_size} torch={torch.__version__}")
    print("threads | rows | stock fwd+bwd ms | dense fwd+bwd ms | dense/stock")
    gen = torch.Generator().manual_seed(0)
    bags = args.lookups // args.bag_size
    offsets = (torch.arange(bags) * args.bag_size).to(device)
    at_max = DENSE_BACKWARD_MAX_ROWS[device.type]  # the largest table that takes the dense backward here
    for threads in args.threads if device.type == "cpu" else [0]:
        if threads:
            torch.set_num_threads(threads)
        best = 0
        for rows in args.rows:
            ids = torch.randint(0, rows, (bags * args.bag_size,), generator=gen).to(device)
            weight = torch.randn(rows, args.dim, generator=gen).to(device).requires_grad_()
            grad = torch.randn(bags, args.dim, generator=gen).to(device)

            def stock() -> None:
                weight.grad = None
                F.embedding_bag(ids, weight, offsets, mode="sum").backward(grad)

            def dense() -> None:
                weight.grad = None
                dense_grad_embedding_bag(weight, ids, offsets, "sum").backward(grad)

            t_stock, t_dense = _median_times([stock, dense], args.repeats, device)
            ratio = t_dense / t_stock
            if ratio < 1.0 and rows > best:
                best = rows
            print(f"{threads:7d} | {rows:4d} | {t_stock * 1e3:16.2f} | {t_dense * 1e3:16.2f} | {ratio:.2f}x")
            if rows == at_max:
                claim(f"dense backward at the cut-off, {rows} rows, {threads or 'all'} thread(s): stock / dense", 1 / ratio)
        print(f"threads={threads}: dense backward wins up to {best} rows (0 = never)")


if __name__ == "__main__":
    main()
