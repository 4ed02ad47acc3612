"""Preprocessing: raw rows, chunk by chunk, into a dataset folder, with bounded memory.

A source parses its input into :class:`~dlrm_multiepoch.data.recipe.Chunk` s and
describes the dataset with a :class:`~dlrm_multiepoch.data.recipe.Recipe` (which columns
are ids, how rows are split, how labels and dense features are made). :func:`preprocess` then makes four passes, the first over the
input, the others over scratch files beside the output:

1. scan: each input file on its own (:mod:`~dlrm_multiepoch.data.scan`; in worker
   processes with ``workers`` > 1): raw ids get stacked codes
   (:class:`~dlrm_multiepoch.data.vocab.ValueCoder`); ids, numbers and bag lengths are
   spilled. The files' parts are then read one after the other as one scan.
2. plan: the source assigns every row a split (it may load per-row numbers such as
   timestamps: 8 bytes a row).
3. fit: id maps (frequency order, ``min_count`` folding) from the train rows (or the
   recipe's ``id_fit_splits``), dense statistics from the train rows.
4. write: every row, encoded, to its split's column files (:mod:`~dlrm_multiepoch.data.store_writer`).

Resident memory: one chunk, arrays the size of each vocabulary, the split plan (1 byte
a row) and what the plan loads; with ``--history_length``, about 40 bytes a row more.
Results do not depend on the chunk or block sizes (dense statistics are summed in fixed
blocks of :data:`~dlrm_multiepoch.data.recipe.STAT_BLOCK` values and combined exactly).
"""

import hashlib
import resource
import shutil
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa

from dlrm_multiepoch.data.cache import temporary_folder
from dlrm_multiepoch.data.dataset import HISTORY_FEATURE, UNKNOWN_ID, Ragged, TableSpec
from dlrm_multiepoch.data.history import history_blocks
from dlrm_multiepoch.data.npy import SpillColumn
from dlrm_multiepoch.data.recipe import ITEM_FEATURE, USER_FEATURE, Blocks, Chunk, Recipe, SplitPlan
from dlrm_multiepoch.data.store_writer import DatasetWriter, commit
from dlrm_multiepoch.data.scan import FileInput, ScanSpec, ScanView, scan_chunks, scan_files
from dlrm_multiepoch.data.val_design import unseen_codes, val_row_weights
from dlrm_multiepoch.data.vocab import IdCounter, frequency_ids, hashed_ids, values_digest, write_vocab

BLOCK_ROWS = 1 << 17  # rows per block of the passes over scratch files


