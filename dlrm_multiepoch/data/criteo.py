"""Criteo-format TSV: ``label``, 13 integer columns, 26 hex categoricals; empty = missing.

This is the format TorchRec's DLRM example reads (``torchrec.datasets.criteo``). The
file is parsed in blocks of bytes with numpy alone: tab and newline positions give
every field's bytes, and whole columns of fields are decoded at once
(:mod:`~dlrm_multiepoch.data.fields`; no Python loop per value: only values outside the
fast paths, such as ``0x``-prefixed hex or ``1.0``, go through ``int(..., 16)`` /
``pandas.to_numeric`` one by one, with their usual meaning).
Dense columns get TorchRec's transform (missing -> 0, shift so the minimum is 2,
natural log). Categoricals are hashed, ``1 + int(hex, 16) % (criteo_hash_size - 1)``,
so row 0 stays reserved for missing values; hashed rows no train row reached (and,
with ``--min_count``, rare ones) fold into it. Rows are in time order in Criteo logs,
so the last ``test_fraction`` of the file is the test split (and the last
``val_fraction`` of the rest the validation split). Several files (``--data_path
day_0,day_1,...``: Criteo's days, in time order) are one log, parsed
``--preprocess_workers`` files at a time (:mod:`~dlrm_multiepoch.data.scan`). Malformed lines (wrong
field count, non-0/1 label, dense value that is no integer of at most 2^53, non-hex
category) are dropped and counted. A folder of TorchRec's preprocessed ``day_N_*.npy`` files is read in place
(:mod:`~dlrm_multiepoch.data.torchrec_criteo`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Tuple

import numpy as np
import pandas as pd

from dlrm_multiepoch.config_section import validated
from dlrm_multiepoch.data.criteo_columns import CAT_FEATURE_COUNT, DENSE_FEATURES, INT_FEATURE_COUNT, SPARSE_FEATURES, TASK
from dlrm_multiepoch.data.encode import check_fraction, gap_share, last_share, nth_true, subsample
from dlrm_multiepoch.data.fields import TextBlock, decode_hex, decode_int
from dlrm_multiepoch.data.preprocess import preprocess
from dlrm_multiepoch.data.recipe import Chunk, CriteoLog, Recipe, SplitPlan
from dlrm_multiepoch.data.readers import describe_lines
from dlrm_multiepoch.data.scan import FileInput
from dlrm_multiepoch.data.source import DataFlags, Source
from dlrm_multiepoch.data.source_files import require_files
from dlrm_multiepoch.data.torchrec_criteo import is_torchrec_criteo_dir, open_torchrec_criteo


_FIELDS = 1 + INT_FEATURE_COUNT + CAT_FEATURE_COUNT
_TAB, _NEWLINE, _CR = 9, 10, 13


def hash_hex_fields(
    block: TextBlock, start: np.ndarray, end: np.ndarray, hash_size: int
) -> Tuple[np.ndarray, np.ndarray]:
    """Hashed rows ``1 + int(text, 16) % (hash_size - 1)`` of hex fields (0 for empty
    ones) and a mask of fields that are not hex. Fields outside the fast path (over 8
    digits, ``0x`` prefixes, ...) go through ``int(text, 16)`` itself."""
    value, ok = decode_hex(block, start, end)
    ids = np.where(end > start, 1 + value % (hash_size - 1), 0)
    bad = np.zeros(start.shape, dtype=bool)
    for index in zip(*np.nonzero(~ok & (end > start))):
        try:
            ids[index] = 1 + int(block.text(start[index], end[index]), 16) % (hash_size - 1)
        except ValueError:
            bad[index] = True
    return ids, bad


def parse_int_fields(block: TextBlock, start: np.ndarray, end: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Integer fields (0 for empty ones, as TorchRec) and a mask of non-integer fields.
    Fields outside the fast path (over 8 digits, ``1.0``, ``+5``, ...) mean what
    ``pandas.to_numeric`` says; beyond +-2^53 they are malformed."""
    value, ok = decode_int(block, start, end)
    value = np.where(end > start, value, 0)
    bad = np.zeros(start.shape, dtype=bool)
    slow = np.nonzero(~ok & (end > start))
    if len(slow[0]):
        texts = [block.text(start[i], end[i]) for i in zip(*slow)]
        parsed = pd.to_numeric(pd.Series(texts, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
        # Integers a float64 holds exactly: beyond that the int64 shift of TorchRec's transform overflows.
        good = np.isfinite(parsed) & (np.nan_to_num(parsed) % 1 == 0) & (np.abs(parsed) <= 2.0**53)
        value[tuple(a[good] for a in slow)] = parsed[good].astype(np.int64)
        bad[tuple(a[~good] for a in slow)] = True
    return value, bad


def parse_labels(block: TextBlock, start: np.ndarray, end: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """0/1 labels and a mask of labels that are not 0 or 1 (empty included)."""
    first = block.buf[np.minimum(start, block.size)]
    fast = (end - start == 1) & ((first == ord("0")) | (first == ord("1")))
    label = np.where(fast, first.astype(np.float64) - ord("0"), np.nan)
    slow = np.flatnonzero(~fast)
    if slow.size:
        texts = [block.text(start[i], end[i]) for i in slow]
        label[slow] = pd.to_numeric(pd.Series(texts, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
    return label, ~np.isin(label, [0.0, 1.0])


@dataclass
class ScanStats:
    """What the scan saw, for the log: lines read and the malformed ones."""

    lines: int = 0
    bad: int = 0
    first_bad: List[int] = field(default_factory=list)

    def add_bad(self, line_numbers: np.ndarray) -> None:
        self.bad += len(line_numbers)
        self.first_bad.extend(line_numbers[: max(0, 10 - len(self.first_bad))].tolist())


def parse_block(raw: bytes, first_line: int, hash_size: int, stats: ScanStats) -> Chunk:
    """Whole lines of a Criteo TSV (``first_line`` 0-based) -> a :class:`Chunk` of the
    lines with 40 fields; their malformed values mark rows ``bad``."""
    block = TextBlock(raw)
    buf = block.buf[: block.size]
    newlines = np.flatnonzero(buf == _NEWLINE)
    if block.size and buf[-1] != _NEWLINE:
        newlines = np.append(newlines, block.size)
    line_start = np.concatenate([[0], newlines[:-1] + 1])
    tabs = np.flatnonzero(buf == _TAB)
    per_line = np.diff(np.searchsorted(tabs, np.concatenate([[-1], newlines])))
    good = per_line == _FIELDS - 1
    numbers = first_line + 1 + np.arange(len(newlines))  # 1-based line numbers
    field_tabs = tabs[np.repeat(good, per_line)].reshape(-1, _FIELDS - 1)
    starts = np.concatenate([line_start[good, None], field_tabs + 1], axis=1)
    ends = np.concatenate([field_tabs, newlines[good, None]], axis=1)
    last = ends[:, -1]
    ends[:, -1] = last - ((last > starts[:, -1]) & (buf[np.maximum(last - 1, 0)] == _CR))  # CRLF files

    label, bad = parse_labels(block, starts[:, 0], ends[:, 0])
    dense = slice(1, 1 + INT_FEATURE_COUNT)
    sparse = slice(1 + INT_FEATURE_COUNT, _FIELDS)
    ints, not_int = parse_int_fields(block, starts[:, dense], ends[:, dense])
    ids, not_hex = hash_hex_fields(block, starts[:, sparse], ends[:, sparse], hash_size)
    bad |= not_int.any(axis=1) | not_hex.any(axis=1)
    id_type = np.int32 if hash_size <= np.iinfo(np.int32).max else np.int64
    chunk = Chunk(
        rows=int(good.sum()),
        numbers={"label": label, **{name: ints[:, j] for j, name in enumerate(DENSE_FEATURES)}},
        hashed={name: ids[:, j].astype(id_type) for j, name in enumerate(SPARSE_FEATURES)},
        bad=bad,
    )
    stats.lines += len(newlines)
    stats.add_bad(np.sort(np.concatenate([numbers[~good], numbers[good][bad]])))
    return chunk


def read_criteo_chunks(path: Path, hash_size: int, stats: ScanStats, chunk_bytes: int) -> Iterator[Chunk]:
    """The file in chunks of whole lines, about ``chunk_bytes`` each."""
    first_line = 0
    carry = b""
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk_bytes)
            data = carry + block
            cut = len(data) if not block else data.rfind(b"\n") + 1
            carry, data = data[cut:], data[:cut]
            if data:
                lines_before = stats.lines
                yield parse_block(data, first_line, hash_size, stats)
                first_line += stats.lines - lines_before
            if not block:
                return


def criteo_file_chunks(hash_size: int, chunk_bytes: int, path: Path, report: Dict[str, object]) -> Iterator[Chunk]:
    """A :class:`~dlrm_multiepoch.data.scan.FileInput` reader: one TSV's chunks; then
    ``report`` holds its lines read, malformed lines and the first ten of their numbers."""
    stats = ScanStats()
    yield from read_criteo_chunks(path, hash_size, stats, chunk_bytes)
    report.update(lines=stats.lines, bad=stats.bad, first_bad=stats.first_bad)


def _scan_notes(paths: List[Path], reports: List[Dict[str, object]]) -> List[str]:
    """Lines read and malformed lines dropped, per file (cached: load_dataset names the files)."""
    lines = sum(int(r["lines"]) for r in reports)
    notes = [f"criteo: {lines} lines read" + (f" from {len(paths)} files" if len(paths) > 1 else "")]
    for path, r in zip(paths, reports):
        if r["bad"]:
            where = f"{path.name} lines" if len(paths) > 1 else "lines"
            notes.append(
                f"criteo: dropped {r['bad']} malformed lines (not 40 tab-separated fields, a label other than 0/1, "
                f"a dense value that is no integer of at most 2^53 or a non-hex category): {where} "
                f"{describe_lines(list(r['first_bad']), total=int(r['bad']))}"
            )
    return notes


def criteo_recipe(cfg: DataFlags, paths: List[Path]) -> Recipe:
    """How parsed Criteo rows become the dataset (split, labels, dense transform); the
    files are consecutive in time, in the order given."""
    what = f"--data_path {cfg.data_path}"

    def plan(load: Callable[[str], np.ndarray], bad: np.ndarray) -> SplitPlan:
        # File order is time order: test is the last share of the usable rows, val the
        # last share of the rest. Masks and cut rows only: 2 bytes a row, not 8.
        kept = ~bad
        if cfg.max_rows is not None:  # a smoke-run option: row indices are fine here
            usable = np.flatnonzero(kept)
            kept = np.zeros(len(bad), dtype=bool)
            kept[usable[subsample(len(usable), cfg.max_rows, cfg.split_seed)]] = True
        n = int(kept.sum())
        n_test = int(round(n * cfg.test_fraction))
        if n_test == 0 or n_test == n:
            raise ValueError(
                f"{what}: {n} usable rows leave an empty split with --test_fraction {cfg.test_fraction}"
            )
        n_val = last_share(n - n_test, cfg.val_fraction, what)
        n_gap = gap_share(n - n_test, n_val, cfg.val_gap, what)
        codes = np.full(len(bad), -1, dtype=np.int8)
        codes[kept] = 0
        test_start, val_start = nth_true(kept, n - n_test), nth_true(kept, n - n_test - n_val)
        gap_start = nth_true(kept, n - n_test - n_val - n_gap)
        codes[test_start:][kept[test_start:]] = 1
        codes[val_start:test_start][kept[val_start:test_start]] = 2
        codes[gap_start:val_start] = -1  # the --val_gap: neither trains nor validates
        return SplitPlan(codes, ["train", "test"] + (["val"] if n_val else []), gap_rows=n_gap)

    return Recipe(
        name="criteo",
        features=list(SPARSE_FEATURES),
        dense=CriteoLog(DENSE_FEATURES),
        tasks=[TASK],
        labels=lambda numbers: {TASK: numbers["label"].astype(np.float32)},
        plan=plan,
        hashed_rows={f: cfg.criteo_hash_size for f in SPARSE_FEATURES},
        min_count=cfg.min_counts(SPARSE_FEATURES),
        id_fit_splits=cfg.id_fit_splits(),
        after_scan=lambda reports: _scan_notes(paths, reports),
        val_weighting=validated(cfg).val_unseen_shares,
    )


def check_criteo_options(cfg: DataFlags) -> None:
    if cfg.history_length:
        raise ValueError("--history_length needs user and item columns; --dataset criteo has none (set it to 0)")
    if not 2 <= cfg.criteo_hash_size < 2**59:
        raise ValueError(
            f"--criteo_hash_size must be in [2, 2**59) (row 0 is reserved for missing), got {cfg.criteo_hash_size}"
        )
    check_fraction(cfg.test_fraction)


def prepare_criteo(
    cfg: DataFlags, paths: List[Path], output: Path, log: Callable[[str], None], extra_meta: Dict[str, object]
) -> List[str]:
    """Encode Criteo-format TSVs (consecutive days, in order) into the dataset folder
    ``output``, ``--preprocess_workers`` files at a time; returns the notes.

    Example::

        cfg = DataConfig(dataset="criteo", data_path="day_0,day_1", criteo_hash_size=1_000_000)
        notes = prepare_criteo(cfg, [Path("day_0"), Path("day_1")], Path("prepped/days"), print, {})
    """
    check_criteo_options(cfg)
    read = functools.partial(criteo_file_chunks, cfg.criteo_hash_size, cfg.preprocess_chunk_bytes)
    inputs = [FileInput(path, read) for path in paths]
    return preprocess(
        criteo_recipe(cfg, paths), inputs, output, log, extra_meta=extra_meta, workers=cfg.preprocess_workers
    )


def _open_in_place(cfg: DataFlags, path: Path):
    if path.is_dir() and is_torchrec_criteo_dir(path):
        check_criteo_options(cfg)
        return open_torchrec_criteo(path, cfg.criteo_hash_size)
    return None


SOURCE = Source(
    name="criteo",
    prepare=prepare_criteo,
    locate=lambda cfg, cache_dir, log: require_files(cfg, "Criteo-format TSV files (comma-separated, in time "
                                                     "order), or a folder of TorchRec's preprocessed "
                                                     "day_N_{dense,sparse,labels}.npy files"),
    open_in_place=_open_in_place,
)
