"""Table LR schedules, gradient accumulation, re-initialisation and id dropout on 2 gloo ranks.

One spawn, the app's DLRM on synthetic data: ``user``/``item`` table-wise sharded with
fused row-wise Adagrad (``user`` at its own LR), ``age`` data-parallel (trained by the
dense optimizer).
"""

import itertools
from typing import Dict

import numpy as np
import pytest
import torch
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
from torchrec.optim.optimizers import in_backward_optimizer_filter

from dlrm_multiepoch.data.dataset import UNKNOWN_ID
from dlrm_multiepoch.data.loader import BatchLoader
from dlrm_multiepoch.data.id_dropout import IdDropout
from dlrm_multiepoch.data.synthetic import synthetic_data
from dlrm_multiepoch.distributed import init_distributed
from dlrm_multiepoch.lookup.comm_count import count_ddp_all_reduce
from dlrm_multiepoch.models import ModelConfig, build_dlrm
from dlrm_multiepoch.optim.accumulation import GradientAccumulation, ddp_modules
from dlrm_multiepoch.optim.lr import TableLRSchedule, TableLRScheduler
from dlrm_multiepoch.optim.reinit import ReinitSchedule, init_values, reinit_tables
from dlrm_multiepoch.optim.shards import table_shards
from dlrm_multiepoch.part import TrainParts
from dlrm_multiepoch.testing.ranks import run_on_ranks
from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, shard_model

BASE_LRS = {"user": 0.02, "item": 0.05}


def _fused(dmp):
    return [s for s in table_shards(dmp) if s.fused]


def _tables(dmp) -> Dict[str, torch.Tensor]:
    return {s.name: s.weight().clone() for s in table_shards(dmp)}


def _check_lr_schedule(dmp, batch) -> None:
    # Issue 38, row 1: without base_lrs, every fused table is listed on every rank, also one whose only shard lives
    # on the other rank (table-wise: each rank holds one of the two), at the LR its kernel was built with.
    local = {s.name for s in _fused(dmp)}
    assert local < set(BASE_LRS), local
    got = TableLRScheduler(dmp, None, 3, 2).lrs()
    assert got == pytest.approx(BASE_LRS, rel=1e-6), (got, local)  # the kernels hold float32 LRs
    sched = TableLRScheduler(dmp, TableLRSchedule.parse("2step", "linear", 0.5), 3, 2, base_lrs=BASE_LRS, factor=0.5)
    kernels = {id(s.kernel): s for s in _fused(dmp)}
    # Tables with different LRs get their own kernel (one LR per TBE).
    assert len({id(s.kernel) for s in _fused(dmp)}) == len(_fused(dmp))
    for step, mult in ((0, 0.5), (1, 1.0), (2, 1.0), (5, 1.0 - 0.5 * 3 / 4)):
        sched.set_step(step)
        for s in kernels.values():
            expected = torch.tensor(BASE_LRS[s.name] * mult * 0.5, dtype=torch.float32)
            assert s.tbe.learning_rate_tensor == expected, (step, s.name, s.tbe.learning_rate_tensor)
            assert s.kernel.fused_optimizer.param_groups[0]["lr"] == pytest.approx(BASE_LRS[s.name] * mult * 0.5)
        assert sched.lrs()["user"] == pytest.approx(0.02 * mult * 0.5)
    # The kernel really uses the LR it was given: the same step (same weights, state and
    # batch) at step 1's LR moves every row exactly twice as far as at step 0's.
    before = {s.name: (s.weight().clone(), [t.clone() for t in s.optimizer_states()]) for s in _fused(dmp)}
    deltas = []
    for step in (0, 1):
        sched.set_step(step)
        for s in _fused(dmp):
            s.weight().copy_(before[s.name][0])
            for t, saved in zip(s.optimizer_states(), before[s.name][1]):
                t.copy_(saved)
        loss, _ = dmp(batch)
        loss.backward()
        deltas.append({s.name: s.weight() - before[s.name][0] for s in _fused(dmp)})
    for name, d0 in deltas[0].items():
        assert d0.abs().max() > 0
        torch.testing.assert_close(deltas[1][name], 2 * d0, rtol=1e-5, atol=1e-8)


def _check_reinit(dmp, optimizer, rank: int) -> None:
    before = _tables(dmp)
    item_state = [t.clone() for s in _fused(dmp) if s.name == "item" for t in s.optimizer_states()]
    age_state = [v for k, v in optimizer.state_dict()["state"].items() if ".age." in k]
    assert age_state and any(float(t.abs().sum()) > 0 for st in age_state for t in st.values() if torch.is_tensor(t))
    reinit_tables(dmp, optimizer, ["user", "age"], seed=3, epoch=1)
    for s in table_shards(dmp):
        cfg = s.config
        if s.name == "item":
            assert torch.equal(s.weight(), before["item"])
            assert all(torch.equal(a, b) for a, b in zip(s.optimizer_states(), item_state)) and item_state
            continue
        full = init_values(s.name, cfg.num_embeddings, cfg.embedding_dim, cfg.get_weight_init_min(), cfg.get_weight_init_max(), 3, 1, slice(0, None))
        assert torch.equal(s.weight(), full[s.row_offset : s.row_offset + s.local_rows])  # a fresh seeded init
        assert all(float(t.abs().sum()) == 0 for t in s.optimizer_states())
    state = optimizer.state_dict()["state"]
    assert all(float(t.abs().sum()) == 0 for k, st in state.items() if ".age." in k for t in st.values() if torch.is_tensor(t))
    # The values do not depend on the sharding: rows of a block match whatever the slice.
    torch.testing.assert_close(init_values("t", 70000, 4, -1, 1, 0, 1, slice(65530, 65540)), init_values("t", 70000, 4, -1, 1, 0, 1, slice(0, None))[65530:65540])


