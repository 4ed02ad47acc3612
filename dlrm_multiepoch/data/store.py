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

This module reads folders (:func:`open_dataset`); :mod:`~dlrm_multiepoch.data.store_writer`
writes them.
"""

import json
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from dlrm_multiepoch.data.dataset import InteractionData, Ragged, Split, TableSpec
from dlrm_multiepoch.data.npy import NpyFile

FORMAT = "dlrm_multiepoch.dataset/1"
META = "meta.json"


def is_dataset_folder(path: Path) -> bool:
    return (Path(path) / META).is_file()


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
        row_weights={s: {int(c): float(w) for c, w in t.items()} for s, t in meta.get("row_weights", {}).items()},
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
