"""Step-time and memory overhead of FrequencyAdaptiveLR vs the plain fused optimizer, 2 gloo ranks.

Runs the app's default model (``build_dlrm`` with ``ModelConfig()``, the app's default
sharding, fused row-wise Adagrad tables, dense Adam) on the app's Book-Crossing data
under ``TrainPipelineSparseDist``. Contenders run interleaved, round after round, in a
rotating order, on the same model and batches:

- ``plain``:  TorchRec's fused optimizer as is (FALR hooks removed);
- ``falr``:   ``FrequencyAdaptiveLR`` (log, ref = the table's max count): counting in a
  forward hook, the touched rows' fused update rescaled around the TBE backward (gather
  before, gather + lerp + scatter after, for every looked-up id, duplicates included: no
  host sync on CUDA);
- ``falr_unique``: the same exact rescaling on de-duplicated rows (``torch.unique``
  first: fewer rows copied, one sort more, a host sync on CUDA). The other exact method.

Prints median and IQR of per-step wall and CPU time (rank 0) per contender, the median
over rounds of each FALR variant / plain, and the counters' memory next to the tables'.
glibc's malloc thresholds are pinned; each rank runs one thread.

Usage::

    python benchmarks/bench_falr.py --rounds 20 --steps 40 [--batch_size 1024] [--embedding_dim 16]   # default: 6 x 20
"""

import argparse
import os
import sys
from itertools import cycle, islice

os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 30))
os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(1 << 30))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist  # noqa: E402

from benchmarks.tools.claims import claim  # noqa: E402
from benchmarks.tools.interleaved import print_timings, time_interleaved  # noqa: E402
from dlrm_multiepoch.data.config import DataConfig  # noqa: E402
from dlrm_multiepoch.data.load import load_dataset  # noqa: E402
from dlrm_multiepoch.data.loader import BatchLoader  # noqa: E402
from dlrm_multiepoch.distributed import init_distributed  # noqa: E402
from dlrm_multiepoch.models import ModelConfig, build_dlrm  # noqa: E402
from dlrm_multiepoch.optim.falr import FALRConfig, FrequencyAdaptiveLR, falr_memory_fraction  # noqa: E402
from dlrm_multiepoch.optim.shards import table_shards  # noqa: E402
from dlrm_multiepoch.testing.ranks import run_on_ranks  # noqa: E402
from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, shard_model  # noqa: E402

MODES = ("plain", "falr", "falr_unique")


def _unique_row_sets(k, table, flat, scale):
    """The de-duplicating variant of ``FrequencyAdaptiveLR._row_sets`` (uniform-width kernels)."""
    rows, first = torch.unique(flat, return_inverse=True)
    index = torch.empty_like(rows).scatter_(0, first, torch.arange(flat.numel()))
    return [(k.rows_view, rows, scale[index])]


class UniqueFALR(FrequencyAdaptiveLR):
    _row_sets = staticmethod(_unique_row_sets)


def _bench(rank: int, world_size: int, args: argparse.Namespace) -> None:
    env = init_distributed()
    data = load_dataset(DataConfig(), log=lambda _: None)
    torch.manual_seed(0)
    dim = args.embedding_dim
    model = build_dlrm(data, ModelConfig(embedding_dim=dim, dense_arch_layer_sizes=f"64,{dim}"), env.device)
    apply_embedding_optimizer(model, "rowwise_adagrad", 0.05)
    dmp = shard_model(model, env)
    opt = build_optimizer(dmp, 1e-3)
    falrs = {"falr": FrequencyAdaptiveLR(dmp, FALRConfig("log")), "falr_unique": UniqueFALR(dmp, FALRConfig("log"))}
    for f in falrs.values():
        f.remove()
    if rank == 0:
        f = falrs["falr"]
        states = sum(t.numel() * t.element_size() for s in table_shards(dmp) for t in s.optimizer_states())
        print(f"plan: {dict((t, p.sharding_type) for m in dmp.plan.plan.values() for t, p in m.items())}")
        print(
            f"memory, rank 0: counters {f.memory_bytes():,} B = {falr_memory_fraction(f, dmp):.2%} of the local "
            f"table shards (dim {dim}, fp32), {f.memory_bytes() / max(states, 1):.0%} of the row-wise Adagrad state"
        )
    loader = BatchLoader(data, "train", args.batch_size, rank, world_size, shuffle=True)
    batches = cycle(list(islice(loader, args.batches)))
    pipeline = TrainPipelineSparseDist(dmp, opt, env.device)
    timings = time_interleaved(
        lambda: pipeline.progress(batches),
        MODES,
        enter=lambda mode: falrs[mode].attach() if mode != "plain" else None,
        leave=lambda mode: falrs[mode].remove() if mode != "plain" else None,
        rounds=args.rounds,
        steps=args.steps,
    )
    if rank == 0:
        ratios = print_timings(timings, ratios={f"{m} / plain - 1": (m, "plain") for m in MODES[1:]})
        claim("FALR: CPU time per step, falr / plain (its overhead)", ratios["cpu"]["falr / plain - 1"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Quick defaults for `make bench`; docs/BENCHMARKS.md gives the sizes of the documented figures.
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=1024, help="global batch size")
    parser.add_argument("--embedding_dim", type=int, default=16, help="table dimension (the app's default: 16)")
    parser.add_argument("--batches", type=int, default=64, help="distinct batches cycled through")
    args = parser.parse_args()
    run_on_ranks(_bench, 2, args)
