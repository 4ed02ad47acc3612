"""A preprocessed dataset on disk: one ``.npy`` per column and split, plus ``meta.json``.

Layout of a dataset folder (what ``dlrm-multiepoch preprocess`` writes)::

    meta.json                  tables, features, tasks, row counts, id ranges, id-map
                               checksums, notes, the options it was built with
    <split>/dense.npy          float32 [N, D]
    <split>/labels_<i>.npy     float32 [N], task i
    <split>/sparse_<i>.npy     int32/int64 [N], single-id feature i
    <split>/bag_<i>.values.npy, bag_<i>.offsets.npy   multi-hot feature i (values, N + 1 offsets)
    <split>/history.npy        int32/int64 [N, K]
    <split>/slices.npy         uint8 [N]: bit i set = the row is in slice i (meta "slices")
    vocab/<table>.parquet      raw values of each frequency-ordered table, in id order

Files are numbered, not named after features, so any column name is safe. A folder is
written under a temporary name and renamed when complete: a folder with ``meta.json``
is whole. Everything here is numpy; nothing imports torch.
"""

import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from dlrm_multiepoch.data.cache import temporary_folder
from dlrm_multiepoch.data.dataset import HISTORY_FEATURE, HISTORY_PAD, InteractionData, Ragged, Split, TableSpec
from dlrm_multiepoch.data.npy import NpyFile, NpyWriter

FORMAT = "dlrm_multiepoch.dataset/1"
META = "meta.json"


def id_dtype(num_embeddings: int) -> np.dtype:
    """The narrowest of int32/int64 that holds every id of a table."""
    return np.dtype(np.int32) if num_embeddings <= np.iinfo(np.int32).max else np.dtype(np.int64)


def is_dataset_folder(path: Path) -> bool:
    return (Path(path) / META).is_file()


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


