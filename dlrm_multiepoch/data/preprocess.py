"""Preprocessing: raw rows, chunk by chunk, into a dataset folder, with bounded memory.

A source parses its input into :class:`Chunk` s and describes the dataset with a
:class:`Recipe` (which columns are ids, how rows are split, how labels and dense
features are made). :func:`preprocess` then makes four passes, the first over the
input, the others over scratch files beside the output:

1. scan: each chunk's raw ids get stacked codes (:class:`~dlrm_multiepoch.data.vocab.ValueCoder`);
   ids, numbers and bag lengths are spilled.
2. plan: the source assigns every row a split (it may load per-row numbers such as
   timestamps: 8 bytes a row).
3. fit: id maps (frequency order, ``min_count`` folding) and dense statistics, from the
   train rows.
4. write: every row, encoded, to its split's column files (:mod:`~dlrm_multiepoch.data.store`).

Resident memory: one chunk, arrays the size of each vocabulary, the split plan (1 byte
a row) and what the plan loads; with ``--history_length``, about 40 bytes a row more.
Results do not depend on the chunk or block sizes (dense statistics are summed in fixed
blocks of :data:`STAT_BLOCK` values and combined exactly).
"""

import hashlib
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Protocol, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dlrm_multiepoch.data.dataset import HISTORY_FEATURE, UNKNOWN_ID, Ragged, TableSpec
from dlrm_multiepoch.data.history import history_blocks
from dlrm_multiepoch.data.npy import SpillColumn
from dlrm_multiepoch.data.store import DatasetWriter, commit
from dlrm_multiepoch.data.vocab import IdCounter, ValueCoder, frequency_ids, hashed_ids, values_digest, write_vocab

BLOCK_ROWS = 1 << 17  # rows per block of the passes over scratch files
STAT_BLOCK = 1 << 22  # values per exactly-combined block of dense statistics
USER_FEATURE = "user"
ITEM_FEATURE = "item"


@dataclass
class Chunk:
    """Parsed rows of raw input, as a source hands them to :func:`preprocess`.

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
    """

    codes: np.ndarray
    names: List[str]
    notes: List[str] = field(default_factory=list)


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
    """Each input z-scored with train mean/std, plus a 0/1 missing flag (NaN = missing).

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
                yield {c: v[~np.isnan(v)] for c, v in values.items()}

        sums = _block_sums(train_values(), self.inputs, lambda v, c: v)
        means = {c: (math.fsum(s) / n if n else 0.0) for c, (s, n) in sums.items()}
        squares = _block_sums(train_values(), self.inputs, lambda v, c: np.square(v - means[c]))
        for c in self.inputs:
            n = sums[c][1]
            self.stats[c] = (means[c], math.sqrt(math.fsum(squares[c][0]) / n) if n else 0.0)

    def apply(self, numbers: Dict[str, np.ndarray], rows: int) -> np.ndarray:
        parts = []
        for c in self.inputs:
            values = np.asarray(numbers[c], dtype=np.float64)
            mean, std = self.stats[c]
            missing = np.isnan(values)
            z = (values - mean) / (std if std > 0 else 1.0)
            z[missing] = 0.0
            parts += [z.astype(np.float32), missing.astype(np.float32)]
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
        history_length: K > 0 adds the ``history`` feature (needs ``user`` and ``item``).
        history_time: the number ordering histories (None: a seeded order).
        seed: seed of that order.
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
    history_length: int = 0
    history_time: Optional[str] = None
    seed: int = 0

    def min_count_of(self, feature: str) -> int:
        return self.min_count.get(feature, 1) if isinstance(self.min_count, dict) else self.min_count


class _Scratch:
    """Named spill columns in one folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.columns: Dict[str, SpillColumn] = {}

    def append(self, name: str, values: np.ndarray) -> None:
        if name not in self.columns:
            file = self.folder / hashlib.sha1(name.encode()).hexdigest()[:16]
            self.columns[name] = SpillColumn(file, values.dtype, values.shape[1:])
        self.columns[name].append(values)

    def read(self, name: str, start: int, stop: int) -> np.ndarray:
        return self.columns[name].read(start, stop)

    def read_all(self, name: str) -> np.ndarray:
        if name not in self.columns:
            raise KeyError(f"no scanned column {name!r}; scanned: {sorted(self.columns)}")
        return self.columns[name].read_all()

    def close(self) -> None:
        for column in self.columns.values():
            column.close()


