"""FreezeScheduleWrapper on 2 gloo ranks: DMP-sharded DLRM, fused row-wise Adagrad, dense Adam.

Tables ``user``/``item`` are table-wise sharded (fused in-backward optimizer); ``age`` is
data-parallel (trained by the dense Adam). Frozen means bitwise unchanged weights and
optimizer state, for both kinds.
"""

from typing import Dict, Iterator, Optional

import pytest
import torch
from torch import nn
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist

from dlrm_multiepoch.data.loader import BatchLoader
from dlrm_multiepoch.data.synthetic import synthetic_data
from dlrm_multiepoch.distributed import init_distributed
from dlrm_multiepoch.freeze import FreezeScheduleWrapper
from dlrm_multiepoch.gates import GradientGate
from dlrm_multiepoch.models import ModelConfig, build_dlrm
from dlrm_multiepoch.testing.ranks import run_on_ranks
from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, shard_model
from tests.freeze_helpers import changed, held_tables, table_of
from tests.sharding_helpers import snapshot

TABLES = ("user", "item", "age")
STEPS_PER_EPOCH = 3  # 768 train rows / global batch 256


def _setup(gate: bool = False):
    env = init_distributed()
    torch.manual_seed(0)
    data = synthetic_data(1024, {"user": 200, "item": 300, "age": 8})
    model = build_dlrm(data, ModelConfig(), env.device)
    if gate:  # the one-line gate: everything the tables feed passes through it
        dlrm = model.model
        dlrm.sparse_arch = nn.Sequential(dlrm.sparse_arch, GradientGate("feature_cross"))
    apply_embedding_optimizer(model, "rowwise_adagrad", 0.05)
    dmp = shard_model(model, env, ("data_parallel", "table_wise"))
    opt = build_optimizer(dmp, 1e-2)
    kinds = {
        t: type(v).__name__ for k, v in dmp.state_dict().items() for t in [table_of(k, TABLES)] if t and k.endswith("weight")
    }
    # The planner's choice is what this test relies on to cover both kinds of table.
    assert kinds == {"user": "ShardedTensor", "item": "ShardedTensor", "age": "Tensor"}, kinds
    loader = BatchLoader(data, "train", 256, env.rank, env.world_size, shuffle=True)
    assert len(loader) == STEPS_PER_EPOCH
    return env, dmp, opt, loader


def _run_epoch(dmp, opt, loader, freeze, pipeline, epoch: int) -> None:
    loader.set_epoch(epoch)
    it: Iterator = iter(loader)
    if pipeline is not None:
        for _ in range(STEPS_PER_EPOCH):
            pipeline.progress(it)
            freeze.step()
        return
    for batch in it:
        opt.zero_grad()
        loss, _ = dmp(batch)
        loss.backward()
        opt.step()
        freeze.step()


def _changed(before, after, table: Optional[str] = None) -> Dict[str, bool]:
    return changed(before, after, TABLES, table)


def _check_delayed(rank: int, world_size: int, use_pipeline: bool) -> None:
    env, dmp, opt, loader = _setup()
    freeze = FreezeScheduleWrapper(dmp, "delayed", STEPS_PER_EPOCH, 2, optimizer=opt)
    pipeline = TrainPipelineSparseDist(dmp, opt, env.device) if use_pipeline else None
    s0 = snapshot(dmp, opt)
    assert freeze.frozen_tables() == sorted(TABLES) and freeze.states() == {"tables": 0}
    _run_epoch(dmp, opt, loader, freeze, pipeline, 0)
    s1 = snapshot(dmp, opt)
    assert freeze.global_step == STEPS_PER_EPOCH and freeze.states() == {"tables": 1}
    # No optimizer state appeared for any table (Adam never stepped age)...
    assert not [k for k in s1.keys() ^ s0.keys() if table_of(k, TABLES)], s1.keys() ^ s0.keys()
    for t in TABLES:  # ...and weights, momentum1 (fused) and Adam state are bitwise unchanged
        assert not any(_changed(s0, s1, table=t).values()), (t, _changed(s0, s1, table=t))
    dense = _changed(s0, s1)
    assert all(v for k, v in dense.items() if k.startswith("w.")), dense
    _run_epoch(dmp, opt, loader, freeze, pipeline, 1)
    s2 = snapshot(dmp, opt)
    held = held_tables(s2, TABLES)
    assert "age" in held and len(held) >= 2, held  # data-parallel age plus this rank's table-wise table
    for t in held:  # after the transition, weights and optimizer state of every held table move
        changed = _changed(s1, s2, table=t)
        assert any(v for k, v in changed.items() if k.startswith("w.")), (t, changed)
        assert any(v for k, v in changed.items() if k.startswith("opt.")), (t, changed)


