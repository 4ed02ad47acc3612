"""Preprocessing's first pass, one part per input file, in worker processes if asked.

Each input file is parsed on its own (:func:`scan_chunks`) into a *part*: spill columns
of its rows (stacked codes of raw ids, hashed ids, numbers, the malformed-row mask) and
the distinct raw values it met, in a folder of its own. :class:`ScanView` then reads the
parts one after the other as if one file had been scanned: the rows of file 0, then
those of file 1, ..., the stacked codes of file ``k`` shifted past those of the files
before it. Every later pass (split, id maps, writing) runs once over that view, so the
dataset does not depend on how many workers scanned the files, nor on the chunk size.

Workers are ``spawn`` ed processes (:mod:`~dlrm_multiepoch.data.workers`); a file's
reader must therefore be a picklable function (module level, or a ``functools.partial``
of one).
"""

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dlrm_multiepoch.data.npy import SpillColumn
from dlrm_multiepoch.data.recipe import Chunk
from dlrm_multiepoch.data.vocab import ValueCoder, global_codes
from dlrm_multiepoch.data.workers import map_in_workers

# (path, report) -> the file's chunks; fills ``report`` (JSON-able) as it reads.
ReadFile = Callable[[Path, Dict[str, Any]], Iterator[Chunk]]


@dataclass(frozen=True)
class FileInput:
    """One input file and the function that parses it.

    Args:
        path: the file.
        read: ``(path, report) -> chunks``; module level (workers unpickle it).

    Example::

        FileInput(Path("day_0"), functools.partial(criteo_file_chunks, 100_000, 16 << 20))
    """

    path: Path
    read: ReadFile


@dataclass(frozen=True)
class ScanSpec:
    """The features a scan spills (picklable: a recipe holds functions, this does not)."""

    features: Tuple[str, ...]
    bags: Tuple[str, ...] = ()
    hashed: Tuple[str, ...] = ()

    @property
    def raw(self) -> List[str]:
        """Features coded from raw values (not hashed by the source)."""
        return [f for f in self.features if f not in self.hashed]


@dataclass
class Part:
    """What scanning one input left: its rows, spill columns, coders and report."""

    rows: int
    columns: Dict[str, Tuple[str, str, Tuple[int, ...], int]]  # name -> SpillColumn.describe()
    coders: Dict[str, Tuple[str, int]]  # raw feature -> (spill file, distinct values spilled)
    report: Dict[str, Any] = field(default_factory=dict)