def _bag_lengths(values: pa.Array) -> Tuple[np.ndarray, pa.Array]:
    """Per-row lengths (null lists: 0) and the flattened items of a list array."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(values), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return lengths, pc.list_flatten(values)


def _drop_missing_items(lengths: np.ndarray, codes: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    keep = codes >= 0
    if keep.all():
        return lengths, codes
    row = np.repeat(np.arange(len(lengths)), lengths)
    return np.bincount(row[keep], minlength=len(lengths)).astype(np.int64), codes[keep]


def preprocess(
    recipe: Recipe,
    chunks: Iterable[Chunk],
    output: Path,
    log: Callable[[str], None] = print,
    notes: Optional[List[str]] = None,
    extra_meta: Optional[Dict[str, object]] = None,
    block_rows: Optional[int] = None,
) -> List[str]:
    """Encode ``chunks`` by ``recipe`` into the dataset folder ``output``; returns the notes.

    The folder appears complete or not at all (written under a temporary name, renamed).
    ``notes`` (the source's own log lines) may grow while ``chunks`` is consumed.

    Example::

        notes = preprocess(recipe, read_criteo_chunks(path, cfg), Path("prepped/criteo"))
    """
    output = Path(output)
    notes = notes if notes is not None else []
    tmp = output.with_name(f".{output.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "scratch").mkdir(parents=True)
    try:
        job = _Job(recipe, tmp, log, block_rows or BLOCK_ROWS)
        job.scan(chunks)
        job.plan_splits(notes)
        job.fit()
        job.write(notes, extra_meta or {})
        shutil.rmtree(tmp / "scratch")
        commit(tmp, output)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return notes


class _Job:
    """State shared by the four passes of :func:`preprocess`."""

    def __init__(self, recipe: Recipe, tmp: Path, log: Callable[[str], None], block_rows: int) -> None:
        self.r = recipe
        self.tmp = tmp
        self.log = log
        self.block_rows = block_rows
        self.scratch = _Scratch(tmp / "scratch")
        self.raw = [f for f in recipe.features if f not in recipe.hashed_rows]
        self.coders = {f: ValueCoder(self.scratch.folder, f"coder{i}") for i, f in enumerate(self.raw)}
        self.rows = 0
        self.plan: Optional[SplitPlan] = None
        self.to_global: Dict[str, np.ndarray] = {}
        self.values: Dict[str, pa.Array] = {}
        self.id_of: Dict[str, np.ndarray] = {}  # feature -> table row of each stacked code (raw) or hash row
        self.tables: List[TableSpec] = []
        self.id_maps: Dict[str, Dict[str, str]] = {}
        if recipe.history_length and {USER_FEATURE, ITEM_FEATURE} - set(recipe.features):
            raise ValueError(
                f"{recipe.name}: --history_length needs {USER_FEATURE!r} and {ITEM_FEATURE!r} features; "
                f"this dataset has {recipe.features}"
            )

    # -- 1. scan ----------------------------------------------------------------

    def scan(self, chunks: Iterable[Chunk]) -> None:
        start = time.perf_counter()
        for chunk in chunks:
            n = chunk.rows
            for f in self.r.features:
                if f in self.r.bags:
                    lengths, items = _bag_lengths(chunk.bags[f])
                    lengths, codes = _drop_missing_items(lengths, self.coders[f].encode(items))
                    self.scratch.append(f"len:{f}", lengths)
                    self.scratch.append(f"bag:{f}", codes)
                elif f in self.r.hashed_rows:
                    self.scratch.append(f"id:{f}", np.asarray(chunk.hashed[f]))  # the source's dtype (int32)
                else:
                    self.scratch.append(f"id:{f}", self.coders[f].encode(chunk.ids[f]))
            for name, values in chunk.numbers.items():
                self.scratch.append(f"num:{name}", np.asarray(values))
            bad = np.zeros(n, bool) if chunk.bad is None else np.asarray(chunk.bad, bool)
            self.scratch.append("bad", bad)
            self.rows += n
        for f, coder in self.coders.items():
            self.values[f], self.to_global[f] = coder.finish()
        self.log(f"preprocess {self.r.name}: scanned {self.rows:,} rows in {time.perf_counter() - start:.1f}s")

    # -- 2. plan ----------------------------------------------------------------

    def plan_splits(self, notes: List[str]) -> None:
        bad = self.scratch.read_all("bad") if self.rows else np.zeros(0, bool)
        plan = self.r.plan(lambda name: self.scratch.read_all(f"num:{name}"), bad)
        if len(plan.codes) != self.rows or "train" not in plan.names:
            raise ValueError(f"{self.r.name}: the split plan must cover {self.rows} rows and name 'train'")
        self.plan = plan
        notes.extend(plan.notes)

    def blocks(self) -> Iterator[Tuple[int, int]]:
        for a in range(0, self.rows, self.block_rows):
            yield a, min(self.rows, a + self.block_rows)

    def _codes(self, f: str, a: int, b: int) -> np.ndarray:
        """Global codes (raw features) or hash rows of rows ``[a, b)``; -1 = missing."""
        stacked = self.scratch.read(f"id:{f}", a, b)
        if f in self.r.hashed_rows:
            return stacked
        return _lookup(self.to_global[f], stacked)

    # -- 3. fit -----------------------------------------------------------------

    def fit(self) -> None:
        start = time.perf_counter()
        train = self.plan.names.index("train")
        counters = {
            f: IdCounter(self.r.hashed_rows[f]) if f in self.r.hashed_rows else IdCounter(len(self.values[f]), True)
            for f in self.r.features
        }
        elements = {f: 0 for f in self.r.bags}
        for a, b in self.blocks():
            is_train = self.plan.codes[a:b] == train
            rows = np.arange(a, b)
            for f in self.r.features:
                if f in self.r.bags:
                    lengths = self.scratch.read(f"len:{f}", a, b)
                    e = elements[f]
                    codes = _lookup(self.to_global[f], self.scratch.read(f"bag:{f}", e, e + int(lengths.sum())))
                    elements[f] += len(codes)
                    mask = np.repeat(is_train, lengths)
                    counters[f].update(codes[mask], np.repeat(rows, lengths)[mask])
                else:
                    counters[f].update(self._codes(f, a, b)[is_train], rows[is_train])
        for f in self.r.features:
            self._fit_table(f, counters[f])
        self.r.dense.fit(self._number_blocks(self.r.dense.inputs), train)
        self.log(f"preprocess {self.r.name}: fitted id maps and dense statistics in {time.perf_counter() - start:.1f}s")

    def _fit_table(self, f: str, counter: IdCounter) -> None:
        name = f"t_{f}"
        features = [f]
        pooling = self.r.bags.get(f)  # unset: TableSpec's default (mean for the history's table)
        if f == ITEM_FEATURE and self.r.history_length:
            features.append(HISTORY_FEATURE)
        if f in self.r.hashed_rows:
            self.id_of[f] = hashed_ids(counter, self.r.min_count_of(f))
            rows = self.r.hashed_rows[f]
            digest = hashlib.sha256(np.ascontiguousarray(self.id_of[f]).tobytes()).hexdigest()
            self.id_maps[name] = {"kind": "hashed", "sha256": digest}
        else:
            id_of_global, kept = frequency_ids(counter, self.r.min_count_of(f))
            self.id_of[f] = id_of_global[self.to_global[f]] if len(self.to_global[f]) else np.zeros(0, np.int64)
            rows = len(kept) + 1
            kept_values = self.values[f].take(pa.array(kept, pa.int64()))
            (self.tmp / "vocab").mkdir(exist_ok=True)
            write_vocab(self.tmp / "vocab" / f"{name}.parquet", kept_values, counter.counts[kept])
            digest = values_digest(kept_values)
            self.id_maps[name] = {"kind": "frequency", "sha256": digest, "file": f"vocab/{name}.parquet"}
        self.tables.append(TableSpec(name, int(rows), features, pooling))

    def _number_blocks(self, names: Sequence[str]) -> Blocks:
        def blocks() -> Iterator[Tuple[Dict[str, np.ndarray], np.ndarray]]:
            for a, b in self.blocks():
                yield {n: self.scratch.read(f"num:{n}", a, b) for n in names}, self.plan.codes[a:b]

        return blocks

    # -- 4. write ---------------------------------------------------------------

    def _ids(self, f: str, a: int, b: int) -> np.ndarray:
        stacked = self.scratch.read(f"id:{f}", a, b)
        if f in self.r.hashed_rows:
            return self.id_of[f][stacked]
        return _lookup(self.id_of[f], stacked, missing=UNKNOWN_ID)

    def _history(self) -> Optional[SpillColumn]:
        """Histories of the kept rows, in row order, spilled (None without --history_length)."""
        if not self.r.history_length:
            return None
        kept = np.flatnonzero(self.plan.codes >= 0)
        user = _lookup(self.to_global[USER_FEATURE], self.scratch.read_all(f"id:{USER_FEATURE}"))[kept]
        item_stacked = self.scratch.read_all(f"id:{ITEM_FEATURE}")[kept]
        item_key = _lookup(self.to_global[ITEM_FEATURE], item_stacked)
        item_id = _lookup(self.id_of[ITEM_FEATURE], item_stacked, missing=UNKNOWN_ID)
        del item_stacked
        times = None if self.r.history_time is None else self.scratch.read_all(f"num:{self.r.history_time}")[kept]
        train = np.flatnonzero(self.plan.codes[kept] == self.plan.names.index("train"))
        spill = SpillColumn(self.scratch.folder / "history", np.int64, (self.r.history_length,))
        for _, block in history_blocks(user, item_key, item_id, train, self.r.history_length, times, self.r.seed):
            spill.append(block)
        spill.close()
        return spill

    def write(self, notes: List[str], extra: Dict[str, object]) -> None:
        start = time.perf_counter()
        names = self.plan.names
        history = self._history()
        split_rows = {s: int((self.plan.codes == i).sum()) for i, s in enumerate(names)}
        writer = DatasetWriter(
            self.tmp, self.tables, list(self.r.bags), len(self.r.dense.names), self.r.tasks, split_rows,
            self.r.history_length,
        )
        inputs = sorted({k[4:] for k in self.scratch.columns if k.startswith("num:")})
        described = [f for f in (USER_FEATURE, ITEM_FEATURE) if f in self.raw and f not in self.r.bags]
        seen = {(s, f): np.zeros(len(self.values[f]), bool) for s in names for f in described}
        unknown = {(s, f): 0 for s in names for f in described}
        elements = {f: 0 for f in self.r.bags}
        kept_before = 0
        for a, b in self.blocks():
            codes = self.plan.codes[a:b]
            numbers = {n: self.scratch.read(f"num:{n}", a, b) for n in inputs}
            labels = self.r.labels(numbers)
            dense = self.r.dense.apply({n: numbers[n] for n in self.r.dense.inputs}, b - a)
            ids: Dict[str, object] = {}
            for f in self.r.features:
                if f in self.r.bags:
                    lengths = self.scratch.read(f"len:{f}", a, b)
                    e = elements[f]
                    stacked = self.scratch.read(f"bag:{f}", e, e + int(lengths.sum()))
                    elements[f] += len(stacked)
                    ids[f] = Ragged.from_lengths(_lookup(self.id_of[f], stacked, missing=UNKNOWN_ID), lengths)
                else:
                    ids[f] = self._ids(f, a, b)
            kept = codes >= 0
            hist = None if history is None else history.read(kept_before, kept_before + int(kept.sum()))
            for i, s in enumerate(names):
                mask = codes == i
                if not mask.any():
                    continue
                rows = np.flatnonzero(mask)
                sparse = {f: (v.take(rows) if isinstance(v, Ragged) else v[mask]) for f, v in ids.items()}
                writer.append(
                    s,
                    sparse,
                    dense[mask],
                    {t: labels[t][mask] for t in self.r.tasks},
                    None if hist is None else hist[mask[kept]],
                )
                for f in described:
                    g = self._codes(f, a, b)[mask]
                    seen[s, f][g[g >= 0]] = True
                    unknown[s, f] += int((sparse[f] == UNKNOWN_ID).sum())
            kept_before += int(kept.sum())
        writer.close()
        for s in names:
            parts = [f"{self.r.name} {s}: {split_rows[s]} rows"]
            if split_rows[s]:
                for f in described:
                    share = unknown[s, f] / split_rows[s]
                    parts.append(f"{int(seen[s, f].sum())} {f}s ({share:.1%} of rows in the unknown row)")
            notes.append(", ".join(parts))
        writer.write_meta(
            self.r.name, self.r.dense.names, notes, {"id_maps": self.id_maps, "source_rows": self.rows, **extra}
        )
        self.scratch.close()
        elapsed = time.perf_counter() - start
        self.log(f"preprocess {self.r.name}: wrote {sum(split_rows.values()):,} rows in {elapsed:.1f}s")


def _lookup(table: np.ndarray, codes: np.ndarray, missing: int = -1) -> np.ndarray:
    """``table[codes]`` with ``missing`` where a code is -1."""
    if len(table) == 0:
        return np.full(len(codes), missing, dtype=np.int64)
    return np.where(codes >= 0, table[np.maximum(codes, 0)], missing)
