"""FusedKJTLookup equals separate lookups: outputs, gradients, collectives, errors."""

import copy
from typing import Dict, List

import pytest
import torch
import torch.nn.functional as F
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor, KeyedTensor

from dlrm_multiepoch.lookup import FusedKJTLookup, count_all_to_all
from dlrm_multiepoch.testing.ranks import run_on_ranks
from tests.sharding_helpers import local_tables, random_kjt, shard_table_wise

ROWS = 50


def _tables() -> List[EmbeddingBagConfig]:
    return [
        # candidate and history items share one table
        EmbeddingBagConfig(name="item", embedding_dim=4, num_embeddings=ROWS, feature_names=["cand_item", "hist_item"]),
        EmbeddingBagConfig(name="cat", embedding_dim=8, num_embeddings=ROWS, feature_names=["hist_cat", "cand_cat"]),
        EmbeddingBagConfig(name="user", embedding_dim=4, num_embeddings=ROWS, feature_names=["user", "ctx"]),
        # "ctx" is served by two tables: outputs "ctx@user" and "ctx@ctx"
        EmbeddingBagConfig(name="ctx", embedding_dim=12, num_embeddings=ROWS, feature_names=["ctx"]),
    ]


def _kjt(keys: List[str], batch: int, gen: torch.Generator, weighted: bool = False, max_len: int = 3) -> KeyedJaggedTensor:
    return random_kjt(keys, batch, gen, ROWS, max_len, weighted)


def _groups(gen: torch.Generator, weighted: bool = False) -> Dict[str, KeyedJaggedTensor]:
    return {
        # keys deliberately not in table order
        "candidate": _kjt(["cand_cat", "cand_item"], 5, gen, weighted),
        "history": _kjt(["hist_item", "hist_cat", "ctx"], 3, gen, weighted, max_len=6),
        "user": _kjt(["user"], 5, gen, weighted),
        "empty": KeyedJaggedTensor(keys=[], values=torch.zeros(0, dtype=torch.long), lengths=torch.zeros(0, dtype=torch.int), stride=2),
    }


def _reference_pooled(ebc: EmbeddingBagCollection, kjt: KeyedJaggedTensor, weighted: bool) -> Dict[str, torch.Tensor]:
    """Per-feature pooled embeddings computed straight from the tables."""
    out = {}
    for config in ebc.embedding_bag_configs():
        weight = ebc.embedding_bags[config.name].weight
        for f in config.feature_names:
            if f not in kjt.keys():
                continue
            jt = kjt[f]
            name = f"{f}@{config.name}" if f == "ctx" else f
            out[name] = F.embedding_bag(
                jt.values(), weight, jt.offsets()[:-1], mode="sum", include_last_offset=False,
                per_sample_weights=jt.weights() if weighted else None,
            )
    return out


@pytest.mark.parametrize("weighted", [False, True])
def test_fused_ebc_equals_separate_calls_and_reference(weighted: bool) -> None:
    torch.manual_seed(0)
    ebc = EmbeddingBagCollection(_tables(), is_weighted=weighted)
    ebc_sep = copy.deepcopy(ebc)
    groups = _groups(torch.Generator().manual_seed(1), weighted)

    fused_out = FusedKJTLookup(ebc)(groups)
    sep_out = FusedKJTLookup(ebc_sep, fused=False)(groups)

    assert list(fused_out) == list(groups)
    expected_keys = {
        "candidate": ["cand_item", "cand_cat"],  # table order, not input order
        "history": ["hist_item", "hist_cat", "ctx@user", "ctx@ctx"],
        "user": ["user"],
        "empty": [],
    }
    gen = torch.Generator().manual_seed(2)
    loss_f = loss_s = 0.0
    for name, kjt in groups.items():
        f, s = fused_out[name], sep_out[name]
        assert isinstance(f, KeyedTensor) and isinstance(s, KeyedTensor)
        assert f.keys() == s.keys() == expected_keys[name]
        assert f.values().shape == (kjt.stride(), sum(f.length_per_key()))
        assert torch.equal(f.values(), s.values())
        ref = _reference_pooled(ebc, kjt, weighted)
        for key, value in f.to_dict().items():
            assert torch.equal(value, ref[key]), (name, key)
        probe = torch.randn(f.values().shape, generator=gen)
        loss_f = loss_f + (f.values() * probe).sum()
        loss_s = loss_s + (s.values() * probe).sum()
    loss_f.backward()
    loss_s.backward()
    for (n, p), (_, q) in zip(ebc.named_parameters(), ebc_sep.named_parameters()):
        # Same per-row terms, summed in a different order when a row is hit by two groups.
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-6, msg=n)
        assert p.grad.abs().sum() > 0, n


def test_fused_ec_equals_separate_calls() -> None:
    torch.manual_seed(0)
    tables = [
        EmbeddingConfig(name="item", embedding_dim=4, num_embeddings=ROWS, feature_names=["cand_item", "hist_item"]),
        EmbeddingConfig(name="cat", embedding_dim=4, num_embeddings=ROWS, feature_names=["cand_cat", "hist_cat"]),
    ]
    ec = EmbeddingCollection(tables)
    ec_sep = copy.deepcopy(ec)
    gen = torch.Generator().manual_seed(3)
    groups = {"candidate": _kjt(["cand_item"], 4, gen), "history": _kjt(["hist_cat", "hist_item"], 2, gen, max_len=5)}

    fused_out = FusedKJTLookup(ec)(groups)
    sep_out = FusedKJTLookup(ec_sep, fused=False)(groups)
    assert list(fused_out["candidate"]) == ["cand_item"]
    assert list(fused_out["history"]) == ["hist_item", "hist_cat"]
    loss_f = loss_s = 0.0
    for name, kjt in groups.items():
        for key, jt in fused_out[name].items():
            s = sep_out[name][key]
            assert torch.equal(jt.lengths(), kjt[key].lengths())
            assert torch.equal(jt.lengths(), s.lengths())
            table = "item" if key.endswith("item") else "cat"
            assert torch.equal(jt.values(), ec.embeddings[table].weight[kjt[key].values()])
            assert torch.equal(jt.values(), s.values())
            loss_f = loss_f + jt.values().square().sum()
            loss_s = loss_s + s.values().square().sum()
    loss_f.backward()
    loss_s.backward()
    for (n, p), (_, q) in zip(ec.named_parameters(), ec_sep.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-6, msg=n)