def _bag_lengths(values: pa.Array) -> Tuple[np.ndarray, pa.Array]:
    """Per-row lengths (null lists: 0) and the flattened items of a list array."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(values), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return lengths, pc.list_flatten(values)


def _drop_missing_items(lengths: np.ndarray, codes: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    keep = codes >= 0
    if keep.all():
        return lengths, codes
    row = np.repeat(np.arange(len(lengths)), lengths)
    return np.bincount(row[keep], minlength=len(lengths)).astype(np.int64), codes[keep]


def scan_chunks(spec: ScanSpec, chunks: Iterable[Chunk], folder: Path, report: Dict[str, Any]) -> Part:
    """Spill ``chunks`` into ``folder`` (created); ``report`` is the reader's, filled by then.

    Example::

        report = {}
        part = scan_chunks(spec, read(path, report), tmp / "part0", report)
    """
    folder.mkdir(parents=True)
    columns: Dict[str, SpillColumn] = {}
    coders = {f: ValueCoder(folder, f"coder{i}") for i, f in enumerate(spec.raw)}

    def append(name: str, values: np.ndarray) -> None:
        if name not in columns:
            file = folder / hashlib.sha1(name.encode()).hexdigest()[:16]
            columns[name] = SpillColumn(file, values.dtype, values.shape[1:])
        columns[name].append(values)

    rows = 0
    for chunk in chunks:
        for f in spec.features:
            if f in spec.bags:
                lengths, items = _bag_lengths(chunk.bags[f])
                lengths, codes = _drop_missing_items(lengths, coders[f].encode(items))
                append(f"len:{f}", lengths)
                append(f"bag:{f}", codes)
            elif f in spec.hashed:
                append(f"id:{f}", np.asarray(chunk.hashed[f]))  # the source's dtype (int32)
            else:
                append(f"id:{f}", coders[f].encode(chunk.ids[f]))
        for name, values in chunk.numbers.items():
            append(f"num:{name}", np.asarray(values))
        append("bad", np.zeros(chunk.rows, bool) if chunk.bad is None else np.asarray(chunk.bad, bool))
        rows += chunk.rows
    for column in columns.values():
        column.close()
    for coder in coders.values():
        coder.close()
    return Part(
        rows,
        {name: column.describe() for name, column in columns.items()},
        {f: (str(coder.path), coder.stacked) for f, coder in coders.items()},
        report,
    )


def scan_file(spec: ScanSpec, item: FileInput, folder: Path) -> Part:
    """:func:`scan_chunks` of one file (what a worker runs)."""
    report: Dict[str, Any] = {}
    return scan_chunks(spec, item.read(item.path, report), folder, report)


def scan_files(spec: ScanSpec, files: Sequence[FileInput], folder: Path, workers: int = 1) -> List[Part]:
    """One part per file, in file order, in ``folder/part<k>``; ``workers`` > 1 scans up
    to that many files at once in worker processes. The parts do not depend on it.

    Example::

        parts = scan_files(spec, [FileInput(p, read) for p in days], tmp / "scratch", workers=4)
    """
    folders = [folder / f"part{k}" for k in range(len(files))]
    return map_in_workers(scan_file, [spec] * len(files), files, folders, workers=workers, what="preprocessing")


class ScanView:
    """The parts read as one scan: rows of part 0, then part 1, ...

    Args:
        parts: the parts, in file order.
        raw: the features whose stacked codes are shifted part by part.

    Example::

        view = ScanView(parts, spec.raw)
        labels = view.read("num:label", 0, 1000)
    """

    def __init__(self, parts: Sequence[Part], raw: Sequence[str]) -> None:
        self.rows = sum(p.rows for p in parts)
        self.names = sorted({name for p in parts for name in p.columns})
        self.coded = {f: [p.coders[f] for p in parts] for f in raw}
        self._pieces: Dict[str, List[Tuple[int, SpillColumn, int]]] = {}  # name -> (first row, column, code shift)
        for name in self.names:
            feature = name.partition(":")[2]
            shift, start, pieces = 0, 0, []
            for p in parts:
                if name in p.columns:
                    path, dtype, shape, rows = p.columns[name]
                    pieces.append((start, SpillColumn(path, np.dtype(dtype), tuple(shape), rows), shift))
                    start += rows
                if name.startswith(("id:", "bag:")) and feature in self.coded:
                    shift += p.coders[feature][1]
            dtypes = {column.dtype for _, column, _ in pieces}
            if len(dtypes) > 1:
                raise ValueError(f"scanned column {name!r}: {sorted(map(str, dtypes))} in different input files")
            # A column a source gave for some files only would shift every later row (a source bug).
            uneven = [k for k, p in enumerate(parts) if not name.startswith("bag:") and p.rows and
                      (name not in p.columns or p.columns[name][3] != p.rows)]  # fmt: skip
            if uneven:
                raise ValueError(f"scanned column {name!r} does not cover every row of input files {uneven}")
            self._pieces[name] = pieces

    def read(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` of the scanned column ``name`` over all parts."""
        if name not in self._pieces:
            raise KeyError(f"no scanned column {name!r}; scanned: {self.names}")
        out = []
        for first, column, shift in self._pieces[name]:
            a, b = max(start, first), min(stop, first + column.rows)
            if a < b:
                values = column.read(a - first, b - first)
                out.append(np.where(values >= 0, values + shift, values) if shift else values)
        pieces = self._pieces[name]
        if not out:
            return np.zeros((0,) + pieces[0][1].row_shape, pieces[0][1].dtype)
        return out[0] if len(out) == 1 else np.concatenate(out)

    def read_all(self, name: str) -> np.ndarray:
        return self.read(name, 0, self.total(name))

    def total(self, name: str) -> int:
        """Rows of column ``name`` (elements, for a bag's items)."""
        return sum(column.rows for _, column, _ in self._pieces.get(name, []))

    def global_codes(self, feature: str) -> Tuple[pa.Array, np.ndarray]:
        """``(values, to_global)`` of a raw feature over all parts
        (:func:`~dlrm_multiepoch.data.vocab.global_codes`)."""
        return global_codes([Path(path) for path, stacked in self.coded[feature] if stacked], feature)
