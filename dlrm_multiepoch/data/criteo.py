"""Criteo-format TSV: ``label``, 13 integer columns, 26 hex categoricals; empty = missing.

This is the format TorchRec's DLRM example reads (``torchrec.datasets.criteo``).
Dense columns get TorchRec's transform (missing -> 0, shift so the file minimum is 2,
natural log). Categoricals are hashed, ``1 + int(hex, 16) % (criteo_hash_size - 1)``,
so row 0 stays reserved for missing values. Rows are in time order in Criteo logs, so
the last ``test_fraction`` of the file is the test split (and the last ``val_fraction``
of the rest the validation split). Malformed lines (wrong field
count, non-0/1 label, non-integer dense value, non-hex category) are dropped and counted.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING, List, Tuple

import numpy as np
import pandas as pd

from dlrm_multiepoch.data.config import parse_min_count
from dlrm_multiepoch.data.dataset import InteractionData, Split, TableSpec, UNKNOWN_ID
from dlrm_multiepoch.data.encode import check_fraction, subsample, validation_split
from dlrm_multiepoch.data.readers import describe_lines

if TYPE_CHECKING:
    from dlrm_multiepoch.data.config import DataConfig

INT_FEATURE_COUNT = 13
CAT_FEATURE_COUNT = 26
# TorchRec's names (torchrec.datasets.criteo.DEFAULT_INT_NAMES / DEFAULT_CAT_NAMES).
DENSE_FEATURES = [f"int_{i}" for i in range(INT_FEATURE_COUNT)]
SPARSE_FEATURES = [f"cat_{i}" for i in range(CAT_FEATURE_COUNT)]
TASK = "label"
_FIELDS = 1 + INT_FEATURE_COUNT + CAT_FEATURE_COUNT


def _field_count_errors(raw: bytes) -> np.ndarray:
    """0-based indices of lines whose field count is not 40 (blank lines included)."""
    buf = np.frombuffer(raw, dtype=np.uint8)
    newlines = np.flatnonzero(buf == ord("\n"))
    if len(buf) and buf[-1] != ord("\n"):
        newlines = np.append(newlines, len(buf))
    tabs = np.flatnonzero(buf == ord("\t"))
    per_line = np.diff(np.searchsorted(tabs, np.concatenate([[-1], newlines])))
    return np.flatnonzero(per_line != _FIELDS - 1)


def hash_hex(column: pd.Series, hash_size: int) -> Tuple[np.ndarray, np.ndarray]:
    """Hashed ids (0 for empty) and a mask of values that are not hexadecimal."""
    codes, uniques = pd.factorize(column, use_na_sentinel=True)
    ids = np.zeros(len(uniques) + 1, dtype=np.int64)  # last slot: missing (code -1)
    valid = np.ones(len(uniques) + 1, dtype=bool)
    for i, value in enumerate(uniques):
        try:
            ids[i] = 1 + int(value, 16) % (hash_size - 1)
        except ValueError:
            valid[i] = False
    return ids[codes], ~valid[codes]


def torchrec_dense_transform(dense: np.ndarray) -> np.ndarray:
    """TorchRec's ``BinaryCriteoUtils.tsv_to_npys`` transform of integer features."""
    dense = dense.astype(np.int64)
    dense -= dense.min() - 2
    return np.log(dense, dtype=np.float32)


