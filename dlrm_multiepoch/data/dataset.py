"""Encoded datasets: the table layout and the rows of each split (numpy only).

Every source (Book-Crossing, MovieLens, generic tables, Criteo TSV, TorchRec's Criteo
npy files) ends as an :class:`InteractionData`: embedding tables plus one
:class:`SplitSource` per split. A source is read by row ranges (``read``) or by row
indices (``take``), both returning an in-memory :class:`Split`; loaders never need a
whole split in memory.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple, Union

import numpy as np

from dlrm_multiepoch.names import POOLINGS  # re-exported: the sources check --multi_hot_pooling

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
        pooling: how the EBC pools a bag of several ids: ``"sum"`` or ``"mean"``; unset:
            mean for a table that serves the ``history`` feature (the history bag is the
            average of its items; for one id mean = sum), sum otherwise.
    """

    name: str
    num_embeddings: int
    feature_names: List[str]
    pooling: Optional[str] = None

    @property
    def pooling_mode(self) -> str:
        if self.pooling is not None:
            return self.pooling
        return "mean" if HISTORY_FEATURE in self.feature_names else "sum"


@dataclass
class Ragged:
    """A multi-hot column: row ``i`` holds ``values[offsets[i]:offsets[i + 1]]``.

    Args:
        values: ``int [total]`` ids of every row, row after row.
        offsets: ``int64 [N + 1]``, starting at 0.

    Example::

        genres = Ragged(np.array([3, 5, 1]), np.array([0, 2, 2, 3]))  # [3, 5], [], [1]
        genres.lengths()   # [2, 0, 1]
    """

    values: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def from_lengths(cls, values: np.ndarray, lengths: np.ndarray) -> "Ragged":
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(values, offsets)

    def take(self, rows: np.ndarray) -> "Ragged":
        rows = np.asarray(rows, dtype=np.int64)
        starts, lengths = self.offsets[rows], self.lengths()[rows]
        # Index of every kept value: its row's start plus its position in the bag.
        out_offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=out_offsets[1:])
        within = np.arange(out_offsets[-1]) - np.repeat(out_offsets[:-1], lengths)
        return Ragged(self.values[np.repeat(starts, lengths) + within], out_offsets)

    def slice(self, start: int, stop: int) -> "Ragged":
        offsets = self.offsets[start : stop + 1]
        return Ragged(self.values[offsets[0] : offsets[-1]], offsets - offsets[0])

    @classmethod
    def concat(cls, parts: Sequence["Ragged"]) -> "Ragged":
        return cls.from_lengths(np.concatenate([p.values for p in parts]), np.concatenate([p.lengths() for p in parts]))


SparseColumn = Union[np.ndarray, Ragged]


def _take(column: SparseColumn, rows: np.ndarray) -> SparseColumn:
    return column.take(rows) if isinstance(column, Ragged) else column[rows]


def _ids(column: SparseColumn) -> np.ndarray:
    return column.values if isinstance(column, Ragged) else column


@dataclass
class Split:
    """Encoded rows of one split, in memory; all columns have the same N rows.

    Args:
        sparse: feature -> ``int [N]`` ids (one id per row), or a :class:`Ragged`
            multi-hot column (a bag of ids per row).
        dense: ``float32 [N, num_dense]``.
        labels: task -> ``float32 [N]`` of 0/1.
        history: optional ``int [N, K]`` item ids, most recent first, padded with -1.
        slices: optional ``uint8 [N]`` slice codes: bit ``i`` set = the row belongs to the
            dataset's slice ``i`` (``InteractionData.slices``, e.g. ``unseen_user``).
    """

    sparse: Dict[str, SparseColumn]
    dense: np.ndarray
    labels: Dict[str, np.ndarray]
    history: Optional[np.ndarray] = None
    slices: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return int(self.dense.shape[0])

    @property
    def history_length(self) -> int:
        return 0 if self.history is None else int(self.history.shape[1])

    def take(self, rows: np.ndarray) -> "Split":
        return Split(
            sparse={k: _take(v, rows) for k, v in self.sparse.items()},
            dense=self.dense[rows],
            labels={k: v[rows] for k, v in self.labels.items()},
            history=None if self.history is None else self.history[rows],
            slices=None if self.slices is None else self.slices[rows],
        )

    def read(self, start: int, stop: int) -> "Split":
        return Split(
            sparse={
                k: v.slice(start, stop) if isinstance(v, Ragged) else v[start:stop] for k, v in self.sparse.items()
            },
            dense=self.dense[start:stop],
            labels={k: v[start:stop] for k, v in self.labels.items()},
            history=None if self.history is None else self.history[start:stop],
            slices=None if self.slices is None else self.slices[start:stop],
        )

    @classmethod
    def concat(cls, parts: Sequence["Split"]) -> "Split":
        if len(parts) == 1:
            return parts[0]
        first = parts[0]

        def cat(columns: List[SparseColumn]) -> SparseColumn:
            return Ragged.concat(columns) if isinstance(columns[0], Ragged) else np.concatenate(columns)

        return cls(
            sparse={k: cat([p.sparse[k] for p in parts]) for k in first.sparse},
            dense=np.concatenate([p.dense for p in parts]),
            labels={k: np.concatenate([p.labels[k] for p in parts]) for k in first.labels},
            history=None if first.history is None else np.concatenate([p.history for p in parts]),
            slices=None if first.slices is None else np.concatenate([p.slices for p in parts]),
        )

    def id_ranges(self) -> Dict[str, Tuple[int, int]]:
        """feature -> (min, max) id (history padding excluded); empty features omitted."""
        arrays = {k: _ids(v) for k, v in self.sparse.items()}
        if self.history is not None:
            arrays[HISTORY_FEATURE] = self.history[self.history != HISTORY_PAD]
        return {k: (int(v.min()), int(v.max())) for k, v in arrays.items() if v.size}

    def label_sums(self) -> Dict[str, float]:
        return {k: float(v.sum(dtype=np.float64)) for k, v in self.labels.items()}


