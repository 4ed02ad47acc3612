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
``7`` are two ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from dlrm_multiepoch.data.config import id_fit_splits, min_counts
from dlrm_multiepoch.data.dataset import HISTORY_FEATURE, POOLINGS
from dlrm_multiepoch.data.encode import check_fraction, random_split, subsample, time_split, validation_split
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
from dlrm_multiepoch.data.registry import Source, register_source, require_file
from dlrm_multiepoch.data.vocab import normalize_values

from dlrm_multiepoch.data.config import DataConfig, parse_thresholds, split_list

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
                self.columns = list(self._file.schema_arrow.names)
            else:
                self.columns = list(self._open_csv(None).schema.names)
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


def to_float(values: pa.ChunkedArray) -> np.ndarray:
    """Numbers as float64, NaN for missing or non-numeric text (``pandas.to_numeric``)."""
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return pd.to_numeric(values.to_pandas(), errors="coerce").to_numpy(dtype=np.float64)
    return pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64)


def _is_numeric_text(values: pa.ChunkedArray) -> bool:
    present = pc.drop_null(values)
    return bool(np.isfinite(to_float(present)).all()) if len(present) else True


def to_times(values: pa.ChunkedArray, numeric: bool) -> np.ndarray:
    """Timestamps: numbers as float64 (NaN = missing), or datetimes as int64 ns ticks
    (``np.iinfo(np.int64).min`` = missing). Only their order matters."""
    if numeric:
        return to_float(values)
    if pa.types.is_timestamp(values.type) or pa.types.is_date(values.type):
        series = pd.to_datetime(values.to_pandas(), utc=True)
    else:
        series = pd.to_datetime(values.to_pandas(), errors="coerce", utc=True)
    return series.to_numpy(dtype="datetime64[ns]").view(np.int64)


def to_bags(values: pa.ChunkedArray, sep: str) -> pa.Array:
    """A list column as a list array; text is split at ``sep`` (empty items dropped)."""
    values = values.combine_chunks()
    if pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
        return values
    lists = pc.split_pattern(values.cast(pa.string()), pattern=sep)
    items = lists.flatten()
    items = pc.if_else(pc.equal(items, ""), pa.scalar(None, pa.string()), items)
    return pa.ListArray.from_arrays(lists.offsets, items, mask=lists.is_null())


def interactions_recipe(cfg: "DataConfig", path: Path, reader: TableReader) -> Recipe:
    """Check the columns and flags, and describe how rows become the dataset."""
    what = reader.what
    categorical, dense_cols = split_list(cfg.categorical_cols), split_list(cfg.dense_cols)
    multi_hot = split_list(cfg.multi_hot_cols)
    for flag, col in [("--user_col", cfg.user_col), ("--item_col", cfg.item_col), ("--label_col", cfg.label_col)]:
        require_columns(reader.columns, [col], what, flag)
    if cfg.timestamp_col:
        require_columns(reader.columns, [cfg.timestamp_col], what, "--timestamp_col")
    require_columns(reader.columns, categorical, what, "--categorical_cols")
    require_columns(reader.columns, dense_cols, what, "--dense_cols")
    require_columns(reader.columns, multi_hot, what, "--multi_hot_cols")
    for flag, cols in (("--categorical_cols", categorical), ("--multi_hot_cols", multi_hot)):
        reserved = {USER_FEATURE, ITEM_FEATURE, HISTORY_FEATURE} & set(cols)
        if reserved:
            raise ValueError(
                f"{flag} {sorted(reserved)}: names reserved for the user/item/history features; rename the columns"
            )
    both = set(categorical) & set(multi_hot)
    if both:
        raise ValueError(f"--categorical_cols and --multi_hot_cols both name {sorted(both)}")
    if cfg.multi_hot_pooling not in POOLINGS:
        raise ValueError(f"--multi_hot_pooling must be one of {', '.join(POOLINGS)}; got {cfg.multi_hot_pooling!r}")
    if multi_hot and not cfg.multi_hot_sep:
        raise ValueError("--multi_hot_sep must not be empty")
    check_fraction(cfg.test_fraction)
    thresholds = parse_thresholds(cfg.task_thresholds)

    def plan(load: Callable[[str], np.ndarray], bad: np.ndarray) -> SplitPlan:
        n_read = len(bad)
        rows = subsample(n_read, cfg.max_rows, cfg.split_seed) if cfg.max_rows is not None else np.arange(n_read)
        usable = rows[~bad[rows]]
        notes = [f"interactions: {n_read} rows read, {len(usable)} kept"]  # cached: load_dataset names the file
        if reader.bad_lines:
            notes.append(
                f"interactions: skipped {reader.bad_lines} malformed lines (a wrong number of fields), "
                f"e.g. {reader.bad_examples}"
            )
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
        train, val = validation_split(train, cfg.val_fraction, what, times=times, seed=cfg.split_seed)
        codes = np.full(n_read, -1, dtype=np.int8)
        codes[usable[train]], codes[usable[test]], codes[usable[val]] = 0, 1, 2
        return SplitPlan(codes, ["train", "test"] + (["val"] if len(val) else []), notes)

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
        min_count=min_counts(cfg, [USER_FEATURE, ITEM_FEATURE, *categorical, *multi_hot]),
        id_fit_splits=id_fit_splits(cfg),
        history_length=cfg.history_length,
        history_time="time" if cfg.timestamp_col else None,
        seed=cfg.split_seed,
    )


