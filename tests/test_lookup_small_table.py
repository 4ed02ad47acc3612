"""Dense-GEMM backward equals the stock embedding-bag backward; small tables stay replicated."""

import copy

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_multiepoch.lookup import (
    DENSE_BACKWARD_MAX_ROWS,
    SmallTableEmbeddingBagCollection,
    dense_backward_max_rows,
    dense_grad_embedding_bag,
)
from dlrm_multiepoch.lookup import small_table
from dlrm_multiepoch.testing.ranks import run_on_ranks
from tests.sharding_helpers import random_kjt


def _bags(rows: int, bags: int, gen: torch.Generator, max_len: int = 4):
    lengths = torch.randint(0, max_len + 1, (bags,), generator=gen)
    ids = torch.randint(0, rows, (int(lengths.sum()),), generator=gen)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
    return ids, offsets


@pytest.mark.parametrize("mode,weighted", [("sum", False), ("sum", True), ("mean", False)])
def test_dense_grad_embedding_bag_equals_stock(mode: str, weighted: bool, monkeypatch) -> None:
    gen = torch.Generator().manual_seed(0)
    rows, dim = 12, 5
    ids, offsets = _bags(rows, 300, gen)
    # A tiny one-hot block so the backward runs over several chunks.
    monkeypatch.setattr(small_table, "_ONE_HOT_BLOCK_ELEMS", rows * 64)
    base = torch.randn(rows, dim, generator=gen)
    psw_base = torch.rand(ids.numel(), generator=gen) if weighted else None
    grad = torch.randn(300, dim, generator=gen)

    def run(fn):
        weight = base.clone().requires_grad_()
        psw = psw_base.clone().requires_grad_() if weighted else None
        out = fn(weight, psw)
        out.backward(grad)
        return out, weight.grad, (psw.grad if weighted else None)

    ref = run(lambda w, p: F.embedding_bag(ids, w, offsets, mode=mode, per_sample_weights=p))
    got = run(lambda w, p: dense_grad_embedding_bag(w, ids, offsets, mode, p))
    assert torch.equal(got[0], ref[0])
    # Same terms summed by a GEMM instead of index_add_: float32 rounding only.
    torch.testing.assert_close(got[1], ref[1], rtol=0, atol=1e-5)
    if weighted:
        torch.testing.assert_close(got[2], ref[2], rtol=0, atol=1e-5)
    assert ref[1].abs().sum() > 0


def test_bad_mode_and_threshold_override_raise(monkeypatch) -> None:
    w = torch.randn(4, 2)
    with pytest.raises(ValueError, match="mode 'sum' or 'mean', got 'max'"):
        dense_grad_embedding_bag(w, torch.tensor([1]), torch.tensor([0]), "max")
    with pytest.raises(ValueError, match="per_sample_weights need mode 'sum'"):
        dense_grad_embedding_bag(w, torch.tensor([1]), torch.tensor([0]), "mean", torch.ones(1))
    cpu = torch.device("cpu")
    assert dense_backward_max_rows(cpu) == DENSE_BACKWARD_MAX_ROWS["cpu"]
    monkeypatch.setenv("DLRM_DENSE_BACKWARD_MAX_ROWS", "77")
    assert dense_backward_max_rows(cpu) == 77
    monkeypatch.setenv("DLRM_DENSE_BACKWARD_MAX_ROWS", "many")
    with pytest.raises(ValueError, match="DLRM_DENSE_BACKWARD_MAX_ROWS must be an integer, got 'many'"):
        dense_backward_max_rows(cpu)


def _tables():
    return [
        EmbeddingBagConfig(name="age", embedding_dim=4, num_embeddings=12, feature_names=["age"]),
        EmbeddingBagConfig(name="country", embedding_dim=4, num_embeddings=30, feature_names=["country", "home"], pooling=PoolingType.MEAN),
        EmbeddingBagConfig(name="city", embedding_dim=8, num_embeddings=500, feature_names=["city"]),
        EmbeddingBagConfig(name="hour", embedding_dim=4, num_embeddings=24, feature_names=["hour"]),
    ]


def _kjt(batch: int, gen: torch.Generator) -> KeyedJaggedTensor:
    return random_kjt(["city", "age", "country", "home", "hour"], batch, gen, rows=12)


def test_collection_equals_embedding_bag_collection() -> None:
    torch.manual_seed(0)
    ebc = EmbeddingBagCollection(_tables())
    small = SmallTableEmbeddingBagCollection(_tables(), max_dense_rows=100)
    small.load_state_dict(ebc.state_dict())  # same state dict layout as an EBC
    assert small.dense_backward_tables == {"age", "country", "hour"}  # city has 500 rows
    kjt = _kjt(64, torch.Generator().manual_seed(1))
    expected, got = ebc(kjt), small(kjt)
    assert got.keys() == expected.keys()
    assert torch.equal(got.values(), expected.values())
    probe = torch.randn(expected.values().shape, generator=torch.Generator().manual_seed(2))
    (expected.values() * probe).sum().backward()
    (got.values() * probe).sum().backward()
    for name in ebc.embedding_bags:
        g_ref, g = ebc.embedding_bags[name].weight.grad, small.embedding_bags[name].weight.grad
        torch.testing.assert_close(g, g_ref, rtol=0, atol=1e-5, msg=name)
        assert g_ref.abs().sum() > 0, name
    assert SmallTableEmbeddingBagCollection(_tables()).dense_backward_tables == {
        t.name for t in _tables() if t.num_embeddings <= DENSE_BACKWARD_MAX_ROWS["cpu"]
    }


def test_threshold_follows_the_device_the_weights_land_on() -> None:
    # Models are built on the meta device for sharding; the choice waits for real weights.
    small = SmallTableEmbeddingBagCollection(_tables(), device=torch.device("meta"))
    with pytest.raises(RuntimeError, match="still on the meta device"):
        small.dense_backward_tables
    small.to_empty(device="cpu")
    assert small.dense_backward_tables == {
        t.name for t in _tables() if t.num_embeddings <= DENSE_BACKWARD_MAX_ROWS["cpu"]
    }


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.small = SmallTableEmbeddingBagCollection(_tables(), max_dense_rows=100)
        self.head = torch.nn.Linear(24, 1)

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        return self.head(self.small(kjt).values()).sum()


def _replicated_data_parallel(rank: int, world_size: int) -> None:
    from torchrec.distributed import DistributedModelParallel

    torch.manual_seed(0)
    model = _Model()
    reference = copy.deepcopy(model)
    dmp = DistributedModelParallel(model, device=torch.device("cpu"))
    weight = dmp.module.small.embedding_bags["age"].weight
    assert type(weight) is torch.nn.Parameter and weight.shape == (12, 4)  # not sharded
    kjts = [_kjt(16, torch.Generator().manual_seed(30 + r)) for r in range(world_size)]
    dmp(kjts[rank]).backward()
    # DDP averages the ranks' gradients: compare with both batches run locally.
    for kjt in kjts:
        (reference(kjt) / world_size).backward()
    for name, p in dmp.module.named_parameters():
        ref = dict(reference.named_parameters())[name.removeprefix("_dmp_wrapped_module.").removeprefix("module.")]
        torch.testing.assert_close(p.grad, ref.grad, rtol=0, atol=1e-5, msg=name)
        gathered = [torch.empty_like(p.grad) for _ in range(world_size)]
        dist.all_gather(gathered, p.grad)
        assert all(torch.equal(g, gathered[0]) for g in gathered), name


def test_two_ranks_small_tables_are_replicated_data_parallel() -> None:
    run_on_ranks(_replicated_data_parallel, 2)