def preprocess(
    recipe: Recipe,
    inputs: Union[Sequence[FileInput], Iterable[Chunk]],
    output: Path,
    log: Callable[[str], None] = print,
    notes: Optional[List[str]] = None,
    extra_meta: Optional[Dict[str, object]] = None,
    block_rows: Optional[int] = None,
    workers: int = 1,
) -> List[str]:
    """Encode ``inputs`` by ``recipe`` into the dataset folder ``output``; returns the notes.

    Args:
        recipe: how rows become the dataset.
        inputs: input files (:class:`~dlrm_multiepoch.data.scan.FileInput`, read in this
            order, ``workers`` at a time) or the chunks of one input.
        output: the folder; it appears complete or not at all (written under a
            temporary name, renamed).
        log: where progress lines go.
        notes: the source's own log lines (may grow while the chunks are consumed).
        extra_meta: more entries for ``meta.json``.
        block_rows: rows per block of the later passes (default :data:`BLOCK_ROWS`).
        workers: processes scanning input files at once; the result does not depend on it.

    Example::

        notes = preprocess(recipe, [FileInput(Path(p), read) for p in days], Path("prepped/criteo"), workers=4)
    """
    output = Path(output)
    notes = notes if notes is not None else []
    tmp = temporary_folder(output)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        job = _Job(recipe, tmp, log, block_rows or BLOCK_ROWS)
        job.scan(inputs, workers, notes)
        job.plan_splits(notes)
        job.fit()
        job.write(notes, {**(extra_meta or {}), "row_weights": job.row_weights(notes)})
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
        self.spec = ScanSpec(tuple(recipe.features), tuple(recipe.bags), tuple(recipe.hashed_rows))
        self.raw = self.spec.raw
        self.folder = tmp / "scratch"
        self.scratch: Optional[ScanView] = None
        self.rows = 0
        self.plan: Optional[SplitPlan] = None
        self.to_global: Dict[str, np.ndarray] = {}
        self.values: Dict[str, pa.Array] = {}
        self.id_of: Dict[str, np.ndarray] = {}  # feature -> table row of each stacked code (raw) or hash row
        self.tables: List[TableSpec] = []
        self.id_maps: Dict[str, Dict[str, str]] = {}
        # The per-row slices: the raw user/item id never occurs in the train split.
        self.described = [f for f in (USER_FEATURE, ITEM_FEATURE) if f in self.raw and f not in recipe.bags]
        self.slices = [f"unseen_{f}" for f in self.described]
        self.in_train: Dict[str, np.ndarray] = {}  # described feature -> global code seen in train
        self.encoding: Dict[str, Dict[str, float]] = {}
        if recipe.history_length and {USER_FEATURE, ITEM_FEATURE} - set(recipe.features):
            raise ValueError(
                f"{recipe.name}: --history_length needs {USER_FEATURE!r} and {ITEM_FEATURE!r} features; "
                f"this dataset has {recipe.features}"
            )

    # -- 1. scan ----------------------------------------------------------------

    def scan(self, inputs: Union[Sequence[FileInput], Iterable[Chunk]], workers: int, notes: List[str]) -> None:
        start = _clock()
        if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(x, FileInput) for x in inputs):
            parts = scan_files(self.spec, inputs, self.folder, workers)
        else:
            parts = [scan_chunks(self.spec, inputs, self.folder / "part0", {})]
        notes.extend(self.r.after_scan([p.report for p in parts]))  # first: it names files that disagree
        self.scratch = ScanView(parts, self.raw)
        self.rows = self.scratch.rows
        for f in self.raw:
            self.values[f], self.to_global[f] = self.scratch.global_codes(f)
        self.log(f"preprocess {self.r.name}: scanned {self.rows:,} rows in {_since(start)}")

    # -- 2. plan ----------------------------------------------------------------

    def plan_splits(self, notes: List[str]) -> None:
        bad = self.scratch.read_all("bad") if self.rows else np.zeros(0, bool)
        plan = self.r.plan(lambda name: self.scratch.read_all(f"num:{name}"), bad)
        if len(plan.codes) != self.rows or "train" not in plan.names:
            raise ValueError(f"{self.r.name}: the split plan must cover {self.rows} rows and name 'train'")
        missing = [s for s in self.r.id_fit_splits if s not in plan.names]
        if missing:
            raise ValueError(f"--id_maps: {self.r.name} has no {missing} split to fit id maps on (it has {plan.names})")
        self.plan = plan
        notes.extend(plan.notes)

    def blocks(self) -> Iterator[Tuple[int, int]]:
        for a in range(0, self.rows, self.block_rows):
            yield a, min(self.rows, a + self.block_rows)

    def _codes(self, f: str, a: int, b: int) -> np.ndarray:
        """Global codes (raw features) or hash rows of rows ``[a, b)``; -1 = missing."""
        return self._global(f, self.scratch.read(f"id:{f}", a, b))

    def _global(self, f: str, stacked: np.ndarray) -> np.ndarray:
        """:meth:`_codes` of already read stacked codes."""
        return stacked if f in self.r.hashed_rows else _lookup(self.to_global[f], stacked)

    # -- 3. fit -----------------------------------------------------------------

    def fit(self) -> None:
        start = _clock()
        train = self.plan.names.index("train")
        fit = [self.plan.names.index(s) for s in self.r.id_fit_splits]
        self.in_train = {f: np.zeros(len(self.values[f]), bool) for f in self.described}
        counters = {
            f: IdCounter(self.r.hashed_rows[f]) if f in self.r.hashed_rows else IdCounter(len(self.values[f]), True)
            for f in self.r.features
        }
        elements = {f: 0 for f in self.r.bags}
        for a, b in self.blocks():
            is_train = self.plan.codes[a:b] == train
            is_fit = np.isin(self.plan.codes[a:b], fit)
            rows = np.arange(a, b)
            for f in self.r.features:
                if f in self.r.bags:
                    lengths = self.scratch.read(f"len:{f}", a, b)
                    e = elements[f]
                    codes = _lookup(self.to_global[f], self.scratch.read(f"bag:{f}", e, e + int(lengths.sum())))
                    elements[f] += len(codes)
                    mask = np.repeat(is_fit, lengths)
                    counters[f].update(codes[mask], np.repeat(rows, lengths)[mask])
                else:
                    codes = self._codes(f, a, b)
                    counters[f].update(codes[is_fit], rows[is_fit])
                    if f in self.in_train:
                        seen = codes[is_train]
                        self.in_train[f][seen[seen >= 0]] = True
        for f in self.r.features:
            self._fit_table(f, counters[f])
        self.r.dense.fit(self._number_blocks(self.r.dense.inputs), train)
        self.log(f"preprocess {self.r.name}: fitted id maps and dense statistics in {_since(start)}")

    def row_weights(self, notes: List[str]) -> Dict[str, Dict[str, float]]:
        """Split -> slice code -> weight of its rows, by ``--val_unseen_share`` (:mod:`val_design`)."""
        return val_row_weights(
            self.r.val_weighting, self.plan.codes, self.plan.names,
            lambda f: self._global(f, self.scratch.read_all(f"id:{f}")),
            self.in_train, self.slices, self.plan.times, self.plan.gap_rows, self.r.name, notes,
        )  # fmt: skip

    def _fit_table(self, f: str, counter: IdCounter) -> None:
        name = f"t_{f}"
        min_count = self.r.min_count_of(f)
        counts = counter.counts
        folded = (counts > 0) & (counts < min_count)
        self.encoding[name] = {
            "min_count": min_count,
            "fit_ids": int((counts > 0).sum()),
            "folded_ids": int(folded.sum()),
            "folded_fit_rows": int(counts[folded].sum()),
        }
        features = [f]
        pooling = self.r.bags.get(f)  # unset: TableSpec's default (mean for the history's table)
        if f == ITEM_FEATURE and self.r.history_length:
            features.append(HISTORY_FEATURE)
        if f in self.r.hashed_rows:
            self.id_of[f] = hashed_ids(counter, min_count)
            rows = self.r.hashed_rows[f]
            digest = hashlib.sha256(np.ascontiguousarray(self.id_of[f]).tobytes()).hexdigest()
            self.id_maps[name] = {"kind": "hashed", "sha256": digest}
        else:
            id_of_global, kept = frequency_ids(counter, min_count)
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

    def _ids(self, f: str, stacked: np.ndarray) -> np.ndarray:
        """Encoded ids (rows of the table) of stacked codes."""
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
        spill = SpillColumn(self.folder / "history", np.int64, (self.r.history_length,))
        for _, block in history_blocks(user, item_key, item_id, train, self.r.history_length, times, self.r.seed):
            spill.append(block)
        spill.close()
        return spill

    def write(self, notes: List[str], extra: Dict[str, object]) -> None:
        start = _clock()
        names = self.plan.names
        history = self._history()
        split_rows = {s: int((self.plan.codes == i).sum()) for i, s in enumerate(names)}
        writer = DatasetWriter(
            self.tmp, self.tables, list(self.r.bags), len(self.r.dense.names), self.r.tasks, split_rows,
            self.r.history_length, self.slices,
        )
        inputs = [k[4:] for k in self.scratch.names if k.startswith("num:")]
        described = self.described
        bits = {f: bit for bit, f in enumerate(described)}  # slice code bits, in the order of self.slices
        single = [f for f in self.r.features if f not in self.r.bags]
        seen = {(s, f): np.zeros(len(self.values[f]), bool) for s in names for f in described}
        unknown = {(s, f): 0 for s in names for f in single}
        elements = {f: 0 for f in self.r.bags}
        kept_before = 0
        for a, b in self.blocks():
            codes = self.plan.codes[a:b]
            numbers = {n: self.scratch.read(f"num:{n}", a, b) for n in inputs}
            labels = self.r.labels(numbers)
            dense = self.r.dense.apply({n: numbers[n] for n in self.r.dense.inputs}, b - a)
            ids: Dict[str, object] = {}
            stacked_of: Dict[str, np.ndarray] = {}  # read once: ids and unseen-id slices use them
            for f in self.r.features:
                if f in self.r.bags:
                    lengths = self.scratch.read(f"len:{f}", a, b)
                    e = elements[f]
                    stacked = self.scratch.read(f"bag:{f}", e, e + int(lengths.sum()))
                    elements[f] += len(stacked)
                    ids[f] = Ragged.from_lengths(_lookup(self.id_of[f], stacked, missing=UNKNOWN_ID), lengths)
                else:
                    stacked_of[f] = self.scratch.read(f"id:{f}", a, b)
                    ids[f] = self._ids(f, stacked_of[f])
            kept = codes >= 0
            hist = None if history is None else history.read(kept_before, kept_before + int(kept.sum()))
            raw_codes = {f: self._global(f, stacked_of[f]) for f in described}
            slice_codes = unseen_codes(raw_codes, self.in_train, bits, b - a, np.uint8)
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
                    slice_codes[mask],
                )
                for f in described:
                    g = raw_codes[f][mask]
                    seen[s, f][g[g >= 0]] = True
                for f in single:
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
        for f in single:
            report = self.encoding[f"t_{f}"]
            for s in names:
                report[f"{s}_unknown_row_share"] = unknown[s, f] / split_rows[s] if split_rows[s] else 0.0
            notes.append(_fold_note(f"t_{f}", report))
        writer.write_meta(
            self.r.name,
            self.r.dense.names,
            notes,
            {"id_maps": self.id_maps, "encoding": self.encoding, "source_rows": self.rows, **extra},
        )
        self.log(f"preprocess {self.r.name}: wrote {sum(split_rows.values()):,} rows in {_since(start)}")