def test_bad_groups_raise() -> None:
    lookup = FusedKJTLookup(EmbeddingBagCollection(_tables()))
    gen = torch.Generator().manual_seed(4)
    with pytest.raises(ValueError, match="'cand_item' appears in groups 'a' and 'b'"):
        lookup({"a": _kjt(["cand_item"], 2, gen), "b": _kjt(["user", "cand_item"], 2, gen)})
    with pytest.raises(ValueError, match="group 'a': feature 'nope' is not served"):
        lookup({"a": _kjt(["cand_item", "nope"], 2, gen)})
    with pytest.raises(ValueError, match="at least one feature group"):
        lookup({})
    vbe = KeyedJaggedTensor(
        keys=["user", "ctx"], values=torch.arange(3), lengths=torch.tensor([1, 1, 1]),
        stride_per_key_per_rank=[[1], [2]],
    )
    with pytest.raises(ValueError, match="group 'v': variable batch"):
        lookup({"v": vbe})
    weighted = FusedKJTLookup(EmbeddingBagCollection(_tables(), is_weighted=True))
    with pytest.raises(ValueError, match="group 'a' has no weights"):
        weighted({"a": _kjt(["user"], 2, gen)})
    with pytest.raises(TypeError, match="got Linear"):
        FusedKJTLookup(torch.nn.Linear(2, 2))


# ---------------------------------------------------------------- 2 ranks, table-wise sharded


def _sharded_fused_vs_separate(rank: int, world_size: int) -> None:
    torch.manual_seed(0)
    ebc = EmbeddingBagCollection(_tables())
    reference = copy.deepcopy(ebc)
    fused = FusedKJTLookup(shard_table_wise(copy.deepcopy(ebc), world_size))
    separate = FusedKJTLookup(shard_table_wise(copy.deepcopy(ebc), world_size), fused=False)
    gen = torch.Generator().manual_seed(10 + rank)  # each rank its own batch
    groups = _groups(gen)

    # Warm up: the first call builds the input/output distributions.
    FusedKJTLookup(reference)(groups)
    with torch.no_grad():
        fused(groups), separate(groups)
    before = local_tables(fused.module)

    def step(lookup: FusedKJTLookup):
        with count_all_to_all() as forward_calls:
            out = lookup(groups)
        loss = sum((out[n].values() * (i + 1)).sum() for i, n in enumerate(groups))
        with count_all_to_all() as backward_calls:
            loss.backward()
        return out, dict(forward_calls), dict(backward_calls)

    out_f, fwd_f, bwd_f = step(fused)
    out_s, fwd_s, bwd_s = step(separate)
    out_ref = FusedKJTLookup(reference)(groups)
    for name in groups:
        assert out_f[name].keys() == out_s[name].keys() == out_ref[name].keys()
        assert torch.equal(out_f[name].values(), out_s[name].values()), name
        # FBGEMM's CPU kernel vs nn.EmbeddingBag: same terms, possibly another summation order.
        torch.testing.assert_close(out_f[name].values(), out_ref[name].values(), rtol=0, atol=1e-6)

    # Each separate lookup pays the full set of collectives; the backward ones only for
    # groups whose output reaches the loss (the "empty" group's has no columns).
    assert sum(fwd_f.values()) > 0 and sum(bwd_f.values()) > 0
    assert {k: len(groups) * v for k, v in fwd_f.items()} == fwd_s, (fwd_f, fwd_s)
    assert {k: (len(groups) - 1) * v for k, v in bwd_f.items()} == bwd_s, (bwd_f, bwd_s)

    # In-backward SGD applied the same gradients: one update of g1 + g2 vs two updates.
    after_f, after_s = local_tables(fused.module), local_tables(separate.module)
    assert after_f.keys() == after_s.keys() and after_f
    for key in after_f:
        torch.testing.assert_close(after_f[key], after_s[key], rtol=0, atol=1e-5, msg=key)
    assert any(not torch.equal(before[k], after_f[k]) for k in after_f), "no local table was updated"

    # The way a model holds it: the lookup owns the EBC, DMP shards it in place.
    from torchrec.distributed.embeddingbag import ShardedEmbeddingBagCollection

    model = torch.nn.Module()
    model.lookup = FusedKJTLookup(copy.deepcopy(reference))
    dmp_model = shard_table_wise(model, world_size)
    assert isinstance(dmp_model.module.lookup.module, ShardedEmbeddingBagCollection)
    out_m = dmp_model.module.lookup(groups)
    out_ref = FusedKJTLookup(reference)(groups)
    for name in groups:
        torch.testing.assert_close(out_m[name].values(), out_ref[name].values(), rtol=0, atol=1e-6)


def test_sharded_two_ranks_fused_equals_separate_with_n_times_fewer_collectives() -> None:
    run_on_ranks(_sharded_fused_vs_separate, 2)
