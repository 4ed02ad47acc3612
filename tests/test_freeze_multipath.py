"""FreezeScheduleWrapper on the multi-path model: 2 gloo ranks, DMP, fused row-wise Adagrad, dense Adam.

The multi-path model keeps the item table in an ``EmbeddingCollection`` (candidate and
history, unpooled) and ``user``/``age`` in an ``EmbeddingBagCollection``, every table
sharded table-wise with its fused in-backward optimizer; a ``GradientGate`` sits at each
path's entry. One spawn runs every check (each spawn costs ~10 s):

- each gate closed alone: forward outputs bitwise unchanged, and the gradient reaching
  the tables equals the one with that path's input detached by hand: zero where only
  that path reads a table output, unchanged where that path does not read it;
- one schedule over four epochs under ``TrainPipelineSparseDist``: all tables frozen,
  then only the item table (the ``EmbeddingCollection``) frozen, then all three gates
  closed, then everything trains. Frozen tables keep weights and fused optimizer state
  bitwise; dense weights always move; tables move after each transition.
"""

from typing import Dict, List

import torch
import torch.distributed as dist
from torch import nn
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist

from dlrm_multiepoch.data.loader import BatchLoader
from dlrm_multiepoch.data.synthetic import synthetic_data
from dlrm_multiepoch.distributed import init_distributed
from dlrm_multiepoch.freeze import FreezeScheduleWrapper
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.models.multipath import PATHS, build_multipath
from dlrm_multiepoch.testing.ranks import run_on_ranks
from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, shard_model
from tests.freeze_helpers import changed, held_tables, table_of
from tests.sharding_helpers import snapshot

TABLES = ("user", "item", "age")
K = 6
MODEL = ModelConfig(model="multipath", embedding_dim=8, dense_arch_layer_sizes="16,8", over_arch_layer_sizes="16",
                    transformer_heads=2, transformer_ff_dim=16, sequence_head_layer_sizes="8")
STEPS_PER_EPOCH = 3  # 768 train rows / global batch 256
SCHEDULE = (
    "tables=frozen@[0,1); table:item=frozen@[0,2); "
    "gate:feature_cross=closed@[2,3); gate:sequence=closed@[2,3); gate:contrastive=closed@[2,3)"
)
# Which paths read each table output (see dlrm_multiepoch/models/multipath.py).
READERS = {
    "pooled": {"feature_cross"},  # user, age
    "candidate": {"feature_cross", "sequence"},  # item
    "history": {"sequence", "contrastive"},  # item
}


