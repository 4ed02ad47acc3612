"""A user's own interactions table (CSV, TSV or Parquet), columns named by the config.

Required: user, item and label columns. Optional: a timestamp column (time split, also
of the validation split, and time-ordered histories; else seeded random splits), extra categorical columns (one
table each) and numeric columns (z-scored on train, each with a missing flag). The label
is either 0/1 (one task, ``label``) or a rating turned into tasks by
``--task_thresholds like:4,love:5``. Rows missing the user, item, label or timestamp
are dropped and counted in the log.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Tuple

import numpy as np
import pandas as pd

from dlrm_multiepoch.data.assemble import ITEM_FEATURE, USER_FEATURE, assemble
from dlrm_multiepoch.data.config import id_fit_splits
from dlrm_multiepoch.data.dataset import HISTORY_FEATURE, InteractionData
from dlrm_multiepoch.data.encode import random_split, standardize, subsample, time_split, validation_split
from dlrm_multiepoch.data.readers import describe_lines, read_delimited, require_columns

if TYPE_CHECKING:
    from dlrm_multiepoch.data.config import DataConfig

_SEPARATORS = {".csv": ",", ".tsv": "\t", ".txt": "\t"}
_PARQUET = (".parquet", ".pq")


def split_list(value: str) -> List[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_thresholds(value: str) -> Dict[str, float]:
    """``"like:4,love:5"`` -> ``{"like": 4.0, "love": 5.0}``."""
    tasks: Dict[str, float] = {}
    for part in split_list(value):
        name, sep, threshold = part.partition(":")
        try:
            if not sep or not name.strip():
                raise ValueError
            tasks[name.strip()] = float(threshold)
        except ValueError:
            raise ValueError(
                f"--task_thresholds entry {part!r} is not 'task:min_value' (e.g. 'like:4,love:5')"
            ) from None
    return tasks


def read_table(path: Path) -> Tuple[pd.DataFrame, List[int]]:
    """The table at ``path`` by its suffix, with the line numbers of skipped malformed lines."""
    suffix = path.suffix.lower()
    if suffix in _PARQUET:
        try:
            return pd.read_parquet(path), []
        except Exception as e:  # pyarrow raises several types for a damaged file
            raise ValueError(f"--data_path {path}: cannot read Parquet: {e}") from e
    if suffix not in _SEPARATORS:
        raise ValueError(
            f"--data_path {path}: unknown suffix {suffix!r}; expected one of {sorted([*_SEPARATORS, *_PARQUET])}"
        )
    return read_delimited(path, f"--data_path {path}", sep=_SEPARATORS[suffix])


def build_interactions(cfg: "DataConfig", path: Path) -> Tuple[InteractionData, List[str]]:
    """Encode the interactions table at ``path``; returns the data and notes for the log.

    Example::

        cfg = DataConfig(dataset="interactions", data_path="events.parquet", timestamp_col="ts",
                         label_col="rating", task_thresholds="like:4")
        data, notes = build_interactions(cfg, Path(cfg.data_path))
    """
    what = f"--data_path {path}"
    frame, bad_lines = read_table(path)
    notes: List[str] = []
    if bad_lines:
        notes.append(
            f"interactions: skipped {len(bad_lines)} malformed lines of {path} (lines {describe_lines(bad_lines)})"
        )
    categorical, dense_cols = split_list(cfg.categorical_cols), split_list(cfg.dense_cols)
    for flag, col in [("--user_col", cfg.user_col), ("--item_col", cfg.item_col), ("--label_col", cfg.label_col)]:
        require_columns(frame, [col], what, flag)
    if cfg.timestamp_col:
        require_columns(frame, [cfg.timestamp_col], what, "--timestamp_col")
    require_columns(frame, categorical, what, "--categorical_cols")
    require_columns(frame, dense_cols, what, "--dense_cols")
    reserved = {USER_FEATURE, ITEM_FEATURE, HISTORY_FEATURE} & set(categorical)
    if reserved:
        raise ValueError(
            f"--categorical_cols {sorted(reserved)}: names reserved for the user/item/history features; "
            "rename the columns"
        )

    n_read = len(frame)
    if cfg.max_rows is not None:
        frame = frame.iloc[subsample(len(frame), cfg.max_rows, cfg.split_seed)]
    label = pd.to_numeric(frame[cfg.label_col], errors="coerce")
    bad = frame[cfg.user_col].isna() | frame[cfg.item_col].isna() | label.isna()
    times = None
    if cfg.timestamp_col:
        times = frame[cfg.timestamp_col]
        if not pd.api.types.is_numeric_dtype(times):
            times = pd.to_datetime(times, errors="coerce", utc=True)
        bad |= times.isna()
    if bad.any():
        notes.append(
            f"interactions: dropped {int(bad.sum())} of {len(frame)} rows missing the user, item, label"
            f"{' or timestamp' if cfg.timestamp_col else ''} (or with a non-numeric label)"
        )
    keep = ~bad.to_numpy()
    frame, label = frame[keep].reset_index(drop=True), label[keep].to_numpy(dtype=np.float64)
    if times is not None:
        times = times[keep]
        # Datetimes become integer ticks; numbers stay as they are. Only the order matters.
        times = (
            times.astype("int64").to_numpy()
            if isinstance(times.dtype, pd.DatetimeTZDtype)
            else times.to_numpy(np.float64)
        )
    if len(frame) == 0:
        raise ValueError(f"{what}: no usable rows")

    thresholds = parse_thresholds(cfg.task_thresholds)
    if thresholds:
        labels = {task: (label >= t).astype(np.float32) for task, t in thresholds.items()}
    else:
        values = np.unique(label)
        if not np.isin(values, [0.0, 1.0]).all():
            raise ValueError(
                f"--label_col {cfg.label_col!r} holds values {values[:10].tolist()}, not 0/1; "
                f"set --task_thresholds (e.g. 'like:4') to turn a rating into tasks"
            )
        labels = {"label": label.astype(np.float32)}

    if times is not None:
        train, test = time_split(times, cfg.test_fraction, what)
    else:
        train, test = random_split(len(frame), cfg.test_fraction, cfg.split_seed)
    train, val = validation_split(train, cfg.val_fraction, what, times=times, seed=cfg.split_seed)

    dense_parts, dense_names = [], []
    for col in dense_cols:
        raw = frame[col]
        numeric = pd.to_numeric(raw, errors="coerce")
        coerced = int((numeric.isna() & raw.notna()).sum())
        if coerced:
            notes.append(
                f"interactions: {coerced} non-numeric values of --dense_cols column {col!r} treated as missing"
            )
        z, missing = standardize(numeric.to_numpy(dtype=np.float64), train)
        dense_parts += [z, missing]
        dense_names += [col, f"{col}_missing"]
    dense = np.stack(dense_parts, axis=1) if dense_parts else np.zeros((len(frame), 0), np.float32)

    sparse = pd.DataFrame({USER_FEATURE: frame[cfg.user_col].to_numpy(), ITEM_FEATURE: frame[cfg.item_col].to_numpy()})
    for col in categorical:
        sparse[col] = frame[col].to_numpy()
    notes.insert(0, f"interactions: {n_read} rows read from {path}, {len(frame)} kept")
    data = assemble(
        "interactions",
        sparse,
        {"train": train, "test": test} | ({"val": val} if len(val) else {}),
        list(sparse.columns),
        dense,
        dense_names,
        labels,
        min_count=cfg.min_count,
        id_fit_splits=id_fit_splits(cfg),
        history_length=cfg.history_length,
        times=times,
        seed=cfg.split_seed,
        notes=notes,
    )
    return data, notes
