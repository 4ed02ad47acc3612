"""Singleton-bag gather: pooled features with exactly one id per bag skip the reduction.

Sum, mean or max pooling of a one-id bag is that id's row, so such features can use an
unpooled lookup (a gather: ``EmbeddingCollection``, sharded as a sequence table) instead of
the generic offsets + reduction path. ``SingletonEmbeddingBagCollection`` routes tables
whose features are all singleton to ``EmbeddingCollection``s and the rest to an
``EmbeddingBagCollection``, and returns the ``KeyedTensor`` one ``EmbeddingBagCollection``
over all tables would. Both inner modules are stock TorchRec modules, so
``DistributedModelParallel`` shards them with its default sharders.

Measured on CPU (torch 2.13, docs/BENCHMARKS.md) it is no faster than the stock EBC:
``F.embedding_bag`` with unit bags is as fast as a plain ``index_select`` there. The
benchmark is there to settle the GPU case.
"""

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch import nn
from torchrec.distributed.types import LazyAwaitable
from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig
from torchrec.modules.embedding_modules import (
    EmbeddingBagCollection,
    EmbeddingCollection,
    get_embedding_names_by_table,
)
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor, KeyedTensor


class SingletonEmbeddingBagCollection(nn.Module):
    """``EmbeddingBagCollection`` drop-in that gathers the rows of singleton features.

    Every feature in ``singleton_features`` must carry exactly one id per bag in every
    batch; a bag of another length (including an empty one) raises, naming the feature.
    A table is gathered only if all its features are singleton; declaring one feature of a
    table singleton but not another raises (the table cannot live in both modules).

    State dict: pooled tables under ``pooled.embedding_bags.<table>.weight``, gathered
    ones under ``gather.<dim>.embeddings.<table>.weight`` (``EmbeddingCollection`` needs one
    dim per module, so gathered tables are grouped by dim); see
    ``from_embedding_bag_collection`` to convert an existing module with its weights.

    Args:
        tables: the tables, as for ``EmbeddingBagCollection``.
        singleton_features: features with exactly one id per bag.
        is_weighted: as for ``EmbeddingBagCollection``; a singleton's row is scaled by
            its weight, which is what weighted sum pooling of one id gives.
        device: where to allocate the tables.

    Example::

        ebc = SingletonEmbeddingBagCollection(tables, singleton_features=["user_id", "item_id"])
        kt = ebc(kjt)  # same KeyedTensor as EmbeddingBagCollection(tables)(kjt)
    """

    def __init__(
        self,
        tables: List[EmbeddingBagConfig],
        singleton_features: Sequence[str],
        is_weighted: bool = False,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        singletons = set(singleton_features)
        known = {f for t in tables for f in t.feature_names}
        unknown = sorted(singletons - known)
        if unknown:
            raise ValueError(f"singleton_features {unknown} are not features of any table (features: {sorted(known)})")
        pooled_tables: List[EmbeddingBagConfig] = []
        gathered: Dict[int, List[EmbeddingConfig]] = {}
        for table in tables:
            declared = [f for f in table.feature_names if f in singletons]
            if not declared:
                pooled_tables.append(table)
                continue
            if len(declared) != len(table.feature_names):
                others = [f for f in table.feature_names if f not in singletons]
                raise ValueError(
                    f"table {table.name!r}: features {declared} are declared singleton but {others} are not; "
                    f"declare all of a table's features singleton or none"
                )
            gathered.setdefault(table.embedding_dim, []).append(_as_embedding_config(table))
        self._embedding_bag_configs = list(tables)
        self._is_weighted = is_weighted
        self.pooled: Optional[EmbeddingBagCollection] = (
            EmbeddingBagCollection(pooled_tables, is_weighted=is_weighted, device=device) if pooled_tables else None
        )
        self.gather = nn.ModuleDict(
            {str(dim): EmbeddingCollection(configs, device=device) for dim, configs in gathered.items()}
        )
        # Output keys and widths exactly as EmbeddingBagCollection(tables) would give them.
        self._embedding_names = [n for names in get_embedding_names_by_table(tables) for n in names]
        self._lengths_per_embedding = [t.embedding_dim for t in tables for _ in t.feature_names]
        self._pooled_features = [f for t in pooled_tables for f in t.feature_names]
        self._gather_features = {
            dim: [f for c in configs for f in c.feature_names] for dim, configs in gathered.items()
        }
        self._split_plans: Dict[Tuple[str, ...], Tuple[List[int], List[int]]] = {}

    @classmethod
    def from_embedding_bag_collection(
        cls, ebc: EmbeddingBagCollection, singleton_features: Sequence[str]
    ) -> "SingletonEmbeddingBagCollection":
        """Builds the module from an unsharded ``EmbeddingBagCollection``, copying its tables."""
        module = cls(
            ebc.embedding_bag_configs(), singleton_features, is_weighted=ebc.is_weighted(), device=ebc.device
        )
        with torch.no_grad():
            for config in ebc.embedding_bag_configs():
                target = module.table_weight(config.name)
                target.copy_(ebc.embedding_bags[config.name].weight)
        return module

    def table_weight(self, table: str) -> torch.Tensor:
        """The (unsharded) weight of ``table``, wherever it lives."""
        if self.pooled is not None and table in self.pooled.embedding_bags:
            return self.pooled.embedding_bags[table].weight
        for ec in self.gather.values():
            if table in ec.embeddings:
                return ec.embeddings[table].weight
        raise KeyError(f"no table named {table!r}")

    def embedding_bag_configs(self) -> List[EmbeddingBagConfig]:
        return self._embedding_bag_configs

    def is_weighted(self) -> bool:
        return self._is_weighted

    def forward(self, features: KeyedJaggedTensor) -> KeyedTensor:
        """Pools the non-singleton features, gathers the singleton ones; one ``KeyedTensor``."""
        parts = self._split(features)
        pieces: Dict[str, torch.Tensor] = {}
        if self.pooled is not None:
            kt = _wait(self.pooled(parts.pop(0)))
            pieces.update(zip(kt.keys(), kt.values().split(kt.length_per_key(), dim=1)))
        for part, ec in zip(parts, self.gather.values()):
            _check_singleton(part)
            weights = part.weights() if self._is_weighted else None
            if weights is not None:  # an EmbeddingCollection takes no per-id weights
                part = KeyedJaggedTensor(keys=part.keys(), values=part.values(), lengths=part.lengths(), stride=part.stride())
            rows = _wait(ec(part))
            offsets = part.offset_per_key()
            for key, jt in rows.items():
                # One id per bag: the sequence values are already one row per sample.
                value = jt.values()
                if weights is not None:
                    i = part.keys().index(_feature_of(key))
                    value = value * weights[offsets[i] : offsets[i + 1]].unsqueeze(1)
                pieces[key] = value
        columns = [pieces[k] for k in self._embedding_names]
        return KeyedTensor(
            keys=self._embedding_names,
            length_per_key=self._lengths_per_embedding,
            values=columns[0] if len(columns) == 1 else torch.cat(columns, dim=1),
        )

    def _split(self, features: KeyedJaggedTensor) -> List[KeyedJaggedTensor]:
        """One KJT per inner module (pooled first, then each gather), by a cached permutation."""
        keys = tuple(features.keys())
        plan = self._split_plans.get(keys)
        if plan is None:
            index = {k: i for i, k in enumerate(keys)}
            groups = [self._pooled_features] if self.pooled is not None else []
            groups += [self._gather_features[int(dim)] for dim in self.gather]
            missing = [f for g in groups for f in g if f not in index]
            if missing:
                raise ValueError(f"input KeyedJaggedTensor lacks features {missing} (has {list(keys)})")
            plan = ([index[f] for g in groups for f in g], [len(g) for g in groups])
            self._split_plans[keys] = plan
        order, sizes = plan
        if len(sizes) == 1 and order == list(range(len(keys))):
            return [features]  # one inner module, keys already in its order: no copy
        return features.permute(order).split(sizes)

def _as_embedding_config(table: EmbeddingBagConfig) -> EmbeddingConfig:
    return EmbeddingConfig(
        num_embeddings=table.num_embeddings,
        embedding_dim=table.embedding_dim,
        name=table.name,
        data_type=table.data_type,
        feature_names=list(table.feature_names),
        weight_init_max=table.weight_init_max,
        weight_init_min=table.weight_init_min,
        init_fn=table.init_fn,
    )


def _check_singleton(features: KeyedJaggedTensor) -> None:
    lengths = features.lengths()
    if lengths.numel() and not bool((lengths == 1).all()):  # one host sync per step
        per_feature = lengths.view(len(features.keys()), -1)
        for key, row in zip(features.keys(), per_feature):
            bad = (row != 1).nonzero()
            if bad.numel():
                i = int(bad[0])
                raise ValueError(
                    f"feature {key!r} is declared singleton but sample {i} has a bag of {int(row[i])} ids"
                )


def _feature_of(embedding_name: str) -> str:
    return embedding_name.split("@", 1)[0]


def _wait(output):  # sharded modules return LazyAwaitables
    return output.wait() if isinstance(output, LazyAwaitable) else output


def detect_singleton_features(batches: Iterable[KeyedJaggedTensor]) -> List[str]:
    """Features whose bags held exactly one id in every one of ``batches``.

    Example::

        singles = detect_singleton_features(b.sparse_features for b in itertools.islice(loader, 20))
    """
    seen: Dict[str, bool] = {}
    for kjt in batches:
        for key, lengths in zip(kjt.keys(), kjt.lengths().view(len(kjt.keys()), kjt.stride())):
            seen[key] = seen.get(key, True) and bool((lengths == 1).all())
    return [k for k, single in seen.items() if single]
