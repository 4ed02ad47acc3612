"""``.npy`` files written row block by row block and read by row ranges (numpy only).

Training reads column files with ``os.pread`` into fresh buffers rather than through a
memory map: pages of a mapped file count in the process's resident memory for as long
as the mapping lives, so a rank mapping its share of a 50 GB split would appear to hold
it all. A pread buffer is freed with the batch, and resident memory stays flat.
"""

import os
from pathlib import Path
from typing import Tuple, Union

import numpy as np
from numpy.lib import format as npy_format

PathLike = Union[str, Path]


class NpyWriter:
    """Appends rows to a C-order ``.npy`` whose total row count is known up front.

    Args:
        path: the file to write.
        dtype: element type.
        shape: full shape, rows first (e.g. ``(n, 13)``).

    Example::

        with NpyWriter("train/dense.npy", np.float32, (n, 13)) as w:
            for block in blocks:
                w.append(block)
    """

    def __init__(self, path: PathLike, dtype: np.dtype, shape: Tuple[int, ...]) -> None:
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(s) for s in shape)
        self.rows = 0
        self._file = open(self.path, "wb")
        npy_format.write_array_header_1_0(
            self._file, {"descr": npy_format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": self.shape}
        )

    def append(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        if block.shape[1:] != self.shape[1:]:
            raise ValueError(f"{self.path}: block of shape {block.shape} does not match rows of {self.shape}")
        if self.rows + len(block) > self.shape[0]:
            raise ValueError(f"{self.path}: more than the {self.shape[0]} rows declared")
        self._file.write(block.data)
        self.rows += len(block)

    def close(self) -> None:
        self._file.close()
        if self.rows != self.shape[0]:
            raise ValueError(f"{self.path}: {self.rows} rows written, {self.shape[0]} declared")

    def __enter__(self) -> "NpyWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self._file.close()


class NpyFile:
    """A C-order ``.npy`` on disk, read by row ranges without mapping it.

    Args:
        path: the file.

    Example::

        dense = NpyFile("train/dense.npy")
        rows = dense.read(1000, 2000)     # ndarray [1000, 13], a fresh buffer
    """

    def __init__(self, path: PathLike) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as f:
            version = npy_format.read_magic(f)
            read_header = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
            shape, fortran, dtype = read_header(f)
            self.offset = f.tell()
        if fortran or dtype.hasobject:
            raise ValueError(f"{self.path}: expected a C-order numeric array")
        self.shape: Tuple[int, ...] = tuple(shape)
        self.dtype = dtype
        self.row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        expected = self.offset + self.shape[0] * self.row_bytes
        actual = self.path.stat().st_size
        if actual != expected:
            raise ValueError(f"{self.path}: {actual} bytes on disk, its header promises {expected} (truncated?)")

    def __len__(self) -> int:
        return self.shape[0]

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` as a new array."""
        start, stop = max(0, start), min(stop, self.shape[0])
        out = np.empty((max(0, stop - start),) + self.shape[1:], dtype=self.dtype)
        if out.size:
            _pread_into(self.path, out, self.offset + start * self.row_bytes)
        return out

    def take(self, rows: np.ndarray, gap_bytes: int = 1 << 16) -> np.ndarray:
        """Rows ``rows`` as a new array, read as runs of nearby rows (rows less than
        ``gap_bytes`` apart share one read). Not through a memory map: the kernel maps
        the pages around every touched row, and a sample of rows spread over a large
        file would count most of it in the resident memory."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows),) + self.shape[1:], dtype=self.dtype)
        if not len(rows):
            return out
        if rows.min() < 0 or rows.max() >= self.shape[0]:
            raise IndexError(f"{self.path}: rows outside [0, {self.shape[0]})")
        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        gap = max(1, gap_bytes // max(self.row_bytes, 1))
        breaks = np.flatnonzero(np.diff(ordered) > gap) + 1
        for lo, hi in zip(np.concatenate([[0], breaks]), np.concatenate([breaks, [len(ordered)]])):
            first = int(ordered[lo])
            block = self.read(first, int(ordered[hi - 1]) + 1)
            out[order[lo:hi]] = block[ordered[lo:hi] - first]
        return out

    def memmap(self) -> np.ndarray:
        """The whole file as a read-only memory map (for code that wants an array)."""
        return np.load(self.path, mmap_mode="r")


def _pread_into(path: Path, out: np.ndarray, pos: int) -> None:
    view = memoryview(out.reshape(-1).view(np.uint8))
    with open(path, "rb", buffering=0) as f:
        done = 0
        while done < len(view):
            got = os.preadv(f.fileno(), [view[done:]], pos + done)
            if got <= 0:
                raise OSError(f"{path}: short read at byte {pos + done}")
            done += got


class SpillColumn:
    """A headerless column of rows, appended block by block and read back by range
    (preprocessing's scratch space: the row count is unknown until the input ends).

    Args:
        path: the scratch file.
        dtype: element type.
        row_shape: shape of one row (``()`` for scalars).
        rows: -1 (a new column, written here), else the rows of a column already written
            (by another process: :meth:`describe`), read only.

    Example::

        codes = SpillColumn(tmp / "item.codes", np.int64)
        codes.append(chunk_codes)
        first_block = codes.read(0, 65536)
    """

    def __init__(self, path: PathLike, dtype: np.dtype, row_shape: Tuple[int, ...] = (), rows: int = -1) -> None:
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.row_shape = tuple(row_shape)
        self.row_bytes = int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize
        self.rows = max(rows, 0)
        self._file = open(self.path, "wb") if rows < 0 else None  # rows >= 0: a written column, read back

    def describe(self) -> Tuple[str, str, Tuple[int, ...], int]:
        """``(path, dtype, row_shape, rows)``: what reopens the closed column in another process."""
        return str(self.path), self.dtype.str, self.row_shape, self.rows

    def append(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        self._file.write(block.data)
        self.rows += len(block)

    def read(self, start: int, stop: int) -> np.ndarray:
        if self._file is not None and not self._file.closed:
            self._file.flush()
        start, stop = max(0, start), min(stop, self.rows)
        out = np.empty((max(0, stop - start),) + self.row_shape, dtype=self.dtype)
        if out.size:
            _pread_into(self.path, out, start * self.row_bytes)
        return out

    def read_all(self) -> np.ndarray:
        return self.read(0, self.rows)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
