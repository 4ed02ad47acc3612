"""In-memory interaction datasets and the rank-sharded batch loader.

Every source loader (Book-Crossing, MovieLens, generic tables, Criteo TSV) produces an
:class:`InteractionData`: integer-encoded arrays per split plus the table layout. The
:class:`BatchLoader` turns one split into :class:`~dlrm_multiepoch.data.batch.Batch`
objects for one rank.
"""

from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional

import numpy as np
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_multiepoch.data.batch import Batch

# Row 0 of every table is the reserved "unknown" row: ids unseen in the train split
# (or folded rare ids) map there.
UNKNOWN_ID = 0
# History sequences are padded with this value; it never reaches a KJT.
HISTORY_PAD = -1
HISTORY_FEATURE = "history"


@dataclass(frozen=True)
class TableSpec:
    """One embedding table and the sparse features that look it up.

    Args:
        name: table name, as TorchRec's ``EmbeddingBagConfig.name``.
        num_embeddings: rows, including the reserved unknown row 0.
        feature_names: features served by this table (several share one table, e.g.
            the candidate item and the item-history sequence).
    """

    name: str
    num_embeddings: int
    feature_names: List[str]


@dataclass
class Split:
    """Encoded arrays of one split; all arrays have the same first dimension N.

    Args:
        sparse: feature -> ``int64 [N]`` ids (one id per sample).
        dense: ``float32 [N, num_dense]``.
        labels: task -> ``float32 [N]`` of 0/1.
        history: optional ``int64 [N, K]`` item ids, most recent first, padded with -1.
        slices: name -> ``bool [N]`` row subsets the evaluation also reports metrics on,
            e.g. ``unseen_user`` (the user id does not occur in the train split).
    """

    sparse: Dict[str, np.ndarray]
    dense: np.ndarray
    labels: Dict[str, np.ndarray]
    history: Optional[np.ndarray] = None
    slices: Dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.dense.shape[0])

    def take(self, index: np.ndarray) -> "Split":
        return Split(
            sparse={k: v[index] for k, v in self.sparse.items()},
            dense=self.dense[index],
            labels={k: v[index] for k, v in self.labels.items()},
            history=None if self.history is None else self.history[index],
            slices={k: v[index] for k, v in self.slices.items()},
        )


@dataclass
class InteractionData:
    """A dataset ready for training: splits plus the embedding-table layout.

    Args:
        name: dataset name, used in logs and cache keys.
        tables: embedding tables; every sparse feature of every split belongs to one.
        dense_names: names of the dense columns.
        tasks: label names (e.g. ``["like", "love"]``).
        splits: ``"train"``, ``"test"`` and optionally ``"pretrain"``.
        encoding: per table, how ids were encoded (``min_count``, ids and rows folded into
            the unknown row, share of each split's rows in it), for logs and the run summary.
    """

    name: str
    tables: List[TableSpec]
    dense_names: List[str]
    tasks: List[str]
    splits: Dict[str, Split] = field(default_factory=dict)
    encoding: Dict[str, Dict[str, float]] = field(default_factory=dict)

    @property
    def feature_names(self) -> List[str]:
        """KJT key order: every table's features, in table order."""
        return [f for t in self.tables for f in t.feature_names]

    def table_of(self, feature: str) -> TableSpec:
        for table in self.tables:
            if feature in table.feature_names:
                return table
        raise KeyError(f"feature {feature!r} belongs to no table; tables: {[t.name for t in self.tables]}")

    def validate(self) -> None:
        """Raise ``ValueError`` naming the feature and table for any out-of-range id."""
        for split_name, split in self.splits.items():
            arrays = dict(split.sparse)
            if split.history is not None:
                arrays[HISTORY_FEATURE] = split.history[split.history != HISTORY_PAD]
            for feature, ids in arrays.items():
                table = self.table_of(feature)
                if ids.size == 0:
                    continue
                lo, hi = int(ids.min()), int(ids.max())
                if lo < 0 or hi >= table.num_embeddings:
                    raise ValueError(
                        f"{split_name} split: feature {feature!r} has id range [{lo}, {hi}] but table "
                        f"{table.name!r} has {table.num_embeddings} rows (valid ids 0..{table.num_embeddings - 1})"
                    )
            for task, y in split.labels.items():
                if y.shape[0] != len(split):
                    raise ValueError(f"{split_name} split: label {task!r} has {y.shape[0]} rows, expected {len(split)}")

    def summary(self) -> str:
        lines = [f"dataset {self.name}: tasks {self.tasks}, dense {self.dense_names}"]
        for t in self.tables:
            lines.append(f"  table {t.name}: {t.num_embeddings} rows, features {t.feature_names}")
        for name, split in self.splits.items():
            pos = ", ".join(f"{k} {int(v.sum())} ({v.mean():.3f})" for k, v in split.labels.items())
            lines.append(f"  {name}: {len(split)} rows; positives: {pos}")
        return "\n".join(lines)