def _why_unusable(load: Callable[[str], np.ndarray], rows: np.ndarray, n_read: int, cfg: "DataConfig") -> str:
    if n_read == 0:
        return "the file has a header but no data rows"
    no_label = int((~np.isfinite(load("label")[rows])).sum())
    rest = "missing the --user_col or --item_col value" + (" or the timestamp" if cfg.timestamp_col else "")
    return (
        f"of {len(rows)} rows, {no_label} have no numeric, finite --label_col {cfg.label_col!r} value (text labels? "
        f"a rating needs --task_thresholds) and {len(rows) - no_label} are {rest}"
    )


def interaction_chunks(cfg: "DataConfig", reader: TableReader) -> Iterator[Chunk]:
    """Parsed chunks of the table: ids, bags, label/time/dense numbers, rows to drop."""
    categorical, dense_cols = split_list(cfg.categorical_cols), split_list(cfg.dense_cols)
    multi_hot = split_list(cfg.multi_hot_cols)
    columns = list(dict.fromkeys([cfg.user_col, cfg.item_col, cfg.label_col, *categorical, *dense_cols, *multi_hot]))
    if cfg.timestamp_col:
        columns.append(cfg.timestamp_col)
    numeric_time: Optional[bool] = None
    for table in reader.chunks(columns):
        user, item = normalize_values(table[cfg.user_col]), normalize_values(table[cfg.item_col])
        label = to_float(table[cfg.label_col])
        bad = user.is_null().to_numpy(zero_copy_only=False) | item.is_null().to_numpy(zero_copy_only=False)
        bad |= ~np.isfinite(label)  # missing, non-numeric (NaN after parsing) or infinite
        chunk = Chunk(rows=table.num_rows, ids={USER_FEATURE: user, ITEM_FEATURE: item}, numbers={"label": label})
        if cfg.timestamp_col:
            raw = table[cfg.timestamp_col]
            if numeric_time is None:  # decided once, by the first chunk, for the whole file
                numeric_time = pa.types.is_integer(raw.type) or pa.types.is_floating(raw.type) or (
                    pa.types.is_string(raw.type) and _is_numeric_text(raw)
                )
            times = to_times(raw, numeric_time)
            bad |= np.isnan(times) if numeric_time else times == np.iinfo(np.int64).min
            chunk.numbers["time"] = times
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


def prepare_interactions(
    cfg: "DataConfig", path: Path, output: Path, log: Callable[[str], None], extra_meta: Dict[str, object]
) -> List[str]:
    """Encode the interactions table at ``path`` into the dataset folder ``output``.

    Example::

        cfg = DataConfig(dataset="interactions", data_path="events.parquet", timestamp_col="ts",
                         label_col="rating", task_thresholds="like:4")
        notes = prepare_interactions(cfg, Path(cfg.data_path), Path("prepped/events"), print, {})
    """
    reader = TableReader(path, cfg.preprocess_chunk_bytes)
    recipe = interactions_recipe(cfg, path, reader)
    return preprocess(recipe, interaction_chunks(cfg, reader), output, log, extra_meta=extra_meta)


register_source(
    Source(
        name="interactions",
        prepare=prepare_interactions,
        locate=lambda cfg, cache_dir, log: require_file(cfg, "a CSV, TSV or Parquet interactions table"),
    )
)
