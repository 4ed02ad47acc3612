"""TorchRec's preprocessed Criteo folders, read in place (numpy only).

TorchRec's Criteo scripts (``torchrec/datasets/scripts/npy_preproc_criteo.py``, and the
optional ``contiguous_preproc_criteo.py``) write one triple per day::

    day_N_dense.npy    float32 [rows, 13]   already log-transformed
    day_N_sparse.npy   int32/int64 [rows, 26]
    day_N_labels.npy   int32 [rows, 1]

Point ``--dataset criteo --data_path`` at the folder. As in TorchRec's DLRM example
(``InMemoryBinaryCriteoIterDataPipe``): days ``0..K-1`` train, the last day is split in
halves (``ceil`` first) and the second half is the test split; categorical ids are taken
modulo ``--criteo_hash_size`` (TorchRec's ``hashes``). Nothing is copied or re-encoded;
each rank reads its rows from the day files by range.
"""

import re
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from dlrm_multiepoch.data.criteo_columns import CAT_FEATURE_COUNT, DENSE_FEATURES, INT_FEATURE_COUNT, SPARSE_FEATURES, TASK
from dlrm_multiepoch.data.dataset import InteractionData, Split, TableSpec
from dlrm_multiepoch.data.npy import NpyFile

_DAY = re.compile(r"^day_(\d+)_dense\.npy$")


def is_torchrec_criteo_dir(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / "day_0_dense.npy").is_file()


class _Day:
    """One day's three files, checked against each other."""

    def __init__(self, folder: Path, day: int) -> None:
        files = {kind: folder / f"day_{day}_{kind}.npy" for kind in ("dense", "sparse", "labels")}
        for file in files.values():
            if not file.is_file():
                raise FileNotFoundError(f"--data_path {folder}: {file.name} is missing (TorchRec's Criteo layout)")
        self.dense, self.sparse, self.labels = (NpyFile(files[k]) for k in ("dense", "sparse", "labels"))
        self.rows = len(self.dense)
        expected = {
            self.dense: (self.rows, INT_FEATURE_COUNT),
            self.sparse: (self.rows, CAT_FEATURE_COUNT),
            self.labels: (self.rows, 1),
        }
        for file, shape in expected.items():
            if file.shape != shape and not (file is self.labels and file.shape == (self.rows,)):
                raise ValueError(f"{file.path}: shape {file.shape}, expected {shape} (TorchRec's Criteo layout)")
        if not np.issubdtype(self.sparse.dtype, np.integer):
            raise ValueError(f"{self.sparse.path}: dtype {self.sparse.dtype}, expected integer ids")


class TorchRecCriteoSplit:
    """Rows of consecutive day files (a row range of each); a
    :class:`~dlrm_multiepoch.data.dataset.SplitSource`.

    Args:
        parts: ``(day, first_row, stop_row)`` per day, in order.
        hash_size: rows per table; ids are taken modulo it.
    """

    def __init__(self, parts: List[Tuple[_Day, int, int]], hash_size: int) -> None:
        self.parts = parts
        self.hash_size = hash_size
        self.bounds = np.cumsum([0] + [stop - start for _, start, stop in parts])

    def __len__(self) -> int:
        return int(self.bounds[-1])

    @property
    def history_length(self) -> int:
        return 0

    def _rows(self, dense: np.ndarray, sparse: np.ndarray, labels: np.ndarray) -> Split:
        ids = np.mod(sparse, self.hash_size)
        return Split(
            sparse={f: np.ascontiguousarray(ids[:, j]) for j, f in enumerate(SPARSE_FEATURES)},
            dense=np.asarray(dense, dtype=np.float32),
            labels={TASK: labels.reshape(-1).astype(np.float32)},
        )

    def read(self, start: int, stop: int) -> Split:
        start, stop = max(0, start), min(stop, len(self))
        pieces = []
        for i, (day, first, _) in enumerate(self.parts):
            lo, hi = max(start, self.bounds[i]), min(stop, self.bounds[i + 1])
            if lo < hi:
                a, b = first + lo - self.bounds[i], first + hi - self.bounds[i]
                pieces.append(self._rows(day.dense.read(a, b), day.sparse.read(a, b), day.labels.read(a, b)))
        if not pieces:
            empty = (np.zeros((0, INT_FEATURE_COUNT), np.float32), np.zeros((0, CAT_FEATURE_COUNT), np.int64))
            return self._rows(*empty, np.zeros(0))
        return Split.concat(pieces)

    def take(self, rows: np.ndarray) -> Split:
        rows = np.asarray(rows, dtype=np.int64)
        which = np.searchsorted(self.bounds, rows, side="right") - 1
        pieces, order = [], []
        for i, (day, first, _) in enumerate(self.parts):
            mine = np.flatnonzero(which == i)
            if mine.size:
                local = first + rows[mine] - self.bounds[i]
                pieces.append(self._rows(day.dense.take(local), day.sparse.take(local), day.labels.take(local)))
                order.append(mine)
        merged = Split.concat(pieces)
        return merged.take(np.argsort(np.concatenate(order), kind="stable"))

    def id_ranges(self) -> Dict[str, Tuple[int, int]]:
        # Bounds by construction (ids modulo the table size), not scanned: a scan reads every day.
        return {f: (0, self.hash_size - 1) for f in SPARSE_FEATURES}

    def label_sums(self) -> Dict[str, float]:
        return {}


def open_torchrec_criteo(folder: Path, hash_size: int) -> InteractionData:
    """The days in ``folder`` as a dataset: train = all days but the last, test = the
    second half of the last day.

    Example::

        data = open_torchrec_criteo(Path("/data/criteo_1tb/npy"), hash_size=40_000_000)
    """
    folder = Path(folder)
    days = sorted(int(m.group(1)) for p in folder.iterdir() for m in [_DAY.match(p.name)] if m)
    if days != list(range(len(days))) or len(days) < 2:
        raise ValueError(
            f"--data_path {folder}: TorchRec's Criteo layout needs day_0 .. day_K files (K >= 1: the last day is "
            f"the test day), found days {days}"
        )
    loaded = [_Day(folder, d) for d in days]
    last = loaded[-1]
    half = (last.rows + 1) // 2  # TorchRec: the first ceil(rows / 2) are "val", the rest "test"
    data = InteractionData(
        name="criteo",
        tables=[TableSpec(f"t_{f}", hash_size, [f]) for f in SPARSE_FEATURES],
        dense_names=list(DENSE_FEATURES),
        tasks=[TASK],
    )
    data.splits["train"] = TorchRecCriteoSplit([(d, 0, d.rows) for d in loaded[:-1]], hash_size)
    data.splits["test"] = TorchRecCriteoSplit([(last, half, last.rows)], hash_size)
    return data