def _dense(dmp) -> Dict[str, torch.Tensor]:
    return {k: p.detach().clone() for k, p in in_backward_optimizer_filter(dmp.named_parameters())}


def _check_accumulation(dmp, data, rank: int, world_size: int) -> None:
    """SGD on dense weights, tables at LR 0: 2 micro-batches accumulated = 1 step on both."""
    dense = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    sgd = CombinedOptimizer([dmp.fused_optimizer, KeyedOptimizerWrapper(dense, lambda ps: torch.optim.SGD(ps, lr=0.5))])
    accum = GradientAccumulation(dmp, sgd, steps=2, rule="1/N")
    sched = TableLRScheduler(dmp, None, 2, 1, base_lrs=BASE_LRS, factor=0.0)  # tables held still
    assert accum.lr_factor == 0.5
    calls = count_ddp_all_reduce(ddp_modules(dmp))
    start, tables = _dense(dmp), _tables(dmp)
    # Reference: one plain step on the concatenated batch (256 rows).
    sgd.zero_grad()
    loss, _ = dmp(next(iter(BatchLoader(data, "train", 256, rank, world_size))))
    loss.backward()
    sgd.step()
    one_step, one_step_reduces = _dense(dmp), calls["all_reduce"]
    assert one_step_reduces > 0
    with torch.no_grad():
        for k, p in dense.items():
            p.copy_(start[k])
    # The same 256 rows as 2 micro-batches of 128 through TorchRec's pipeline.
    pipeline = TrainPipelineSparseDist(dmp, TrainParts([accum]).wrap_optimizer(sgd), torch.device("cpu"))
    batches = itertools.islice(iter(BatchLoader(data, "train", 128, rank, world_size)), 2)
    for i in range(2):
        with accum.micro_batch() as closes:
            assert closes == (i == 1)
            pipeline.progress(batches)
        if i == 0:
            assert all(torch.equal(start[k], p) for k, p in dense.items())  # no dense step yet
            assert calls["all_reduce"] == one_step_reduces  # and no all-reduce
    assert calls["all_reduce"] == 2 * one_step_reduces  # one all-reduce round per optimizer step
    assert accum.optimizer_steps == 1
    for k, v in _dense(dmp).items():
        torch.testing.assert_close(v, one_step[k], rtol=1e-5, atol=1e-7, msg=lambda m: f"{k}: {m}")
    assert all(torch.equal(tables[s.name], s.weight()) for s in _fused(dmp))  # LR 0: fused tables unchanged
    del sched


def _check_id_dropout_trains_row_0(dmp, batch, rank: int) -> None:
    user = [s for s in _fused(dmp) if s.name == "user"]
    before = user[0].weight()[UNKNOWN_ID].clone() if user else None
    loss, _ = dmp(batch)  # synthetic ids start at 1: row 0 is never looked up
    loss.backward()
    if user:
        assert torch.equal(user[0].weight()[UNKNOWN_ID], before)
    dropped = IdDropout({"user": 0.5}, seed=0, rank=rank)(batch, epoch=0, index=0)
    loss, _ = dmp(dropped)
    loss.backward()
    if user:
        assert not torch.equal(user[0].weight()[UNKNOWN_ID], before)


def _run(rank: int, world_size: int) -> None:
    env = init_distributed()
    torch.manual_seed(0)
    data = synthetic_data(1024, {"user": 200, "item": 300, "age": 8})
    model = build_dlrm(data, ModelConfig(), env.device)
    apply_embedding_optimizer(model, "rowwise_adagrad", 0.05, table_lrs=BASE_LRS)
    dmp = shard_model(model, env, ("data_parallel", "table_wise"), static_graph=False)
    assert {s.name: s.fused for s in table_shards(dmp)}.get("age") is False  # data-parallel
    optimizer = build_optimizer(dmp, 1e-2)
    batch = next(iter(BatchLoader(data, "train", 128, env.rank, env.world_size)))
    _check_lr_schedule(dmp, batch)
    optimizer.step()  # Adam state for the data-parallel table, for the re-init check
    _check_id_dropout_trains_row_0(dmp, batch, env.rank)
    _check_reinit(dmp, optimizer, env.rank)
    _check_accumulation(dmp, data, env.rank, env.world_size)


def test_lr_schedule_accumulation_reinit_and_id_dropout_on_two_ranks():
    run_on_ranks(_run, 2)


def test_schedules_reject_bad_input_naming_the_flag():
    with pytest.raises(ValueError, match="--table_lr_warmup"):
        TableLRSchedule.parse("soon")
    with pytest.raises(ValueError, match="--table_lr_decay"):
        TableLRSchedule.parse("0", "exponential")
    with pytest.raises(ValueError, match="--reinit"):
        ReinitSchedule.parse("tables@0", num_epochs=3)
    with pytest.raises(ValueError, match="--reinit"):
        ReinitSchedule.parse("tables", num_epochs=3)
    with pytest.raises(ValueError, match="--reinit: unknown table"):
        ReinitSchedule.parse("table:t_usr@1", num_epochs=3).check_tables(["t_user"])
    assert ReinitSchedule.parse("tables@each; table:a@2", num_epochs=3).tables_at(2, ["a", "b"]) == ["a", "b"]
    assert ReinitSchedule.parse("table:a@2", num_epochs=3).tables_at(1, ["a", "b"]) == []
    s = TableLRSchedule.parse("10%", "cosine", 0.1)
    m = [s.multiplier(i, 10, 20) for i in range(20)]
    assert m[0] == 0.5 and m[1] == 1.0 and m[-1] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * 17 / 18)))
