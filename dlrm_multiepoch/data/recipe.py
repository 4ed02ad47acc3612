"""What a source tells preprocessing: its rows as :class:`Chunk` s, and a :class:`Recipe`
(which columns are ids, how rows are split, how labels and dense features are made).

:func:`~dlrm_multiepoch.data.preprocess.preprocess` runs a recipe over the chunks.
"""

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Protocol, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa

from dlrm_multiepoch.data.val_design import UnseenShares

STAT_BLOCK = 1 << 22  # values per exactly-combined block of dense statistics
USER_FEATURE = "user"
ITEM_FEATURE = "item"


@dataclass
class Chunk:
    """Parsed rows of raw input, as a source hands them to :func:`~dlrm_multiepoch.data.preprocess.preprocess`.

    Args:
        rows: number of rows.
        ids: single-id feature -> raw values (any Arrow type; null = missing).
        hashed: single-id feature -> table rows already hashed by the source (0 = missing).
        bags: multi-hot feature -> Arrow list array of raw values (null items dropped).
        numbers: named per-row numbers the recipe's labels, dense features and split read.
        bad: rows to drop as malformed (counted by the source).
    """

    rows: int
    ids: Dict[str, pa.Array] = field(default_factory=dict)
    hashed: Dict[str, np.ndarray] = field(default_factory=dict)
    bags: Dict[str, pa.Array] = field(default_factory=dict)
    numbers: Dict[str, np.ndarray] = field(default_factory=dict)
    bad: Optional[np.ndarray] = None


def threshold_labels(column: str, thresholds: Dict[str, float]) -> Callable[..., Dict[str, np.ndarray]]:
    """A recipe's ``labels``: task ``t`` is 1 where the number ``column`` is at least ``thresholds[t]``."""
    return lambda numbers: {task: (numbers[column] >= t).astype(np.float32) for task, t in thresholds.items()}


def frame_chunk(frame: Any, features: Sequence[str], numbers: Dict[str, np.ndarray]) -> Chunk:
    """One chunk from an in-memory table (a pandas DataFrame: NaN and None are missing).

    Example::

        chunk = frame_chunk(frame, ["user", "item"], {"rating": rating})
    """
    ids = {f: pa.array(np.asarray(frame[f].to_numpy()), from_pandas=True) for f in features}
    return Chunk(rows=len(frame), ids=ids, numbers=dict(numbers))


@dataclass
class SplitPlan:
    """The split of every scanned row.

    Args:
        codes: ``int8 [rows]``: index into ``names``, or -1 for a row not kept.
        names: split names; must include ``"train"``.
        notes: log lines about the split (dropped rows, ...).
        times: every row's time on a time split (what orders them; None: a random split),
            for ``--val_unseen_share measured``.
        gap_rows: rows of the ``--val_gap`` (not kept: between the train and validation rows).
    """

    codes: np.ndarray
    names: List[str]
    notes: List[str] = field(default_factory=list)
    times: Optional[np.ndarray] = None
    gap_rows: int = 0


# blocks() of the fit pass: yields (numbers of a block, the block's split codes).
Blocks = Callable[[], Iterator[Tuple[Dict[str, np.ndarray], np.ndarray]]]


class DenseTransform(Protocol):
    """Dense features from per-row numbers: fitted on train (or kept) rows, applied to all."""

    names: List[str]
    inputs: List[str]

    def fit(self, blocks: Blocks, train: int) -> None:
        """Fit on the blocks' rows whose split code is ``train`` (or on all kept rows)."""

    def apply(self, numbers: Dict[str, np.ndarray], rows: int) -> np.ndarray:
        """``float32 [rows, len(names)]`` from the inputs of ``rows`` rows."""


class Standardize:
    """Each input z-scored with train mean/std, plus a 0/1 missing flag (NaN and +-inf = missing).

    Equal, bit for bit, to numpy's ``mean``/``std`` over the train values when they fit
    one :data:`STAT_BLOCK`; beyond that, block sums combine with ``math.fsum``.

    Args:
        columns: names of the numbers to standardize.
        names: their dense names (default: ``columns``); each adds ``[name, name_missing]``.
    """

    def __init__(self, columns: Sequence[str], names: Optional[Sequence[str]] = None) -> None:
        self.inputs = list(columns)
        self.names = [n for c in (names or columns) for n in (c, f"{c}_missing")]
        self.stats: Dict[str, Tuple[float, float]] = {}

    def fit(self, blocks: Blocks, train: int) -> None:
        def train_values() -> Iterator[Dict[str, np.ndarray]]:
            for numbers, codes in blocks():
                values = {c: np.asarray(numbers[c][codes == train], dtype=np.float64) for c in self.inputs}
                yield {c: v[np.isfinite(v)] for c, v in values.items()}

        try:
            sums = _block_sums(train_values(), self.inputs, lambda v, c: v)
            means = {c: (math.fsum(s) / n if n else 0.0) for c, (s, n) in sums.items()}
            squares = _block_sums(train_values(), self.inputs, lambda v, c: np.square(v - means[c]))
            for c in self.inputs:
                n = sums[c][1]
                self.stats[c] = (means[c], math.sqrt(math.fsum(squares[c][0]) / n) if n else 0.0)
        except OverflowError:
            raise ValueError(
                f"dense features {self.names[::2]} (--dense_cols): values too large to standardise (|x| near 1e308); "
                "rescale them"
            ) from None

    def apply(self, numbers: Dict[str, np.ndarray], rows: int) -> np.ndarray:
        parts = []
        for c, name in zip(self.inputs, self.names[::2]):
            values = np.asarray(numbers[c], dtype=np.float64)
            mean, std = self.stats[c]
            missing = ~np.isfinite(values)
            with np.errstate(over="ignore", invalid="ignore"):
                z = ((values - mean) / (std if std > 0 else 1.0)).astype(np.float32)
            z[missing] = 0.0
            if not np.isfinite(z).all():  # beyond float32 after scaling (e.g. 1e300 where train values are ~1)
                raise ValueError(
                    f"dense feature {name!r} (--dense_cols): values too large to standardise (z-scores beyond "
                    f"float32); rescale it"
                )
            parts += [z, missing.astype(np.float32)]
        return np.stack(parts, axis=1) if parts else np.zeros((rows, 0), np.float32)