def _clock() -> Tuple[float, float]:
    """Wall seconds, and CPU seconds of this process and its finished children (the scan's workers)."""
    own, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def _since(start: Tuple[float, float]) -> str:
    # CPU seconds too: on a shared machine they show the work, where wall time shows the machine's load.
    wall, cpu = _clock()
    return f"{wall - start[0]:.1f}s ({cpu - start[1]:.1f} CPU s)"


def _fold_note(table: str, r: Dict[str, float]) -> str:
    shares = ", ".join(f"{k[: -len('_unknown_row_share')]} {v:.1%}" for k, v in r.items() if k.endswith("_unknown_row_share"))
    return (
        f"table {table}: min_count {r['min_count']} folds {r['folded_ids']:,} of {r['fit_ids']:,} ids "
        f"({r['folded_ids'] / max(r['fit_ids'], 1):.1%}; {r['folded_fit_rows']:,} rows) into the unknown row; "
        f"rows in the unknown row: {shares}"
    )


def _lookup(table: np.ndarray, codes: np.ndarray, missing: int = -1) -> np.ndarray:
    """``table[codes]`` with ``missing`` where a code is -1."""
    if len(table) == 0:
        return np.full(len(codes), missing, dtype=np.int64)
    return np.where(codes >= 0, table[np.maximum(codes, 0)], missing)
