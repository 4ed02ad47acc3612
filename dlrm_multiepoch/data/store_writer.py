"""Writes dataset folders (the layout: :mod:`~dlrm_multiepoch.data.store`), block by block.

A folder is written under a temporary name and committed (renamed) when complete, with
``meta.json`` written last: a folder with ``meta.json`` is whole.

Example::

    write_dataset(Path("prepped/synthetic"), synthetic_data(100_000), notes=[], extra={})
"""

import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from dlrm_multiepoch.data.cache import temporary_folder
from dlrm_multiepoch.data.dataset import HISTORY_FEATURE, HISTORY_PAD, InteractionData, TableSpec
from dlrm_multiepoch.data.npy import NpyWriter
from dlrm_multiepoch.data.store import FORMAT, META, is_dataset_folder


def id_dtype(num_embeddings: int) -> np.dtype:
    """The narrowest of int32/int64 that holds every id of a table."""
    return np.dtype(np.int32) if num_embeddings <= np.iinfo(np.int32).max else np.dtype(np.int64)


class _Range:
    """Running (min, max) of the ids written to one column."""

    def __init__(self) -> None:
        self.lo: Optional[int] = None
        self.hi: Optional[int] = None

    def update(self, ids: np.ndarray) -> None:
        if ids.size:
            lo, hi = int(ids.min()), int(ids.max())
            self.lo = lo if self.lo is None else min(self.lo, lo)
            self.hi = hi if self.hi is None else max(self.hi, hi)


class DatasetWriter:
    """Writes the splits of a dataset folder block by block, in row order.

    Args:
        folder: the (temporary) folder to write; created.
        tables: the table layout (sets each feature's id dtype).
        multi_hot: features written as bags.
        dense_width: dense columns.
        tasks: label names.
        split_rows: split name -> total rows it will receive.
        history_length: K of the history feature (0: none).
        slices: names of the row slices each row's ``uint8`` slice code marks (bit ``i``
            = slice ``i``); none: no slice column.

    Example::

        w = DatasetWriter(tmp, tables, [], 13, ["label"], {"train": 900, "test": 100})
        w.append("train", sparse={"cat_0": ids}, dense=dense, labels={"label": y})
        w.close()
        w.write_meta(name="criteo", dense_names=names, notes=[], extra={})
    """

    def __init__(
        self,
        folder: Path,
        tables: Sequence[TableSpec],
        multi_hot: Sequence[str],
        dense_width: int,
        tasks: Sequence[str],
        split_rows: Dict[str, int],
        history_length: int = 0,
        slices: Sequence[str] = (),
    ) -> None:
        if len(slices) > 8:
            raise ValueError(f"at most 8 row slices fit a uint8 slice code, got {list(slices)}")
        self.folder = Path(folder)
        self.slices = list(slices)
        self.tables = list(tables)
        self.features = [f for t in tables for f in t.feature_names if f != HISTORY_FEATURE]
        self.multi_hot = list(multi_hot)
        self.tasks = list(tasks)
        self.split_rows = dict(split_rows)
        self.history_length = history_length
        self._dtype = {f: id_dtype(t.num_embeddings) for t in tables for f in t.feature_names}
        self._writers: Dict[str, Dict[str, Any]] = {}
        self._ranges: Dict[str, Dict[str, _Range]] = {}
        self._label_sums: Dict[str, Dict[str, float]] = {}
        self._bag_sizes: Dict[str, Dict[str, int]] = {}
        self._bags_pending: Dict[str, Dict[str, List[np.ndarray]]] = {}
        for split, n in self.split_rows.items():
            d = self.folder / split
            d.mkdir(parents=True, exist_ok=True)
            w: Dict[str, Any] = {"dense": NpyWriter(d / "dense.npy", np.float32, (n, dense_width))}
            for i, task in enumerate(self.tasks):
                w[f"label:{task}"] = NpyWriter(d / f"labels_{i}.npy", np.float32, (n,))
            for i, f in enumerate(self.features):
                if f in self.multi_hot:
                    # Values are spilled raw (their total is unknown) and get a header at close.
                    w[f"bag:{f}"] = open(d / f"bag_{i}.values.raw", "wb")
                    w[f"offsets:{f}"] = NpyWriter(d / f"bag_{i}.offsets.npy", np.int64, (n + 1,))
                    w[f"offsets:{f}"].append(np.zeros(1, np.int64))
                else:
                    w[f"sparse:{f}"] = NpyWriter(d / f"sparse_{i}.npy", self._dtype[f], (n,))
            if history_length:
                w["history"] = NpyWriter(d / "history.npy", self._dtype[HISTORY_FEATURE], (n, history_length))
            if self.slices:
                w["slices"] = NpyWriter(d / "slices.npy", np.uint8, (n,))
            self._writers[split] = w
            self._ranges[split] = {f: _Range() for f in self.features + ([HISTORY_FEATURE] if history_length else [])}
            self._label_sums[split] = {t: 0.0 for t in self.tasks}
            self._bag_sizes[split] = {f: 0 for f in self.multi_hot}

    def append(
        self,
        split: str,
        sparse: Dict[str, Any],
        dense: np.ndarray,
        labels: Dict[str, np.ndarray],
        history: Optional[np.ndarray] = None,
        slices: Optional[np.ndarray] = None,
    ) -> None:
        """The next rows of ``split``: ``sparse`` maps features to ids (a :class:`Ragged`
        for multi-hot features); ``slices`` their slice codes (when the writer has slices)."""
        w, ranges = self._writers[split], self._ranges[split]
        w["dense"].append(dense)
        for task in self.tasks:
            w[f"label:{task}"].append(labels[task])
            self._label_sums[split][task] += float(labels[task].sum(dtype=np.float64))
        for f in self.features:
            column = sparse[f]
            if f in self.multi_hot:
                values = np.ascontiguousarray(column.values, dtype=self._dtype[f])
                w[f"bag:{f}"].write(values.data)
                w[f"offsets:{f}"].append(column.offsets[1:] + self._bag_sizes[split][f])
                self._bag_sizes[split][f] += len(values)
                ranges[f].update(values)
            else:
                w[f"sparse:{f}"].append(column)
                ranges[f].update(column)
        if self.history_length:
            w["history"].append(history)
            ranges[HISTORY_FEATURE].update(history[history != HISTORY_PAD])
        if self.slices:
            w["slices"].append(np.asarray(slices, dtype=np.uint8))

    def close(self) -> None:
        for split, w in self._writers.items():
            for key, writer in w.items():
                writer.close()
                if key.startswith("bag:"):
                    f = key[4:]
                    raw = Path(writer.name)
                    _raw_to_npy(raw, raw.with_suffix(".npy"), self._dtype[f], self._bag_sizes[split][f])

    def write_meta(self, name: str, dense_names: Sequence[str], notes: Sequence[str], extra: Dict[str, Any]) -> None:
        """Write ``meta.json`` last: its presence marks the folder complete."""
        splits = {
            split: {
                "rows": n,
                "id_ranges": {f: [r.lo, r.hi] for f, r in self._ranges[split].items() if r.lo is not None},
                "label_sums": self._label_sums[split],
            }
            for split, n in self.split_rows.items()
        }
        meta = {
            "format": FORMAT,
            "name": name,
            "tables": [
                {"name": t.name, "num_embeddings": t.num_embeddings, "feature_names": t.feature_names,
                 "pooling": t.pooling}
                for t in self.tables
            ],
            "features": self.features,
            "multi_hot": self.multi_hot,
            "dense_names": list(dense_names),
            "tasks": self.tasks,
            "history_length": self.history_length,
            "slices": self.slices,
            "splits": splits,
            "notes": list(notes),
            **extra,
        }
        tmp = self.folder / f".{META}.tmp"
        tmp.write_text(json.dumps(meta, indent=1))
        os.replace(tmp, self.folder / META)