def build_criteo(cfg: "DataConfig", path: Path) -> Tuple[InteractionData, List[str]]:
    """Encode a Criteo-format TSV; returns the data and notes for the log.

    Example::

        cfg = DataConfig(dataset="criteo", data_path="day_0.tsv", criteo_hash_size=1_000_000)
        data, notes = build_criteo(cfg, Path(cfg.data_path))
    """
    if cfg.history_length:
        raise ValueError("--history_length needs user and item columns; --dataset criteo has none (set it to 0)")
    if cfg.criteo_hash_size < 2:
        raise ValueError(f"--criteo_hash_size must be >= 2 (row 0 is reserved for missing), got {cfg.criteo_hash_size}")
    check_fraction(cfg.test_fraction)
    raw = path.read_bytes()
    bad_fields = _field_count_errors(raw)
    frame = pd.read_csv(
        io.BytesIO(raw),
        sep="\t",
        header=None,
        names=list(range(_FIELDS)),
        dtype=str,
        skiprows=set(bad_fields.tolist()),
        skip_blank_lines=False,
        quoting=csv.QUOTE_NONE,
        engine="c",
    )
    # Line numbers (1-based) of the rows pandas kept, to report bad values by line.
    line_of = np.delete(np.arange(len(frame) + len(bad_fields)), bad_fields) + 1
    n_read = len(frame) + len(bad_fields)

    label = pd.to_numeric(frame[0], errors="coerce").to_numpy()
    bad = ~np.isin(label, [0.0, 1.0])
    dense_raw = np.zeros((len(frame), INT_FEATURE_COUNT), dtype=np.float64)
    for j in range(INT_FEATURE_COUNT):
        column = frame[1 + j]
        value = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
        bad |= (column.notna().to_numpy() & np.isnan(value)) | (np.nan_to_num(value) % 1 != 0)
        dense_raw[:, j] = np.nan_to_num(value, nan=0.0)  # TorchRec: missing -> 0
    sparse = np.zeros((len(frame), CAT_FEATURE_COUNT), dtype=np.int64)
    for j in range(CAT_FEATURE_COUNT):
        sparse[:, j], not_hex = hash_hex(frame[1 + INT_FEATURE_COUNT + j], cfg.criteo_hash_size)
        bad |= not_hex

    notes = [f"criteo: {n_read} lines read from {path}"]
    bad_lines = sorted(np.concatenate([bad_fields + 1, line_of[bad]]).tolist())
    if bad_lines:
        notes.append(
            f"criteo: dropped {len(bad_lines)} malformed lines (not 40 tab-separated fields, a label other than 0/1, "
            f"a non-integer dense value or a non-hex category): lines {describe_lines(bad_lines)}"
        )
    keep = np.flatnonzero(~bad)
    if cfg.max_rows is not None:
        keep = keep[subsample(len(keep), cfg.max_rows, cfg.split_seed)]
    n = len(keep)
    n_test = int(round(n * cfg.test_fraction))
    if n_test == 0 or n_test == n:
        raise ValueError(
            f"--data_path {path}: {n} usable rows leave an empty split with --test_fraction {cfg.test_fraction}"
        )
    label, dense_raw, sparse = label[keep], dense_raw[keep], sparse[keep]
    dense = torchrec_dense_transform(dense_raw)

    # File order is time order: the validation rows are the train rows' last share.
    train, val = validation_split(
        np.arange(n - n_test), cfg.val_fraction, f"--data_path {path}", times=np.arange(n - n_test)
    )
    # Fold rare hashed rows and rows no train value hashed to (count 0 < min_count, also
    # at the default 1) into the trained missing row, as the other loaders fold ids.
    min_count = parse_min_count(cfg.min_count)
    min_count.check_tables([f"t_{f}" for f in SPARSE_FEATURES])
    if cfg.id_maps != "train":
        raise ValueError(f"--id_maps {cfg.id_maps!r}: criteo has no pretrain split (use --id_maps train)")
    for j in range(CAT_FEATURE_COUNT):
        counts = np.bincount(sparse[train, j], minlength=cfg.criteo_hash_size)
        sparse[counts[sparse[:, j]] < min_count.get(f"t_{SPARSE_FEATURES[j]}"), j] = UNKNOWN_ID

    data = InteractionData(
        name="criteo",
        tables=[TableSpec(f"t_{f}", cfg.criteo_hash_size, [f]) for f in SPARSE_FEATURES],
        dense_names=list(DENSE_FEATURES),
        tasks=[TASK],
    )
    splits = {"train": train, "test": np.arange(n - n_test, n)} | ({"val": val} if len(val) else {})
    for name, rows in splits.items():
        data.splits[name] = Split(
            sparse={f: np.ascontiguousarray(sparse[rows, j]) for j, f in enumerate(SPARSE_FEATURES)},
            dense=dense[rows],
            labels={TASK: label[rows].astype(np.float32)},
        )
        notes.append(f"criteo {name}: {len(rows)} rows")
    return data, notes