class StoredSplit:
    """One split of a dataset folder; implements :class:`~dlrm_multiepoch.data.dataset.SplitSource`.

    ``read`` and ``take`` return in-memory :class:`Split` s; ``sparse``, ``dense``,
    ``labels`` and ``history`` give read-only memory maps for code that wants arrays
    (touching all of a large split through them reads it all).

    Args:
        folder: the split's folder.
        features: feature names, in file-number order.
        multi_hot: which of them are bags.
        tasks: label names, in file-number order.
        layout: the split's entry in ``meta.json``.
        history_length: K (0: no history file).
        has_slices: the split has a ``slices.npy`` column.
    """

    def __init__(
        self,
        folder: Path,
        features: Sequence[str],
        multi_hot: Sequence[str],
        tasks: Sequence[str],
        layout: Dict[str, Any],
        history_length: int,
        has_slices: bool = False,
    ) -> None:
        self.folder = Path(folder)
        self._features = list(features)
        self._rows = int(layout["rows"])
        self._ranges = {f: (int(lo), int(hi)) for f, (lo, hi) in layout["id_ranges"].items()}
        self._label_sums = {t: float(v) for t, v in layout["label_sums"].items()}
        self._dense = NpyFile(self.folder / "dense.npy")
        self._labels = {t: NpyFile(self.folder / f"labels_{i}.npy") for i, t in enumerate(tasks)}
        self._sparse: Dict[str, NpyFile] = {}
        self._bags: Dict[str, Tuple[NpyFile, NpyFile]] = {}
        for i, f in enumerate(features):
            if f in multi_hot:
                values, offsets = (NpyFile(self.folder / f"bag_{i}.{part}.npy") for part in ("values", "offsets"))
                self._bags[f] = (values, offsets)
            else:
                self._sparse[f] = NpyFile(self.folder / f"sparse_{i}.npy")
        self._history = NpyFile(self.folder / "history.npy") if history_length else None
        self._slices = NpyFile(self.folder / "slices.npy") if has_slices else None
        files = [self._dense, *self._labels.values(), *self._sparse.values()] + [o for _, o in self._bags.values()]
        for file in files + [f for f in (self._history, self._slices) if f is not None]:
            if len(file) != self._rows + (1 if file.path.name.endswith(".offsets.npy") else 0):
                raise ValueError(f"{file.path}: {len(file)} rows, meta.json says {self._rows}")

    def __len__(self) -> int:
        return self._rows

    @property
    def history_length(self) -> int:
        return 0 if self._history is None else int(self._history.shape[1])

    def read(self, start: int, stop: int) -> Split:
        start, stop = max(0, start), min(stop, self._rows)
        sparse: Dict[str, Any] = {f: file.read(start, stop) for f, file in self._sparse.items()}
        for f, (values, offsets) in self._bags.items():
            off = offsets.read(start, stop + 1)
            sparse[f] = Ragged(values.read(int(off[0]), int(off[-1])), off - off[0])
        return Split(
            sparse={f: sparse[f] for f in self._features},
            dense=self._dense.read(start, stop),
            labels={t: file.read(start, stop) for t, file in self._labels.items()},
            history=None if self._history is None else self._history.read(start, stop),
            slices=None if self._slices is None else self._slices.read(start, stop),
        )

    def take(self, rows: np.ndarray) -> Split:
        rows = np.asarray(rows, dtype=np.int64)
        sparse: Dict[str, Any] = {f: file.take(rows) for f, file in self._sparse.items()}
        for f, (values, offsets) in self._bags.items():
            starts = offsets.take(rows)
            lengths = offsets.take(rows + 1) - starts
            bags = Ragged.from_lengths(np.zeros(int(lengths.sum()), np.int64), lengths)
            within = np.arange(len(bags.values)) - np.repeat(bags.offsets[:-1], lengths)
            sparse[f] = Ragged(values.take(np.repeat(starts, lengths) + within), bags.offsets)
        return Split(
            sparse={f: sparse[f] for f in self._features},
            dense=self._dense.take(rows),
            labels={t: file.take(rows) for t, file in self._labels.items()},
            history=None if self._history is None else self._history.take(rows),
            slices=None if self._slices is None else self._slices.take(rows),
        )

    def id_ranges(self) -> Dict[str, Tuple[int, int]]:
        return dict(self._ranges)

    def label_sums(self) -> Dict[str, float]:
        return dict(self._label_sums)

    # Array views for code written against in-memory splits.
    @property
    def sparse(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {f: file.memmap() for f, file in self._sparse.items()}
        out.update({f: Ragged(v.memmap(), o.memmap()) for f, (v, o) in self._bags.items()})
        return out

    @property
    def dense(self) -> np.ndarray:
        return self._dense.memmap()

    @property
    def labels(self) -> Dict[str, np.ndarray]:
        return {t: file.memmap() for t, file in self._labels.items()}

    @property
    def history(self) -> Optional[np.ndarray]:
        return None if self._history is None else self._history.memmap()


def read_meta(folder: Path) -> Dict[str, Any]:
    meta = json.loads((Path(folder) / META).read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{folder}/{META}: format {meta.get('format')!r}, expected {FORMAT!r}")
    return meta


def open_dataset(folder: Path) -> Tuple[InteractionData, Dict[str, Any]]:
    """The dataset in ``folder`` with every split read from disk on demand, and its meta.

    Raises ``ValueError`` (or ``OSError``) if the folder is damaged.

    Example::

        data, meta = open_dataset(Path("prepped/criteo"))
        batch_rows = data.splits["train"].read(0, 4096)
    """
    folder = Path(folder)
    meta = read_meta(folder)
    tables = [TableSpec(**t) for t in meta["tables"]]
    data = InteractionData(
        name=meta["name"],
        tables=tables,
        dense_names=meta["dense_names"],
        tasks=meta["tasks"],
        multi_hot=list(meta["multi_hot"]),
        slices=list(meta.get("slices", [])),
        encoding=meta.get("encoding", {}),
    )
    for split, layout in meta["splits"].items():
        data.splits[split] = StoredSplit(
            folder / split,
            meta["features"],
            meta["multi_hot"],
            meta["tasks"],
            layout,
            int(meta["history_length"]),
            has_slices=bool(meta.get("slices")),
        )
    return data, meta


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