def _raw_to_npy(raw: Path, path: Path, dtype: np.dtype, count: int) -> None:
    """Prepend an ``.npy`` header to a headerless file (streamed, bounded memory)."""
    from numpy.lib import format as npy_format

    with open(path, "wb") as out, open(raw, "rb") as src:
        npy_format.write_array_header_1_0(
            out, {"descr": npy_format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (count,)}
        )
        shutil.copyfileobj(src, out, 1 << 22)
    raw.unlink()


def commit(tmp: Path, folder: Path) -> bool:
    """Rename a finished temporary folder into place; False if ``folder`` already exists
    (another process finished first: its copy is kept and ``tmp`` removed)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, folder)
        return True
    except OSError:
        if is_dataset_folder(folder):
            shutil.rmtree(tmp, ignore_errors=True)
            return False
        raise


def write_dataset(folder: Path, data: InteractionData, notes: Sequence[str], extra: Dict[str, Any]) -> None:
    """Write an in-memory dataset (e.g. synthetic data) as a dataset folder.

    Example::

        write_dataset(Path("prepped/synthetic"), synthetic_data(100_000), notes=[], extra={})
    """
    tmp = temporary_folder(folder)
    shutil.rmtree(tmp, ignore_errors=True)
    history = max((s.history_length for s in data.splits.values()), default=0)
    rows = {k: len(v) for k, v in data.splits.items()}
    writer = DatasetWriter(tmp, data.tables, data.multi_hot, len(data.dense_names), data.tasks, rows, history, data.slices)
    for name, split in data.splits.items():
        part = split.read(0, len(split))
        writer.append(name, part.sparse, part.dense, part.labels, part.history, part.slices)
    writer.close()
    writer.write_meta(data.name, data.dense_names, notes, {"encoding": data.encoding, **extra})
    commit(tmp, folder)