class BatchLoader:
    """Iterates one rank's share of a split in global batches.

    Each global batch of ``global_batch_size`` rows is cut into ``world_size`` equal
    parts; the last, short global batch is split as evenly as possible and each rank
    pads its part to a common size with weight-0 samples. Every row of the split is
    therefore seen exactly once per epoch across ranks, and all ranks run the same
    number of steps (a requirement of sharded lookups).

    Args:
        data: the dataset (for tables and feature order).
        split: which split of ``data`` to iterate.
        global_batch_size: rows per step across all ranks; must divide by ``world_size``.
        rank: this process's rank.
        world_size: number of ranks.
        shuffle: reshuffle rows each epoch (seeded by ``seed`` and ``epoch``).
        seed: base seed of the shuffle.

    Example::

        loader = BatchLoader(data, "train", 1024, rank, world_size, shuffle=True)
        for epoch in range(3):
            loader.set_epoch(epoch)
            for batch in loader:
                ...
    """

    def __init__(
        self,
        data: InteractionData,
        split: str,
        global_batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = False,
        seed: int = 0,
    ) -> None:
        if split not in data.splits:
            raise KeyError(f"dataset {data.name!r} has no split {split!r}; it has {sorted(data.splits)}")
        if global_batch_size <= 0 or global_batch_size % world_size:
            raise ValueError(
                f"--batch_size {global_batch_size} must be a positive multiple of the world size {world_size}"
            )
        self.data = data
        self.split = data.splits[split]
        self.global_batch_size = global_batch_size
        self.rank = rank
        self.world_size = world_size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self._features = data.feature_names
        self._has_history = self.split.history is not None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return -(-len(self.split) // self.global_batch_size)

    def __iter__(self) -> Iterator[Batch]:
        n = len(self.split)
        order = (
            np.random.default_rng([self.seed, self.epoch]).permutation(n)
            if self.shuffle
            else np.arange(n)
        )
        for start in range(0, n, self.global_batch_size):
            rows = order[start : start + self.global_batch_size]
            parts = np.array_split(rows, self.world_size)
            yield self._make_batch(parts[self.rank], per_rank=len(parts[0]))

    def _make_batch(self, rows: np.ndarray, per_rank: int) -> Batch:
        pad = per_rank - len(rows)
        part = self.split.take(rows)
        weights = np.concatenate([np.ones(len(rows), np.float32), np.zeros(pad, np.float32)])

        def padded(a: np.ndarray, fill: float) -> np.ndarray:
            if pad == 0:
                return a
            return np.concatenate([a, np.full((pad,) + a.shape[1:], fill, dtype=a.dtype)])

        lengths: List[np.ndarray] = []
        values: List[np.ndarray] = []
        for feature in self._features:
            if feature == HISTORY_FEATURE:
                hist = padded(part.history, HISTORY_PAD) if self._has_history else np.full((per_rank, 0), HISTORY_PAD)
                mask = hist != HISTORY_PAD
                lengths.append(mask.sum(axis=1, dtype=np.int32))
                values.append(hist[mask])
            else:
                lengths.append(np.ones(per_rank, dtype=np.int32))
                values.append(padded(part.sparse[feature], UNKNOWN_ID))
        kjt = KeyedJaggedTensor.from_lengths_sync(
            keys=self._features,
            values=torch.from_numpy(np.concatenate(values).astype(np.int64, copy=False)),
            lengths=torch.from_numpy(np.concatenate(lengths)),
        )
        return Batch(
            dense_features=torch.from_numpy(padded(part.dense, 0.0).astype(np.float32, copy=False)),
            sparse_features=kjt,
            labels={k: torch.from_numpy(padded(v, 0.0).astype(np.float32, copy=False)) for k, v in part.labels.items()},
            weights=torch.from_numpy(weights),
            row_index=torch.from_numpy(padded(rows.astype(np.int64, copy=False), -1)),
        )
