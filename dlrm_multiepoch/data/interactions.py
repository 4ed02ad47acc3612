"""A user's own interactions table (CSV, TSV or Parquet), columns named by the config.

Required: user, item and label columns. Optional: a timestamp column (time split, also
of the validation split, and time-ordered histories; else seeded random splits), extra
categorical columns (one
table each), multi-hot list columns (a Parquet list, or text split by
``--multi_hot_sep``; one table each, a bag of ids per row) and numeric columns
(z-scored on train, each with a missing flag). The label is either 0/1 (one task,
``label``) or a rating turned into tasks by ``--task_thresholds like:4,love:5``. Rows
missing the user, item, label or timestamp are dropped and counted in the log.

The file is read in chunks (pyarrow's streaming CSV reader, Parquet record batches), so
memory does not grow with it. Id columns of a text file are read as text: ``007`` and
``7`` are two ids. Timestamps are read in one format per file
(:mod:`~dlrm_multiepoch.data.times`). Several files (``--data_path a.csv,b.parquet``)
are one table, rows in that order; every file's columns are checked before any is read.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from dlrm_multiepoch.config_section import validated
from dlrm_multiepoch.data.dataset import HISTORY_FEATURE
from dlrm_multiepoch.data.encode import random_split, subsample, time_split
from dlrm_multiepoch.data.preprocess import preprocess
from dlrm_multiepoch.data.recipe import (
    ITEM_FEATURE,
    USER_FEATURE,
    Chunk,
    Recipe,
    SplitPlan,
    Standardize,
    threshold_labels,
)
from dlrm_multiepoch.data.readers import require_columns
from dlrm_multiepoch.data.scan import FileInput
from dlrm_multiepoch.data.source import DataFlags, Source
from dlrm_multiepoch.data.source_files import require_files
from dlrm_multiepoch.data.times import MISSING_TIME, NUMBER, TimeFormat, to_float
from dlrm_multiepoch.data.val_design import plan_validation
from dlrm_multiepoch.data.vocab import normalize_values

_SEPARATORS = {".csv": ",", ".tsv": "\t", ".txt": "\t"}
_PARQUET = (".parquet", ".pq")


class TableReader:
    """A CSV/TSV/Parquet file, read in chunks of about ``chunk_bytes`` as Arrow tables.

    Args:
        path: the file (its suffix picks the format).
        chunk_bytes: input bytes per chunk.

    Example::

        reader = TableReader(Path("events.csv"), 64 << 20)
        for table in reader.chunks(["user_id", "item_id", "label"]):
            ...
    """

    def __init__(self, path: Path, chunk_bytes: int) -> None:
        self.path = path
        self.what = f"--data_path {path}"
        self.chunk_bytes = chunk_bytes
        self.bad_lines = 0
        self.bad_examples: List[str] = []
        suffix = path.suffix.lower()
        self.parquet = suffix in _PARQUET
        if not self.parquet and suffix not in _SEPARATORS:
            raise ValueError(
                f"{self.what}: unknown suffix {suffix!r}; expected one of {sorted([*_SEPARATORS, *_PARQUET])}"
            )
        self.sep = _SEPARATORS.get(suffix, ",")
        try:
            if self.parquet:
                self._file = pq.ParquetFile(path)
                schema = self._file.schema_arrow
            else:
                schema = pa.schema([(name, pa.string()) for name in self._open_csv(None).schema.names])  # read as text
            self.columns = list(schema.names)
            self.types = list(schema.types)
        except (pa.ArrowException, OSError, UnicodeDecodeError) as e:  # text that is not UTF-8, too
            raise ValueError(f"cannot read {self.what}: {e}") from e

    def _open_csv(self, columns: Optional[List[str]]) -> pacsv.CSVStreamingReader:
        def skip(row: pacsv.InvalidRow) -> str:
            self.bad_lines += 1
            if len(self.bad_examples) < 3:
                self.bad_examples.append(row.text[:80])
            return "skip"

        convert = pacsv.ConvertOptions(
            include_columns=columns,
            column_types={c: pa.string() for c in columns or []},
            strings_can_be_null=True,
        )
        return pacsv.open_csv(
            self.path,
            read_options=pacsv.ReadOptions(block_size=self.chunk_bytes),
            parse_options=pacsv.ParseOptions(delimiter=self.sep, invalid_row_handler=skip),
            convert_options=convert,
        )

    def check_columns(self, used: Dict[str, List[str]], scalar: List[str]) -> None:
        """Refuse, naming the flag: a used column absent, named twice in the file, or
        (among ``scalar``, the columns read as one value per row) a list or struct.

        Args:
            used: flag -> the columns it names.
            scalar: the columns that must hold one value per row.
        """
        for flag, columns in used.items():
            require_columns(self.columns, columns, self.what, flag)
            for col in columns:
                if self.columns.count(col) > 1:
                    raise ValueError(
                        f"{self.what} has {self.columns.count(col)} columns named {col!r} ({flag}); rename them apart"
                    )
                kind = self.types[self.columns.index(col)]
                if col in scalar and pa.types.is_nested(kind):
                    listed = pa.types.is_list(kind) or pa.types.is_large_list(kind)
                    raise ValueError(
                        f"{flag} column {col!r} of {self.what} holds {kind} values, not one value a row"
                        + ("; list columns go in --multi_hot_cols" if listed else "")
                    )

    def first_value(self, column: str) -> Optional[object]:
        """The column's first present value (None: it has none); reads until it finds one."""
        counted = self.bad_lines, list(self.bad_examples)  # malformed lines are counted by the full read
        try:
            for table in self.chunks([column]):
                present = pc.drop_null(table[column])
                if len(present):
                    return present[0].as_py()
            return None
        finally:
            self.bad_lines, self.bad_examples = counted

    def chunks(self, columns: List[str]) -> Iterator[pa.Table]:
        """The file's ``columns``, chunk by chunk (text columns as strings)."""
        try:
            if self.parquet:
                rows = max(1, self._file.metadata.num_rows)
                batch = max(64, int(self.chunk_bytes / max(1.0, self.path.stat().st_size / rows)))
                for record_batch in self._file.iter_batches(batch_size=batch, columns=columns):
                    yield pa.Table.from_batches([record_batch])
            else:
                for record_batch in self._open_csv(columns):
                    yield pa.Table.from_batches([record_batch])
        except (pa.ArrowException, UnicodeDecodeError) as e:
            raise ValueError(f"cannot read {self.what}: {e}") from e