class SplitSource(Protocol):
    """What loaders read: a split's rows by range or by index, never all at once.

    :class:`Split` (in memory), the stored column files of a preprocessed dataset and
    TorchRec's Criteo day files implement it.
    """

    def __len__(self) -> int: ...

    @property
    def history_length(self) -> int: ...

    def read(self, start: int, stop: int) -> Split:
        """Rows ``[start, stop)``, in memory."""

    def take(self, rows: np.ndarray) -> Split:
        """Rows ``rows`` (sorted indices read fastest), in memory."""

    def id_ranges(self) -> Dict[str, Tuple[int, int]]:
        """feature -> (min, max) id over the split."""

    def label_sums(self) -> Dict[str, float]:
        """task -> number of positive rows."""


@dataclass
class InteractionData:
    """A dataset ready for training: splits plus the embedding-table layout.

    Args:
        name: dataset name, used in logs and cache keys.
        tables: embedding tables; every sparse feature of every split belongs to one.
        dense_names: names of the dense columns.
        tasks: label names (e.g. ``["like", "love"]``).
        splits: ``"train"``, ``"test"`` and optionally ``"pretrain"``.
        multi_hot: features whose rows hold a bag of ids (a :class:`Ragged` column).
        slices: names of the row slices the splits' slice codes mark (bit ``i`` = slice
            ``i``), e.g. ``unseen_user``: the raw user id never occurs in the train split.
        encoding: per table, what the id map did (``min_count``, ids and rows folded into
            the unknown row, each split's share of rows in it), for logs and the run summary.
        row_weights: split -> slice code -> the weight of its rows in evaluation metrics
            (``--val_unseen_share``); splits not named weigh every row 1.
        identity: what the data is (:mod:`~dlrm_multiepoch.data.identity`: each source file's content and
            the encoding flags), set by ``load_dataset``; empty for data built otherwise.
    """

    name: str
    tables: List[TableSpec]
    dense_names: List[str]
    tasks: List[str]
    splits: Dict[str, SplitSource] = field(default_factory=dict)
    multi_hot: List[str] = field(default_factory=list)
    slices: List[str] = field(default_factory=list)
    encoding: Dict[str, Dict[str, float]] = field(default_factory=dict)
    row_weights: Dict[str, Dict[int, float]] = field(default_factory=dict)
    identity: Dict[str, Any] = field(default_factory=dict)

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
        for table in self.tables:
            if table.pooling_mode not in POOLINGS:
                raise ValueError(f"table {table.name!r}: pooling {table.pooling!r} is not one of {POOLINGS}")
        for split_name, split in self.splits.items():
            for feature, (lo, hi) in split.id_ranges().items():
                table = self.table_of(feature)
                if lo < 0 or hi >= table.num_embeddings:
                    raise ValueError(
                        f"{split_name} split: feature {feature!r} has id range [{lo}, {hi}] but table "
                        f"{table.name!r} has {table.num_embeddings} rows (valid ids 0..{table.num_embeddings - 1})"
                    )

    def summary(self) -> str:
        lines = [f"dataset {self.name}: tasks {self.tasks}, dense {self.dense_names}"]
        for t in self.tables:
            bags = f", {t.pooling_mode}-pooled bags" if set(t.feature_names) & set(self.multi_hot) else ""
            lines.append(f"  table {t.name}: {t.num_embeddings} rows, features {t.feature_names}{bags}")
        for name, split in self.splits.items():
            n = max(len(split), 1)
            pos = ", ".join(f"{k} {int(v)} ({v / n:.3f})" for k, v in split.label_sums().items()) or "not counted"
            lines.append(f"  {name}: {len(split)} rows; positives: {pos}")
        return "\n".join(lines)
