"""SemiSyncTrainPipeline on 2 gloo ranks: bitwise against TorchRec and a stale reference loop."""

import itertools
import math
from typing import Dict, List, Optional, Sequence, Set

import numpy as np
import pytest
import torch
import torch.distributed as dist

from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.data.loader import BatchLoader
from dlrm_multiepoch.freeze import FreezeScheduleWrapper
from dlrm_multiepoch.pipeline import PIPELINES, SemiSyncTrainPipeline, StalenessMeter, make_train_pipeline
from dlrm_multiepoch.pipeline.staleness import row_overlap
from dlrm_multiepoch.testing.dlrm_job import TABLE_SIZES, Job, build_job
from dlrm_multiepoch.testing.ranks import run_on_ranks
from tests.sharding_helpers import snapshot, table_shards
from torchrec.distributed.train_pipeline.train_pipelines import TrainPipelineSparseDist

GLOBAL_BATCH = 256  # 2048 rows, 1536 in train: 6 steps per epoch


ALL = frozenset(TABLE_SIZES)


class FreezeByDetach:
    """Freezes tables the way the freeze-schedule wrapper does: detach their embeddings.

    ``SparseArch`` returns ``[B, features, D]`` with one feature per table, in table order.
    """

    def __init__(self, job: Job) -> None:
        self.frozen: Set[str] = set()
        job.model.module.model.sparse_arch.register_forward_hook(self._hook)

    def _hook(self, module, inputs, out: torch.Tensor) -> Optional[torch.Tensor]:
        if not self.frozen:
            return None
        # Index per column (not split()): the pipeline fx-traces the model with this hook on.
        cols = [out[:, j : j + 1] for j in range(len(TABLE_SIZES))]
        return torch.cat([c.detach() if t in self.frozen else c for t, c in zip(TABLE_SIZES, cols)], dim=1)


def _run_pipeline(pipeline, job: Job, rank: int, freeze: FreezeByDetach, schedule: Sequence[Set[str]]) -> Dict[str, list]:
    """Train one epoch per entry of ``schedule`` (the tables frozen in it); collect per-step values."""
    loader = BatchLoader(job.data, "train", GLOBAL_BATCH, rank, 2, shuffle=True)
    rec: Dict[str, list] = {"loss": [], "stale": [], "samples": [], "steps": [], "weights": []}
    for epoch, frozen in enumerate(schedule):
        loader.set_epoch(epoch)
        freeze.frozen = set(frozen)
        it, steps, samples = iter(loader), 0, torch.zeros(())
        while True:
            try:
                out = pipeline.progress(it)
            except StopIteration:
                break
            steps += 1
            samples += out.weights.sum()
            rec["loss"].append(out.loss.clone())
            if isinstance(pipeline, SemiSyncTrainPipeline):
                rec["stale"].append(pipeline.stale_fraction)
        dist.all_reduce(samples)
        rec["samples"].append(int(samples.item()))
        rec["steps"].append(steps)
        rec["weights"].append(snapshot(job.model))
    return rec


def _run_reference(job: Job, rank: int, freeze: FreezeByDetach, schedule: Sequence[Set[str]], warmup: int) -> List[torch.Tensor]:
    """Plain loop, no pipeline: batch B is looked up with the tables as they were before B-1's update.

    The gradient of a pooled lookup does not depend on the table values, so looking up
    with the old values and then restoring the current ones before backward is exactly
    "stale forward, update applied to the current tables".
    """
    loader = BatchLoader(job.data, "train", GLOBAL_BATCH, rank, 2, shuffle=True)
    # Swap values through ``.data``: FBGEMM saved the weights for backward, and a
    # tracked in-place copy would bump their version counter (as its fused update does not).
    live = {k: v.data for k, v in table_shards(job.model).items()}
    losses: List[torch.Tensor] = []
    index = 0
    for epoch, frozen in enumerate(schedule):
        loader.set_epoch(epoch)
        freeze.frozen = set(frozen)
        before_previous_update: Optional[Dict[str, torch.Tensor]] = None  # a new epoch starts fresh
        for batch in loader:
            current = {k: v.clone() for k, v in live.items()}
            stale = before_previous_update is not None and index >= warmup
            if stale:
                for k, v in live.items():
                    v.copy_(before_previous_update[k])
            loss, out = job.model(batch)
            if stale:
                for k, v in live.items():
                    v.copy_(current[k])
            job.optimizer.zero_grad()
            loss.backward()
            job.optimizer.step()
            losses.append(out.loss.clone())
            before_previous_update = current
            index += 1
    return losses