class _Detach(nn.Module):
    """The hand-made reference for a closed gate on a tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.detach()


def _forward_and_table_grads(dmp, batch):
    """Model outputs, and d loss / d each table output (zeros where the loss does not read it).

    ``autograd.grad`` stops at the table outputs, so no embedding backward (and no fused
    optimizer step) runs: the tables stay as they are between calls.
    """
    model = dmp.module.model
    seen = {}
    hooks = [
        model.embedding_views.register_forward_hook(lambda m, i, o: seen.__setitem__("views", o)),
        model.register_forward_hook(lambda m, i, o: seen.__setitem__("out", o)),
    ]
    try:
        loss, _ = dmp(batch)
    finally:
        for h in hooks:
            h.remove()
    views = [getattr(seen["views"], name) for name in READERS]
    grads = torch.autograd.grad(loss, views, allow_unused=True)
    return seen["out"], {
        name: torch.zeros_like(v) if g is None else g for name, v, g in zip(READERS, views, grads)
    }


def _check_gates(dmp, batch) -> None:
    gates = dmp.module.model.gates
    open_out, open_grads = _forward_and_table_grads(dmp, batch)
    assert all(torch.count_nonzero(g) > 0 for g in open_grads.values()), "every table output must get a gradient"
    for path in PATHS:
        freeze = FreezeScheduleWrapper(dmp, f"gate:{path}=closed", STEPS_PER_EPOCH, 1)
        assert not gates[path].open and all(gates[p].open for p in PATHS if p != path)
        out, grads = _forward_and_table_grads(dmp, batch)
        freeze.remove()
        assert gates[path].open
        for field, value in open_out._asdict().items():
            assert torch.equal(getattr(out, field), value), (path, field)  # forward untouched
        gate = gates[path]
        gates[path] = _Detach()
        try:
            _, reference = _forward_and_table_grads(dmp, batch)
        finally:
            gates[path] = gate
        for name, readers in READERS.items():
            assert torch.equal(grads[name], reference[name]), (path, name)
            if readers == {path}:
                assert torch.count_nonzero(grads[name]) == 0, (path, name)
            elif path in readers:  # the other reader's gradient is left
                assert torch.count_nonzero(grads[name]) > 0 and not torch.equal(grads[name], open_grads[name])
            else:
                assert torch.equal(grads[name], open_grads[name]), (path, name)


def _assert_frozen(before, after, tables: List[str], why: str) -> None:
    for t in tables:
        diff = changed(before, after, TABLES, t)
        assert diff and not any(diff.values()), (why, t, diff)


def _assert_moved(before, after, tables: List[str], why: str) -> None:
    for t in tables:  # weights and fused optimizer state both move
        diff = changed(before, after, TABLES, t)
        assert any(v for k, v in diff.items() if k.startswith("w.")), (why, t, diff)
        assert any(v for k, v in diff.items() if k.startswith("opt.")), (why, t, diff)


def _check_multipath(rank: int, world_size: int) -> None:
    env = init_distributed()
    data = synthetic_data(1024, {"user": 300, "item": 500, "age": 8}, history_length=K, seed=2)
    torch.manual_seed(0)
    model = build_multipath(data, MODEL, env.device)
    apply_embedding_optimizer(model, "rowwise_adagrad", 0.05)
    dmp = shard_model(model, env, ("table_wise",))
    opt = build_optimizer(dmp, 1e-2)
    loader = BatchLoader(data, "train", 256, rank, world_size, shuffle=True)
    assert len(loader) == STEPS_PER_EPOCH

    _check_gates(dmp, next(iter(loader)))

    freeze = FreezeScheduleWrapper(dmp, SCHEDULE, STEPS_PER_EPOCH, 4, optimizer=opt)
    pipeline = TrainPipelineSparseDist(dmp, opt, env.device)
    snaps = [snapshot(dmp, opt)]
    states: List[Dict[str, int]] = [freeze.states()]
    for epoch in range(4):
        loader.set_epoch(epoch)
        it = iter(loader)
        for _ in range(STEPS_PER_EPOCH):
            pipeline.progress(it)
            freeze.step()
        snaps.append(snapshot(dmp, opt))
        states.append(freeze.states())
    held = held_tables(snaps[0], TABLES)
    everyone = [None] * world_size
    dist.all_gather_object(everyone, held)
    assert sorted(t for h in everyone for t in h) == sorted(TABLES), everyone  # each table checked once

    gates_open = {f"gate:{p}": 1 for p in PATHS}
    assert states[0] == {"tables": 0, "table:item": 0, **gates_open}
    assert states[1] == {"tables": 1, "table:item": 0, **gates_open}
    assert states[2] == {"tables": 1, "table:item": 1, **{g: 0 for g in gates_open}}
    assert states[3] == {"tables": 1, "table:item": 1, **gates_open}

    # No optimizer state appeared for a table while frozen.
    assert not [k for k in snaps[1].keys() ^ snaps[0].keys() if table_of(k, TABLES)]
    _assert_frozen(snaps[0], snaps[1], held, "epoch 0: tables frozen")
    _assert_frozen(snaps[1], snaps[2], [t for t in held if t == "item"], "epoch 1: item frozen")
    _assert_moved(snaps[1], snaps[2], [t for t in held if t != "item"], "epoch 1: pooled tables train")
    _assert_frozen(snaps[2], snaps[3], held, "epoch 2: every gate closed")
    _assert_moved(snaps[3], snaps[4], held, "epoch 3: everything trains")
    for epoch in range(4):  # the dense weights train throughout
        dense = changed(snaps[epoch], snaps[epoch + 1], TABLES)
        stuck = [k for k, v in dense.items() if k.startswith("w.") and not v]
        assert not stuck, (epoch, stuck)


def test_multipath_freeze_and_gates_under_dmp() -> None:
    run_on_ranks(_check_multipath, 2)