def to_bags(values: pa.ChunkedArray, sep: str) -> pa.Array:
    """A list column as a list array; text is split at ``sep`` (empty items dropped)."""
    values = values.combine_chunks()
    if pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
        return values
    lists = pc.split_pattern(values.cast(pa.string()), pattern=sep)
    items = lists.flatten()
    items = pc.if_else(pc.equal(items, ""), pa.scalar(None, pa.string()), items)
    return pa.ListArray.from_arrays(lists.offsets, items, mask=lists.is_null())


def interactions_recipe(cfg: DataFlags, readers: List[TableReader]) -> Recipe:
    """Check every file's columns against the flags (validated here unless they were), and describe
    how rows become the dataset."""
    validated(cfg)
    categorical, dense_cols = list(cfg.categorical_col_list), list(cfg.dense_col_list)
    multi_hot = list(cfg.multi_hot_col_list)
    what = readers[0].what if len(readers) == 1 else f"--data_path {cfg.data_path}"
    used = {"--user_col": [cfg.user_col], "--item_col": [cfg.item_col], "--label_col": [cfg.label_col]}
    used.update({"--timestamp_col": [cfg.timestamp_col]} if cfg.timestamp_col else {})
    used.update({"--categorical_cols": categorical, "--dense_cols": dense_cols, "--multi_hot_cols": multi_hot})
    for reader in readers:  # every file, before any is read
        reader.check_columns(used, [c for flag, cols in used.items() if flag != "--multi_hot_cols" for c in cols])
    for flag, cols in (("--categorical_cols", categorical), ("--multi_hot_cols", multi_hot)):
        reserved = {USER_FEATURE, ITEM_FEATURE, HISTORY_FEATURE} & set(cols)
        if reserved:
            raise ValueError(
                f"{flag} {sorted(reserved)}: names reserved for the user/item/history features; rename the columns"
            )
    both = set(categorical) & set(multi_hot)
    if both:
        raise ValueError(f"--categorical_cols and --multi_hot_cols both name {sorted(both)}")
    thresholds = cfg.task_threshold_values

    def plan(load: Callable[[str], np.ndarray], bad: np.ndarray) -> SplitPlan:
        n_read = len(bad)
        rows = subsample(n_read, cfg.max_rows, cfg.split_seed) if cfg.max_rows is not None else np.arange(n_read)
        usable = rows[~bad[rows]]
        notes = [f"interactions: {n_read} rows read, {len(usable)} kept"]  # cached: load_dataset names the file
        if len(usable) == 0:  # before any other column is read: an empty file has none
            raise ValueError(f"{what}: no usable rows: {_why_unusable(load, rows, n_read, cfg)}")
        if len(usable) < len(rows):
            notes.append(
                f"interactions: dropped {len(rows) - len(usable)} of {len(rows)} rows missing the user, item, label"
                f"{' or timestamp' if cfg.timestamp_col else ''} (or with a non-numeric or infinite label)"
            )
        for col in dense_cols:
            coerced = int(load(f"coerced:{col}")[usable].sum())
            if coerced:
                notes.append(
                    f"interactions: {coerced} non-numeric values of --dense_cols column {col!r} treated as missing"
                )
        if not thresholds:
            values = np.unique(load("label")[usable])
            if not np.isin(values, [0.0, 1.0]).all():
                raise ValueError(
                    f"--label_col {cfg.label_col!r} holds values {values[:10].tolist()}, not 0/1; "
                    f"set --task_thresholds (e.g. 'like:4') to turn a rating into tasks"
                )
        times = load("time")[usable] if cfg.timestamp_col else None
        if times is not None:
            train, test = time_split(times, cfg.test_fraction, what)
        else:
            train, test = random_split(len(usable), cfg.test_fraction, cfg.split_seed)
        train, val, gap = plan_validation(train, cfg.val_fraction, cfg.val_gap, what, times=times, seed=cfg.split_seed)
        codes = np.full(n_read, -1, dtype=np.int8)
        codes[usable[train]], codes[usable[test]], codes[usable[val]] = 0, 1, 2
        all_times = None
        if times is not None:  # every scanned row's: the plan's rows are the usable ones
            all_times = np.zeros(n_read, dtype=times.dtype)
            all_times[usable] = times
        names = ["train", "test"] + (["val"] if len(val) else [])
        return SplitPlan(codes, names, notes, times=all_times, gap_rows=len(gap))

    def binary_label(numbers: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return {"label": numbers["label"].astype(np.float32)}

    return Recipe(
        name="interactions",
        features=[USER_FEATURE, ITEM_FEATURE, *categorical, *multi_hot],
        dense=Standardize([f"dense:{c}" for c in dense_cols], names=dense_cols),
        tasks=list(thresholds) or ["label"],
        labels=threshold_labels("label", thresholds) if thresholds else binary_label,
        plan=plan,
        bags={c: cfg.multi_hot_pooling for c in multi_hot},
        min_count=cfg.min_counts([USER_FEATURE, ITEM_FEATURE, *categorical, *multi_hot]),
        id_fit_splits=cfg.id_fit_splits(),
        history_length=cfg.history_length,
        history_time="time" if cfg.timestamp_col else None,
        seed=cfg.split_seed,
        after_scan=lambda reports: _scan_notes(cfg, readers, reports),
        val_weighting=validated(cfg).val_unseen_shares,
    )


def _scan_notes(cfg: DataFlags, readers: List[TableReader], reports: List[Dict[str, Any]]) -> List[str]:
    """Malformed lines skipped per file; timestamps that are numbers in one file and dates in another refused."""
    notes = []
    for reader, r in zip(readers, reports):
        if r["bad_lines"]:
            notes.append(
                f"interactions: skipped {r['bad_lines']} malformed lines (a wrong number of fields)"
                f"{f' in {reader.path.name}' if len(readers) > 1 else ''}, e.g. {r['bad_examples']}"
            )
    if cfg.timestamp_col:
        empty = [reader.path.name for reader, r in zip(readers, reports) if r["time"]["first"] is None]
        if empty and len(readers) > 1:
            raise ValueError(f"--timestamp_col {cfg.timestamp_col!r}: {empty} hold no timestamps (every row missing)")
        times = [(reader.path.name, r["time"]) for reader, r in zip(readers, reports) if r["time"]["first"] is not None]
        numbers = [t for t in times if t[1]["kind"] == NUMBER]
        dates = [t for t in times if t[1]["kind"] != NUMBER]
        if numbers and dates:
            raise ValueError(
                f"--timestamp_col {cfg.timestamp_col!r}: numbers in {numbers[0][0]} (e.g. {numbers[0][1]['first']!r}), "
                f"dates in {dates[0][0]} (e.g. {dates[0][1]['first']!r}); write the files' timestamps alike"
            )
    return notes


def _why_unusable(load: Callable[[str], np.ndarray], rows: np.ndarray, n_read: int, cfg: DataFlags) -> str:
    if n_read == 0:
        return "the file has a header but no data rows"
    no_label = int((~np.isfinite(load("label")[rows])).sum())
    rest = "missing the --user_col or --item_col value" + (" or the timestamp" if cfg.timestamp_col else "")
    return (
        f"of {len(rows)} rows, {no_label} have no numeric, finite --label_col {cfg.label_col!r} value (text labels? "
        f"a rating needs --task_thresholds) and {len(rows) - no_label} are {rest}"
    )


def interaction_file_chunks(cfg: DataFlags, path: Path, report: Dict[str, Any]) -> Iterator[Chunk]:
    """A :class:`~dlrm_multiepoch.data.scan.FileInput` reader: one file's chunks (ids,
    bags, label/time/dense numbers, rows to drop); then ``report`` holds its malformed
    lines and how its timestamps read (one format for the whole file)."""
    reader = TableReader(path, cfg.preprocess_chunk_bytes)
    categorical, dense_cols, multi_hot = validated(cfg).categorical_col_list, cfg.dense_col_list, cfg.multi_hot_col_list
    columns = list(dict.fromkeys([cfg.user_col, cfg.item_col, cfg.label_col, *categorical, *dense_cols, *multi_hot]))
    times = None
    if cfg.timestamp_col:
        columns.append(cfg.timestamp_col)
        kind = reader.types[reader.columns.index(cfg.timestamp_col)]
        times = TimeFormat(cfg.timestamp_col, reader.what, reader.first_value(cfg.timestamp_col), kind)
    for table in reader.chunks(columns):
        user, item = normalize_values(table[cfg.user_col]), normalize_values(table[cfg.item_col])
        label = to_float(table[cfg.label_col])
        bad = user.is_null().to_numpy(zero_copy_only=False) | item.is_null().to_numpy(zero_copy_only=False)
        bad |= ~np.isfinite(label)  # missing, non-numeric (NaN after parsing) or infinite
        chunk = Chunk(rows=table.num_rows, ids={USER_FEATURE: user, ITEM_FEATURE: item}, numbers={"label": label})
        if times is not None:
            parsed = times.parse(table[cfg.timestamp_col])
            bad |= np.isnan(parsed) if times.kind == NUMBER else parsed == MISSING_TIME
            chunk.numbers["time"] = parsed
        for col in categorical:
            chunk.ids[col] = table[col]
        for col in multi_hot:
            chunk.bags[col] = to_bags(table[col], cfg.multi_hot_sep)
        for col in dense_cols:
            value = to_float(table[col])
            chunk.numbers[f"dense:{col}"] = value
            chunk.numbers[f"coerced:{col}"] = (np.isnan(value) & ~table[col].is_null().to_numpy(zero_copy_only=False))
        chunk.bad = bad
        yield chunk
    report.update(
        bad_lines=reader.bad_lines,
        bad_examples=reader.bad_examples,
        time=times.describe() if times is not None else {"kind": None, "first": None},
    )


def prepare_interactions(
    cfg: DataFlags, paths: List[Path], output: Path, log: Callable[[str], None], extra_meta: Dict[str, object]
) -> List[str]:
    """Encode the interactions table at ``paths`` (one file, or several read as one table
    in that order, ``--preprocess_workers`` at a time) into the dataset folder ``output``.

    Example::

        cfg = DataConfig(dataset="interactions", data_path="events.parquet", timestamp_col="ts",
                         label_col="rating", task_thresholds="like:4")
        notes = prepare_interactions(cfg, [Path(cfg.data_path)], Path("prepped/events"), print, {})
    """
    readers = [TableReader(path, cfg.preprocess_chunk_bytes) for path in paths]
    recipe = interactions_recipe(cfg, readers)
    inputs = [FileInput(path, functools.partial(interaction_file_chunks, cfg)) for path in paths]
    return preprocess(recipe, inputs, output, log, extra_meta=extra_meta, workers=cfg.preprocess_workers)


SOURCE = Source(
    name="interactions",
    prepare=prepare_interactions,
    locate=lambda cfg, cache_dir, log: require_files(cfg, "a CSV, TSV or Parquet interactions table (or several, "
                                                     "comma-separated)"),
)
