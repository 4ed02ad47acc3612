"""Which rows each rank reads in an epoch, in which order (numpy only).

The padding rule (as the in-memory loader before it): an epoch is ``ceil(N / B)`` steps
of a global batch of ``B`` rows; every rank takes ``B / world_size`` rows per step, and
the last, short global batch of ``L`` rows is split as evenly as possible
(``numpy.array_split``), each rank padding its part to ``ceil(L / world_size)`` rows
with weight-0 samples. So every rank runs the same steps at the same batch size, and
every row is read exactly once per epoch.

The block shuffle: rows are cut into blocks of ``block_rows`` consecutive rows, the
blocks are permuted (seeded by ``seed`` and the epoch), and the permuted sequence is
cut into one contiguous share per rank, of the sizes the padding rule gives. A rank
reads its share as a few long row ranges (never the whole split), a buffer of whole
batches at a time, and shuffles the rows inside each buffer (seeded by ``seed``, the
epoch, the rank and the buffer's index). Without shuffling, rank ``r`` reads the
``r``-th contiguous share in order.
"""

from dataclasses import dataclass
from typing import Iterator, List, Tuple

import numpy as np


def rank_rows(n: int, global_batch: int, world_size: int) -> np.ndarray:
    """Real rows per rank in an epoch (``int64 [world_size]``), by the padding rule."""
    per = global_batch // world_size
    full, last = divmod(n, global_batch)
    counts = np.full(world_size, full * per, dtype=np.int64)
    counts += last // world_size
    counts[: last % world_size] += 1
    return counts


@dataclass(frozen=True)
class EpochShare:
    """One rank's rows in one epoch, as row ranges in reading order, and its batches.

    Args:
        ranges: ``int64 [k, 2]`` of ``(start, stop)`` rows of the split.
        steps: batches every rank yields.
        batch_rows: rows per batch of a full step (``global_batch / world_size``).
        last_batch_rows: padded size of the last batch.
    """

    ranges: np.ndarray
    steps: int
    batch_rows: int
    last_batch_rows: int

    @property
    def rows(self) -> int:
        return int((self.ranges[:, 1] - self.ranges[:, 0]).sum())

    def batch_size(self, step: int) -> int:
        return self.last_batch_rows if step == self.steps - 1 else self.batch_rows

    def slice(self, start: int, stop: int) -> List[Tuple[int, int]]:
        """Row ranges of positions ``[start, stop)`` of this rank's stream."""
        lengths = self.ranges[:, 1] - self.ranges[:, 0]
        ends = np.cumsum(lengths)
        out = []
        for i in range(int(np.searchsorted(ends, start, side="right")), len(lengths)):
            begin = int(ends[i] - lengths[i])
            if begin >= stop:
                break
            lo, hi = max(start, begin), min(stop, int(ends[i]))
            if lo < hi:
                first = int(self.ranges[i, 0])
                out.append((first + lo - begin, first + hi - begin))
        return out


def epoch_share(
    n: int,
    global_batch: int,
    rank: int,
    world_size: int,
    shuffle: bool,
    seed: int,
    epoch: int,
    block_rows: int,
) -> EpochShare:
    """Rank ``rank``'s rows of an ``n``-row split in epoch ``epoch`` (module docstring).

    Example::

        share = epoch_share(1_000_000, 4096, rank=1, world_size=2, shuffle=True, seed=0, epoch=3, block_rows=4096)
        share.rows            # 500_000
        share.slice(0, 2048)  # the row ranges of this rank's first batch, before the in-buffer shuffle
    """
    if global_batch <= 0 or global_batch % world_size:
        raise ValueError(f"--batch_size {global_batch} must be a positive multiple of the world size {world_size}")
    if block_rows <= 0:
        raise ValueError(f"--shuffle_block_rows must be positive, got {block_rows}")
    counts = rank_rows(n, global_batch, world_size)
    starts = np.arange(0, n, block_rows, dtype=np.int64)
    order = np.random.default_rng([seed, epoch]).permutation(len(starts)) if shuffle else np.arange(len(starts))
    block_start = starts[order]
    block_stop = np.minimum(block_start + block_rows, n)
    ends = np.cumsum(block_stop - block_start)  # stream position where each block ends
    lo = int(counts[:rank].sum())
    hi = lo + int(counts[rank])
    first = int(np.searchsorted(ends, lo, side="right"))
    last = int(np.searchsorted(ends, hi, side="left"))
    ranges = np.zeros((0, 2), np.int64)
    if hi > lo:
        ranges = np.stack([block_start[first : last + 1], block_stop[first : last + 1]], axis=1)
        # Trim the first and last block to the share's bounds.
        ranges[0, 0] += lo - (int(ends[first]) - int(block_stop[first] - block_start[first]))
        ranges[-1, 1] -= int(ends[last]) - hi
    steps = -(-n // global_batch)
    last_rows = n - (steps - 1) * global_batch if steps else 0
    return EpochShare(
        ranges=ranges.astype(np.int64),
        steps=steps,
        batch_rows=global_batch // world_size,
        last_batch_rows=-(-last_rows // world_size),
    )


def buffers(share: EpochShare, buffer_rows: int, start_step: int = 0) -> Iterator[Tuple[int, range]]:
    """``(buffer index, its steps)``: whole batches per shuffle buffer, about
    ``buffer_rows`` rows each. Buffers that end before ``start_step`` are left out (a
    resumed epoch does not read them)."""
    per_buffer = max(1, buffer_rows // max(share.batch_rows, 1))
    for index, first in enumerate(range(0, share.steps, per_buffer)):
        steps = range(first, min(share.steps, first + per_buffer))
        if steps[-1] >= start_step:
            yield index, steps