def _block_sums(
    values: Iterable[Dict[str, np.ndarray]], columns: Sequence[str], f: Callable[[np.ndarray, str], np.ndarray]
) -> Dict[str, Tuple[List[float], int]]:
    """Per column: sums of ``f(values)`` over consecutive blocks of exactly STAT_BLOCK
    values (the last may be short), and the number of values."""
    carry = {c: [] for c in columns}
    held = {c: 0 for c in columns}
    out: Dict[str, Tuple[List[float], int]] = {c: ([], 0) for c in columns}

    def flush(c: str, final: bool) -> None:
        buf = np.concatenate(carry[c]) if carry[c] else np.zeros(0)
        sums, n = out[c]
        while len(buf) >= STAT_BLOCK or (final and len(buf)):
            block, buf = buf[:STAT_BLOCK], buf[STAT_BLOCK:]
            sums.append(float(np.add.reduce(f(block, c))))
            n += len(block)
        out[c] = (sums, n)
        carry[c], held[c] = [buf], len(buf)

    for block in values:
        for c in columns:
            carry[c].append(block[c])
            held[c] += len(block[c])
            if held[c] >= STAT_BLOCK:
                flush(c, final=False)
    for c in columns:
        flush(c, final=True)
    return out


class CriteoLog:
    """TorchRec's Criteo transform (``BinaryCriteoUtils.tsv_to_npys``): integers shifted so
    the minimum over all kept rows is 2, then the natural log, in float32.

    Args:
        columns: names of the integer numbers (missing already 0).
    """

    def __init__(self, columns: Sequence[str]) -> None:
        self.inputs = list(columns)
        self.names = list(columns)
        self.minimum = 0

    def fit(self, blocks: Blocks, train: int) -> None:
        lows = [
            int(np.stack([numbers[c][codes >= 0] for c in self.inputs], axis=1).min())
            for numbers, codes in blocks()
            if (codes >= 0).any()
        ]
        self.minimum = min(lows) if lows else 0

    def apply(self, numbers: Dict[str, np.ndarray], rows: int) -> np.ndarray:
        dense = np.stack([np.asarray(numbers[c], dtype=np.int64) for c in self.inputs], axis=1)
        dense -= self.minimum - 2
        return np.log(dense, dtype=np.float32)


@dataclass
class Recipe:
    """How a source's parsed rows become a dataset.

    Args:
        name: dataset name.
        features: sparse features in KJT order; each gets table ``t_<feature>``. Raw
            ones get a frequency-ordered id map fitted on train; those in ``hashed_rows``
            keep their hashed row; those in ``bags`` are multi-hot.
        dense: the dense transform.
        tasks: label names.
        labels: per-row numbers -> task -> ``float32`` 0/1 labels.
        plan: ``(load, bad)`` -> :class:`SplitPlan`; ``load(name)`` reads a scanned number
            column whole, ``bad`` is the malformed-row mask.
        hashed_rows: feature -> rows of its hashed table (row 0 = missing).
        bags: multi-hot feature -> pooling (``sum`` or ``mean``).
        min_count: ids seen fewer times in train fold into row 0 (one value, or per feature).
        id_fit_splits: splits whose rows the id maps count (``("train", "pretrain")`` gives
            ids seen only in pre-training data their own rows).
        history_length: K > 0 adds the ``history`` feature (needs ``user`` and ``item``).
        history_time: the number ordering histories (None: a seeded order).
        seed: seed of that order.
        after_scan: the input files' scan reports (in file order) -> notes; raises when
            the files disagree (one format per dataset).
        val_weighting: ``--val_unseen_share`` parsed (None: every validation row weighs 1).
    """

    name: str
    features: List[str]
    dense: DenseTransform
    tasks: List[str]
    labels: Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]
    plan: Callable[[Callable[[str], np.ndarray], np.ndarray], SplitPlan]
    hashed_rows: Dict[str, int] = field(default_factory=dict)
    bags: Dict[str, str] = field(default_factory=dict)
    min_count: Union[int, Dict[str, int]] = 1
    id_fit_splits: Tuple[str, ...] = ("train",)
    history_length: int = 0
    history_time: Optional[str] = None
    seed: int = 0
    after_scan: Callable[[List[Dict[str, Any]]], List[str]] = field(default=lambda reports: [])
    val_weighting: Optional[UnseenShares] = None

    def min_count_of(self, feature: str) -> int:
        return self.min_count.get(feature, 1) if isinstance(self.min_count, dict) else self.min_count