def _expected_stale_fractions(
    data: InteractionData, schedule: Sequence[Set[str]], warmup: int, world_size: int
) -> List[float]:
    """Stale-row fraction per step from the data alone: rows of global batch B (every
    rank's part of it) that B-1 updated."""
    loaders = [BatchLoader(data, "train", GLOBAL_BATCH, r, world_size, shuffle=True) for r in range(world_size)]
    out: List[float] = []
    index = 0
    for epoch, frozen in enumerate(schedule):
        for loader in loaders:
            loader.set_epoch(epoch)
        previous = None
        for parts in zip(*loaders):
            kjts = [batch.sparse_features.to_dict() for batch in parts]
            rows = {(data.table_of(f).name, int(i)) for kjt in kjts for f, jt in kjt.items() for i in jt.values()}
            if previous is None or index < warmup:
                out.append(0.0)
            else:
                out.append(len({r for r in rows & previous if r[0] not in frozen}) / len(rows))
            previous = rows
            index += 1
    return out


def _assert_same(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor], what: str) -> None:
    assert a.keys() == b.keys()
    bad = [k for k in a if not torch.equal(a[k], b[k])]
    assert not bad, f"{what}: {len(bad)} tensors differ, e.g. {bad[:3]}"


def _check_sync_equivalence(rank: int, world_size: int) -> None:
    schedule = [ALL, set()]  # tables frozen in epoch 1, trained in epoch 2
    job = build_job()
    freeze = FreezeByDetach(job)
    tables_at_start = snapshot(job.model)
    ref = _run_pipeline(TrainPipelineSparseDist(job.model, job.optimizer, job.env.device), job, rank, freeze, schedule)
    ref_after_frozen, ref_after = ref["weights"]
    tables = [k for k in tables_at_start if "embedding_bags" in k]
    assert all(torch.equal(tables_at_start[k], ref_after_frozen[k]) for k in tables), "freeze hook did not freeze"
    assert not all(torch.equal(ref_after_frozen[k], ref_after[k]) for k in tables)

    # staleness=0: bitwise TrainPipelineSparseDist, through a freeze change at the epoch boundary.
    job0 = build_job()
    sync = SemiSyncTrainPipeline(job0.model, job0.optimizer, job0.env.device, staleness=0)
    rec0 = _run_pipeline(sync, job0, rank, FreezeByDetach(job0), schedule)
    assert torch.equal(torch.stack(rec0["loss"]), torch.stack(ref["loss"]))
    _assert_same(rec0["weights"][0], ref_after_frozen, "staleness=0 vs TrainPipelineSparseDist, epoch 1")
    _assert_same(rec0["weights"][1], ref_after, "staleness=0 vs TrainPipelineSparseDist, epoch 2")
    assert math.isnan(rec0["stale"][0]) and rec0["stale"][1:] == [0.0] * 11  # sampled from step 1 (one in 20)
    assert rec0["samples"] == [len(job0.data.splits["train"])] * 2 and rec0["steps"] == [6, 6]

    # staleness=1 while frozen: lookups overlap freely, are exact, and record 0 (detected
    # from the absent gradient: no frozen_tables hint given).
    job1 = build_job()
    semi = SemiSyncTrainPipeline(job1.model, job1.optimizer, job1.env.device, staleness=1)
    rec1 = _run_pipeline(semi, job1, rank, FreezeByDetach(job1), schedule[:1])
    assert torch.equal(torch.stack(rec1["loss"]), torch.stack(ref["loss"][:6]))
    _assert_same(rec1["weights"][0], ref_after_frozen, "frozen staleness=1 vs TrainPipelineSparseDist")
    assert math.isnan(rec1["stale"][0]) and rec1["stale"][1:] == [0.0] * 5 and semi.mean_stale_fraction == 0.0

    # Short segments (as the trainer's mid-epoch evaluations make): every batch runs once.
    loader = BatchLoader(job1.data, "train", GLOBAL_BATCH, rank, 2, shuffle=True)
    for n in (1, 2, 3):
        it, steps = itertools.islice(iter(loader), n), 0
        with pytest.raises(StopIteration):
            while True:
                semi.progress(it)
                steps += 1
        assert steps == n