@pytest.mark.parametrize("use_pipeline", [True, False], ids=["pipeline", "plain_loop"])
def test_delayed_freezes_then_trains_tables(use_pipeline: bool) -> None:
    run_on_ranks(_check_delayed, 2, use_pipeline)


def _check_partial_early(rank: int, world_size: int) -> None:
    """Freeze two tables of three mid-run (early), one fused and one data-parallel."""
    env, dmp, opt, loader = _setup()
    freeze = FreezeScheduleWrapper(
        dmp, "table:user=train@[0,0.5) frozen@[0.5,end); table:age=train@[0,0.5) frozen@[0.5,end)",
        STEPS_PER_EPOCH * 2, 1, optimizer=opt,
    )
    _run_epoch(dmp, opt, loader, freeze, None, 0)  # steps 0-2 train everything
    assert freeze.frozen_tables() == ["age", "user"]
    s1 = snapshot(dmp, opt)
    _run_epoch(dmp, opt, loader, freeze, None, 1)
    s2 = snapshot(dmp, opt)
    for t in ("user", "age"):
        assert not any(_changed(s1, s2, table=t).values()), (t, _changed(s1, s2, table=t))
    item_moved = any(_changed(s1, s2, table="item").values())
    holds_item = "item" in held_tables(s2, TABLES)
    assert item_moved == holds_item


def test_partial_freeze_of_fused_and_data_parallel_tables() -> None:
    run_on_ranks(_check_partial_early, 2)


def _autograd_names(loss: torch.Tensor) -> set:
    seen, stack, names = set(), [loss.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        names.add(type(fn).__name__)
        stack.extend(f for f, _ in fn.next_functions)
    return names


def _check_no_embedding_backward(rank: int, world_size: int) -> None:
    env, dmp, opt, loader = _setup()
    batch = next(iter(loader))
    joint = _autograd_names(dmp(batch)[0])
    freeze = FreezeScheduleWrapper(dmp, "frozen", STEPS_PER_EPOCH, 1, optimizer=opt)
    frozen = _autograd_names(dmp(batch)[0])
    embedding_nodes = {n for n in joint if "All2All" in n or "AllToAll" in n or "Embedding" in n or "Lookup" in n}
    assert embedding_nodes, joint  # the joint graph runs the all-to-all and lookup backward...
    assert not (embedding_nodes & frozen), embedding_nodes & frozen  # ...the frozen one runs neither
    freeze.remove()
    assert _autograd_names(dmp(batch)[0]) == joint


def test_frozen_tables_leave_the_autograd_graph() -> None:
    run_on_ranks(_check_no_embedding_backward, 2)


def _check_gate(rank: int, world_size: int) -> None:
    env, dmp, opt, loader = _setup(gate=True)
    freeze = FreezeScheduleWrapper(dmp, "gate:feature_cross=closed@[0,1)", STEPS_PER_EPOCH, 2, optimizer=opt)
    pipeline = TrainPipelineSparseDist(dmp, opt, env.device)
    s0 = snapshot(dmp, opt)
    _run_epoch(dmp, opt, loader, freeze, pipeline, 0)
    s1 = snapshot(dmp, opt)
    for t in TABLES:  # the gate is the tables' only path: closed, they get no gradient at all
        assert not any(_changed(s0, s1, table=t).values()), t
    assert all(v for k, v in _changed(s0, s1).items() if k.startswith("w."))
    _run_epoch(dmp, opt, loader, freeze, pipeline, 1)
    assert any(_changed(s1, snapshot(dmp, opt), table="age").values())


def test_closed_gate_on_sharded_dlrm() -> None:
    run_on_ranks(_check_gate, 2)
