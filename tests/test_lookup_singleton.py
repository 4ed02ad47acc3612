"""SingletonEmbeddingBagCollection equals EmbeddingBagCollection, unsharded and sharded."""

import copy
from typing import List

import pytest
import torch
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_multiepoch.lookup import SingletonEmbeddingBagCollection, detect_singleton_features
from dlrm_multiepoch.testing.ranks import run_on_ranks
from tests.sharding_helpers import local_tables, random_kjt, shard_table_wise

ROWS = 40
SINGLETONS = ["user_id", "item_id", "cand_item"]


def _tables(item_pooling: PoolingType = PoolingType.MEAN) -> List[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(name="genre", embedding_dim=4, num_embeddings=ROWS, feature_names=["genres"]),
        EmbeddingBagConfig(name="user", embedding_dim=8, num_embeddings=ROWS, feature_names=["user_id"]),
        EmbeddingBagConfig(
            name="item", embedding_dim=8, num_embeddings=ROWS, feature_names=["item_id", "cand_item"],
            pooling=item_pooling,
        ),
        EmbeddingBagConfig(name="age", embedding_dim=4, num_embeddings=ROWS, feature_names=["age"]),
    ]


def _kjt(batch: int, gen: torch.Generator, weighted: bool, singleton_len: int = 1) -> KeyedJaggedTensor:
    keys = ["item_id", "genres", "age", "user_id", "cand_item"]  # not table order
    return random_kjt(keys, batch, gen, ROWS, weighted=weighted, fixed_lengths={k: singleton_len for k in SINGLETONS})


@pytest.mark.parametrize("weighted", [False, True])
def test_unsharded_equals_embedding_bag_collection(weighted: bool) -> None:
    torch.manual_seed(0)
    # nn.EmbeddingBag takes per-id weights only with sum pooling.
    ebc = EmbeddingBagCollection(_tables(PoolingType.SUM if weighted else PoolingType.MEAN), is_weighted=weighted)
    single = SingletonEmbeddingBagCollection.from_embedding_bag_collection(ebc, SINGLETONS)
    assert sorted(single.gather["8"].embeddings) == ["item", "user"]
    assert sorted(single.pooled.embedding_bags) == ["age", "genre"]
    kjt = _kjt(64, torch.Generator().manual_seed(1), weighted)

    expected, got = ebc(kjt), single(kjt)
    assert got.keys() == expected.keys() and got.length_per_key() == expected.length_per_key()
    # Pooling one id is the id's row (times its weight): the same float operations.
    assert torch.equal(got.values(), expected.values())

    probe = torch.randn(expected.values().shape, generator=torch.Generator().manual_seed(2))
    (expected.values() * probe).sum().backward()
    (got.values() * probe).sum().backward()
    for config in ebc.embedding_bag_configs():
        g_ref = ebc.embedding_bags[config.name].weight.grad
        g = single.table_weight(config.name).grad
        # Scatter-add of the same terms; a row hit several times may sum in another order.
        torch.testing.assert_close(g, g_ref, rtol=0, atol=1e-6, msg=config.name)
        assert g_ref.abs().sum() > 0


def test_bad_bags_and_declarations_raise() -> None:
    torch.manual_seed(0)
    single = SingletonEmbeddingBagCollection(_tables(), SINGLETONS)
    gen = torch.Generator().manual_seed(3)
    with pytest.raises(ValueError, match="feature 'user_id' is declared singleton but sample 0 has a bag of 2 ids"):
        single(_kjt(4, gen, False, singleton_len=2))
    with pytest.raises(ValueError, match="feature 'user_id' is declared singleton but sample 0 has a bag of 0 ids"):
        single(_kjt(4, gen, False, singleton_len=0))
    # One bad bag in the middle of a later singleton feature.
    kjt = _kjt(4, gen, False)
    lengths = kjt.lengths().clone()
    lengths[4 * 4 + 2] = 3  # cand_item, sample 2
    bad = KeyedJaggedTensor(keys=kjt.keys(), values=torch.zeros(int(lengths.sum()), dtype=torch.long), lengths=lengths, stride=4)
    with pytest.raises(ValueError, match="feature 'cand_item' is declared singleton but sample 2 has a bag of 3 ids"):
        single(bad)
    with pytest.raises(ValueError, match=r"lacks features \['age', 'user_id', 'item_id', 'cand_item'\] \(has \['genres'\]\)"):
        single(KeyedJaggedTensor(keys=["genres"], values=torch.zeros(1, dtype=torch.long), lengths=torch.ones(1, dtype=torch.long), stride=1))
    with pytest.raises(ValueError, match=r"table 'item': features \['item_id'\] are declared singleton but \['cand_item'\]"):
        SingletonEmbeddingBagCollection(_tables(), ["item_id"])
    with pytest.raises(ValueError, match=r"singleton_features \['nope'\] are not features"):
        SingletonEmbeddingBagCollection(_tables(), ["nope"])


def test_detect_singleton_features() -> None:
    gen = torch.Generator().manual_seed(5)
    batches = [_kjt(16, gen, False) for _ in range(3)]
    found = detect_singleton_features(batches)
    # "age"/"genres" draw lengths 0-3: with 48 draws per feature, all-ones is (1/4)^48.
    assert sorted(found) == sorted(SINGLETONS)
    assert detect_singleton_features(batches + [_kjt(2, gen, False, singleton_len=2)]) == []


def _sharded_equals_ebc(rank: int, world_size: int) -> None:
    torch.manual_seed(0)
    ebc = EmbeddingBagCollection(_tables())
    single = SingletonEmbeddingBagCollection.from_embedding_bag_collection(ebc, SINGLETONS)
    ebc_full = {k: v.detach().clone() for k, v in ebc.state_dict().items()}
    dmp_ebc = shard_table_wise(copy.deepcopy(ebc), world_size)
    dmp_single = shard_table_wise(single, world_size)
    kjt = _kjt(8, torch.Generator().manual_seed(20 + rank), False)

    expected, got = dmp_ebc(kjt).wait(), dmp_single(kjt)
    assert got.keys() == expected.keys()
    assert torch.equal(got.values(), expected.values())
    probe = torch.randn(expected.values().shape, generator=torch.Generator().manual_seed(rank))
    (expected.values() * probe).sum().backward()
    (got.values() * probe).sum().backward()

    # Both applied one in-backward SGD step; compare the updated tables by name.
    by_table = lambda tables: {k.split(".")[-2]: v for k, v in tables.items()}  # noqa: E731
    after_ebc, after_single = by_table(local_tables(dmp_ebc)), by_table(local_tables(dmp_single))
    assert after_ebc.keys() == after_single.keys() and after_ebc
    for table in after_ebc:
        torch.testing.assert_close(after_single[table], after_ebc[table], rtol=0, atol=1e-6, msg=table)
        assert not torch.equal(after_ebc[table], ebc_full[f"embedding_bags.{table}.weight"]), table


def test_sharded_two_ranks_equals_embedding_bag_collection() -> None:
    run_on_ranks(_sharded_equals_ebc, 2)