def _check_stale_reference(rank: int, world_size: int) -> None:
    warmup = 2
    # trained; all frozen; "age" frozen (told via frozen_tables, its rows never stale)
    schedule = [set(), ALL, {"age"}]
    ref_job = build_job()
    ref_freeze = FreezeByDetach(ref_job)
    ref_losses = _run_reference(ref_job, rank, ref_freeze, schedule, warmup)

    job = build_job()
    freeze = FreezeByDetach(job)
    pipeline = SemiSyncTrainPipeline(
        job.model, job.optimizer, job.env.device, staleness=1, warmup_batches=warmup,
        frozen_tables=lambda: freeze.frozen, staleness_interval=1,  # exact: every step measured
    )
    rec = _run_pipeline(pipeline, job, rank, freeze, schedule)
    assert rec["steps"] == [6, 6, 6]
    assert rec["samples"] == [len(job.data.splits["train"])] * 3
    assert torch.equal(torch.stack(rec["loss"]), torch.stack(ref_losses))
    _assert_same(snapshot(job.model), snapshot(ref_job.model), "staleness=1 vs stale reference loop")

    # The synchronous pipeline gives different results: the reference really is stale.
    sync_job = build_job()
    sync = _run_pipeline(
        TrainPipelineSparseDist(sync_job.model, sync_job.optimizer, sync_job.env.device),
        sync_job, rank, FreezeByDetach(sync_job), schedule,
    )
    assert not torch.equal(torch.stack(sync["loss"]), torch.stack(ref_losses))

    expected = _expected_stale_fractions(job.data, schedule, warmup, world_size)
    assert rec["stale"] == expected, (rec["stale"], expected)
    assert pipeline.mean_stale_fraction == pytest.approx(sum(expected) / len(expected), rel=1e-12)
    # Zero exactly in warm-up, at epoch starts and while frozen; real overlap otherwise.
    assert expected[:warmup] == [0.0] * warmup and expected[6] == expected[12] == 0.0
    assert expected[6:12] == [0.0] * 6 and all(e > 0 for e in expected[warmup:6] + expected[13:])

    # Issue 38, row 2: a short run at the default interval (one step in 20) measures step 1, the first that can be
    # stale; sampling step 0 (always fresh) made it say 0.0, "never stale".
    short_job = build_job()
    short = SemiSyncTrainPipeline(short_job.model, short_job.optimizer, short_job.env.device)
    _run_pipeline(short, short_job, rank, FreezeByDetach(short_job), [set()])
    fractions = _expected_stale_fractions(short_job.data, [set()], 0, world_size)
    assert short.staleness_meter.take_history() == [(1, fractions[1])] and fractions[1] > 0
    assert short.mean_stale_fraction == fractions[1]


