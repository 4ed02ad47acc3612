"""Id maps for vocabularies of any size: arrow and numpy arrays, no Python object per id.

Raw values become ids in three steps, each streaming or O(vocabulary) in arrays:

1. :class:`ValueCoder` (scan): each chunk's distinct values, in first-appearance order,
   are spilled to disk; every row gets a *stacked code* (its value's position in that
   spill). One hash pass over the spill (``pyarrow.compute.dictionary_encode``) turns
   stacked codes into *global codes*: the value's rank of first appearance in the file.
2. :class:`IdCounter` (fit): counts and first train row per global code.
3. :func:`frequency_ids`: the id of each global code, by descending train count (ties:
   first train appearance), ids seen fewer than ``min_count`` times folded into row 0.

The result equals fitting a dict on the train rows and looking every row up, whatever
the chunking.
"""

import contextlib
import hashlib
from pathlib import Path
from typing import Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dlrm_multiepoch.data.dataset import UNKNOWN_ID

NO_ROW = np.iinfo(np.int64).max


def normalize_values(values: pa.Array) -> pa.Array:
    """Arrow values with pandas' notion of equality: NaN is missing, ``-0.0 == 0.0``,
    dictionary arrays decoded."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if pa.types.is_floating(values.type):
        values = pc.if_else(pc.is_nan(values), pa.scalar(None, values.type), pc.add(values, 0.0))
    if pa.types.is_large_string(values.type):
        values = values.cast(pa.string())
    return values


class ValueCoder:
    """Codes a column's values chunk by chunk (step 1 of the module docstring).

    Args:
        spill: folder for the distinct values of every chunk (an Arrow IPC file).
        name: the column's name (file name and error messages).

    Example::

        coder = ValueCoder(tmp, "item")
        stacked = [coder.encode(chunk["item"]) for chunk in chunks]   # int64, -1 = missing
        coder.close()
        values, to_global = global_codes([coder.path], "item")
        global_codes = to_global[stacked[0][stacked[0] >= 0]]
    """

    def __init__(self, spill: Path, name: str) -> None:
        self.name = name
        self.path = Path(spill) / f"{name}.uniques.arrow"
        self._writer: Optional[pa.ipc.RecordBatchFileWriter] = None
        self._type: Optional[pa.DataType] = None
        self.stacked = 0  # distinct values spilled so far

    def encode(self, values: pa.Array) -> np.ndarray:
        """Stacked codes of ``values`` (``int64``; -1 for a missing value)."""
        values = normalize_values(values)
        if self._type is None:
            self._type = values.type
            self._writer = pa.ipc.new_file(str(self.path), pa.schema([("v", values.type)]))
        elif values.type != self._type:
            try:
                values = values.cast(self._type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise ValueError(
                    f"column {self.name!r}: values of type {values.type} after earlier values of type {self._type}"
                ) from e
        encoded = pc.dictionary_encode(values)
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        codes = np.where(encoded.indices.is_null().to_numpy(zero_copy_only=False), -1, codes).astype(np.int64)
        codes[codes >= 0] += self.stacked
        self._writer.write_batch(pa.record_batch([encoded.dictionary], names=["v"]))
        self.stacked += len(encoded.dictionary)
        return codes

    def close(self) -> None:
        """Finish the spill file (read by :func:`global_codes`, maybe in another process)."""
        if self._writer is not None:
            self._writer.close()


def global_codes(spills: Sequence[Path], name: str) -> Tuple[pa.Array, np.ndarray]:
    """``(values, to_global)`` of :class:`ValueCoder` spills read one after the other (the
    coders of consecutive input files: stacked codes of file ``k`` follow those of file
    ``k - 1``): every distinct value in first-appearance order, and each stacked code's
    global code.

    Example::

        values, to_global = global_codes([part0 / "coder0.uniques.arrow", part1 / "coder0.uniques.arrow"], "item")
    """
    with contextlib.ExitStack() as maps:  # read in place: only the distinct values are copied out
        columns = [pa.ipc.open_file(maps.enter_context(pa.memory_map(str(p)))).read_all().column("v") for p in spills]
        if not columns:
            return pa.array([], pa.null()), np.zeros(0, np.int64)
        first = columns[0].type
        for k, column in enumerate(columns[1:], 1):
            if column.type != first:
                try:
                    columns[k] = column.cast(first)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise ValueError(
                        f"column {name!r}: values of type {column.type} in one input file, {first} in an earlier one"
                    ) from e
        encoded = pc.dictionary_encode(pa.chunked_array([c for column in columns for c in column.chunks], first))
        if not encoded.num_chunks:
            return pa.array([], first), np.zeros(0, np.int64)
        to_global = np.concatenate([c.indices.to_numpy(zero_copy_only=False).astype(np.int64) for c in encoded.chunks])
        return pa.concat_arrays([encoded.chunk(0).dictionary]), to_global  # own the buffers: the maps close


class IdCounter:
    """Train counts and first train row of every code (step 2 of the module docstring).

    Args:
        size: number of codes (``len(values)``, or the rows of a hashed table).
        first_rows: also track each code's first train row (the frequency order's
            tie-break; hashed tables need only counts).

    Example::

        counter = IdCounter(len(values), first_rows=True)
        counter.update(codes_of_train_rows, their_row_numbers)
    """

    def __init__(self, size: int, first_rows: bool = False) -> None:
        self.counts = np.zeros(size, dtype=np.int64)
        self.first = np.full(size, NO_ROW, dtype=np.int64) if first_rows else None

    def update(self, codes: np.ndarray, rows: np.ndarray) -> None:
        """Count ``codes`` (missing ones, -1, skipped) seen at row numbers ``rows``."""
        present = codes >= 0
        codes, rows = codes[present], rows[present]
        if codes.size == 0:
            return
        self.counts += np.bincount(codes, minlength=len(self.counts))
        if self.first is not None:
            distinct, at = np.unique(codes, return_index=True)  # first occurrence within this block
            np.minimum.at(self.first, distinct, rows[at])


def frequency_ids(counter: IdCounter, min_count: int) -> Tuple[np.ndarray, np.ndarray]:
    """``(id_of_code, kept)``: the table row of every code (0 for codes seen fewer than
    ``min_count`` times in train, unseen ones included), and the kept codes in id order."""
    kept = np.flatnonzero(counter.counts >= max(min_count, 1))
    kept = kept[np.lexsort((counter.first[kept], -counter.counts[kept]))]
    id_of = np.full(len(counter.counts), UNKNOWN_ID, dtype=np.int64)
    id_of[kept] = np.arange(1, len(kept) + 1)
    return id_of, kept


def hashed_ids(counter: IdCounter, min_count: int) -> np.ndarray:
    """Identity map of a hashed table, rows seen fewer than ``min_count`` times in train
    (never-seen rows included) folded into row 0."""
    id_of = np.arange(len(counter.counts), dtype=np.int64)
    id_of[counter.counts < max(min_count, 1)] = UNKNOWN_ID
    id_of[UNKNOWN_ID] = UNKNOWN_ID
    return id_of


def values_digest(values: pa.Array) -> str:
    """sha256 of the values as text, in id order: equal maps have equal digests."""
    text = values.cast(pa.large_string()) if len(values) else pa.array([], pa.large_string())
    h = hashlib.sha256(str(values.type).encode())
    for buf in (text.buffers()[1], text.buffers()[2]):
        if buf is not None:
            h.update(memoryview(buf)[: buf.size])
    return h.hexdigest()


def write_vocab(path: Path, values: pa.Array, counts: np.ndarray) -> None:
    """The kept raw values of a table in id order (id ``i + 1`` is row ``i``), with train counts."""
    pq.write_table(pa.table({"value": values, "train_count": pa.array(counts)}), str(path))


def read_vocab(path: Path) -> pa.Table:
    """A table's id map as written by :func:`write_vocab`: row ``i`` is id ``i + 1``."""
    return pq.read_table(str(path))