def _check_freeze_schedule_wrapper(rank: int, world_size: int) -> None:
    """With the real FreezeScheduleWrapper ("delayed": tables frozen in epoch 1)."""
    results = {}
    for name in ("sparse_dist", "semi_sync"):
        job = build_job()
        freeze = FreezeScheduleWrapper(job.model, "delayed", 6, 2, optimizer=job.optimizer)
        pipeline = (
            TrainPipelineSparseDist(job.model, job.optimizer, job.env.device)
            if name == "sparse_dist"
            else SemiSyncTrainPipeline(
                job.model, job.optimizer, job.env.device, frozen_tables=freeze.frozen_tables, staleness_interval=5
            )
        )
        loader = BatchLoader(job.data, "train", GLOBAL_BATCH, rank, 2, shuffle=True)
        losses, stale, weights = [], [], []
        for epoch in range(2):
            loader.set_epoch(epoch)
            it = iter(loader)
            while True:
                try:
                    out = pipeline.progress(it)
                except StopIteration:
                    break
                freeze.step()
                losses.append(out.loss.clone())
                stale.append(getattr(pipeline, "stale_fraction", None))
            weights.append(snapshot(job.model))
        history = pipeline.staleness_meter.take_history() if name == "semi_sync" else None
        results[name] = (torch.stack(losses), stale, weights, history)
    (sync_losses, _, sync_weights, _), (losses, stale, weights, history) = results["sparse_dist"], results["semi_sync"]
    assert torch.equal(losses[:6], sync_losses[:6])
    _assert_same(weights[0], sync_weights[0], "frozen epoch: semi_sync vs sparse_dist")
    # Sampled every 5th step from step 1 (1, 6, 11): exactly the per-step values there; stale_fraction holds the last.
    expected = _expected_stale_fractions(job.data, [ALL, set()], 0, world_size)
    assert history == [(s, expected[s]) for s in (1, 6, 11)] and expected[11] > 0, (history, expected)
    assert math.isnan(stale[0]) and stale[1:] == [expected[1 + 5 * ((i - 1) // 5)] for i in range(1, 12)], (stale, expected)


def test_staleness0_and_frozen_match_sparse_dist():
    run_on_ranks(_check_sync_equivalence, 2)


def test_staleness1_matches_stale_reference_loop():
    run_on_ranks(_check_stale_reference, 2)


def test_with_freeze_schedule_wrapper():
    run_on_ranks(_check_freeze_schedule_wrapper, 2)


# -- single-process units ----------------------------------------------------------


def test_row_overlap_counts_distinct_rows():
    rng = np.random.default_rng(0)
    for _ in range(50):
        a = np.sort(rng.integers(0, 30, rng.integers(0, 40)))
        b = np.sort(rng.integers(0, 30, rng.integers(0, 40)))
        got = row_overlap(torch.from_numpy(a), torch.from_numpy(b)).tolist()
        assert got == [len(set(a) & set(b)), len(set(a))]


def test_meter_single_process():
    meter = StalenessMeter()
    assert math.isnan(meter.last) and math.isnan(meter.mean)
    meter.record(None, torch.device("cpu"))
    meter.record(meter.measure(torch.tensor([1.0, 4.0], dtype=torch.float64)), torch.device("cpu"))
    assert meter.last == 0.25 and meter.mean == 0.125 and meter.steps == 2
    assert meter.take_history() == [(0, 0.0), (1, 0.25)]
    assert meter.take_history() == []  # taken once
    meter.record(meter.measure(torch.tensor([3.0, 4.0], dtype=torch.float64)), torch.device("cpu"), step=40)
    assert meter.take_history() == [(40, 0.75)] and meter.mean == 1.0 / 3


def test_factory_rejects_bad_names_and_torchrec_semi_sync_on_cpu():
    model, opt = torch.nn.Linear(2, 2), None
    with pytest.raises(ValueError, match="--pipeline must be one of sparse_dist, semi_sync, torchrec_semi_sync"):
        make_train_pipeline("async", model, opt, torch.device("cpu"))
    with pytest.raises(ValueError, match="needs CUDA"):
        make_train_pipeline("torchrec_semi_sync", model, opt, torch.device("cpu"))
    assert PIPELINES == ("sparse_dist", "semi_sync", "torchrec_semi_sync")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(staleness=2), "staleness must be 0"),
        (dict(warmup_batches=-1), "warmup_batches must be >= 0"),
        (dict(execute_all_batches=False), "execute_all_batches=True"),
        (dict(enqueue_batch_after_forward=True), "enqueue_batch_after_forward"),
        (dict(staleness_interval=0), "staleness_interval must be >= 1"),
    ],
)
def test_constructor_rejects_unsupported_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SemiSyncTrainPipeline(torch.nn.Linear(2, 2), None, torch.device("cpu"), **kwargs)
