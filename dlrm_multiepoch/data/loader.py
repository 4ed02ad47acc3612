"""The rank-sharded batch loader: one rank's share of a split, streamed as TorchRec batches."""

from typing import Iterator, List

import numpy as np
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.dataset import HISTORY_FEATURE, HISTORY_PAD, UNKNOWN_ID, InteractionData, Ragged, Split
from dlrm_multiepoch.data.prefetch import Prefetcher
from dlrm_multiepoch.data.shuffle import EpochShare, buffers, epoch_share

DEFAULT_BLOCK_ROWS = 4096
DEFAULT_BUFFER_ROWS = 1 << 18


class BatchLoader:
    """Iterates one rank's share of a split in batches, reading only that share.

    Each step is a global batch of ``global_batch_size`` rows cut into ``world_size``
    equal parts; the last, short global batch is split as evenly as possible and each
    rank pads its part to a common size with weight-0 samples. Every row of the split is
    seen exactly once per epoch across ranks, and all ranks run the same number of steps
    (a requirement of sharded lookups). With ``shuffle``, the order is a block shuffle
    (:mod:`~dlrm_multiepoch.data.shuffle`): seeded, reproducible, and never more than a
    buffer of rows in memory, however large the split.

    Args:
        data: the dataset (for tables and feature order).
        split: which split of ``data`` to iterate.
        global_batch_size: rows per step across all ranks; must divide by ``world_size``.
        rank: this process's rank.
        world_size: number of ranks.
        shuffle: reshuffle each epoch (seeded by ``seed`` and the epoch).
        seed: base seed of the shuffle.
        block_rows: rows per block of the block shuffle.
        buffer_rows: rows read and shuffled together (rounded to whole batches).
        prefetch_batches: batches a background thread prepares ahead (0: none).
        pin_memory: pin batches in page-locked memory (for asynchronous copies to CUDA).

    Example::

        loader = BatchLoader(data, "train", 1024, rank, world_size, shuffle=True)
        for epoch in range(3):
            loader.set_epoch(epoch)
            for batch in loader:
                ...
    """

    def __init__(
        self,
        data: InteractionData,
        split: str,
        global_batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = False,
        seed: int = 0,
        block_rows: int = DEFAULT_BLOCK_ROWS,
        buffer_rows: int = DEFAULT_BUFFER_ROWS,
        prefetch_batches: int = 2,
        pin_memory: bool = False,
    ) -> None:
        if split not in data.splits:
            raise KeyError(f"dataset {data.name!r} has no split {split!r}; it has {sorted(data.splits)}")
        if global_batch_size <= 0 or global_batch_size % world_size:
            raise ValueError(
                f"--batch_size {global_batch_size} must be a positive multiple of the world size {world_size}"
            )
        for flag, value in (("--shuffle_block_rows", block_rows), ("--shuffle_buffer_rows", buffer_rows)):
            if value <= 0:
                raise ValueError(f"{flag} must be positive, got {value}")
        if prefetch_batches < 0:
            raise ValueError(f"--prefetch_batches must be >= 0, got {prefetch_batches}")
        self.data = data
        self.split = data.splits[split]
        self.global_batch_size = global_batch_size
        self.rank = rank
        self.world_size = world_size
        self.shuffle = shuffle
        self.seed = seed
        self.block_rows = block_rows
        self.buffer_rows = buffer_rows
        self.prefetch_batches = prefetch_batches
        self.pin_memory = pin_memory
        self.epoch = 0
        self.start_step = 0
        self._features = data.feature_names
        self._multi_hot = set(data.multi_hot)
        # A weight per slice code (--val_unseen_share), or None: every row weighs 1.
        self._weight_of = None
        if data.row_weights.get(split):
            self._weight_of = np.ones(256, np.float32)
            for code, weight in data.row_weights[split].items():
                self._weight_of[code] = weight

    def set_epoch(self, epoch: int, start_step: int = 0) -> None:
        """The next iteration yields epoch ``epoch``'s batches from step ``start_step`` on
        (a resumed epoch skips the steps already trained, reading none of their rows
        where whole shuffle buffers are skipped)."""
        self.epoch = epoch
        self.start_step = start_step

    def __len__(self) -> int:
        return -(-len(self.split) // self.global_batch_size)

    def share(self) -> EpochShare:
        """This rank's rows of the current epoch."""
        return epoch_share(
            len(self.split),
            self.global_batch_size,
            self.rank,
            self.world_size,
            self.shuffle,
            self.seed,
            self.epoch,
            self.block_rows,
        )

    def __iter__(self) -> Iterator[Batch]:
        batches = self._batches()
        return Prefetcher(batches, self.prefetch_batches) if self.prefetch_batches else batches

    def _batches(self) -> Iterator[Batch]:
        share = self.share()
        per = share.batch_rows
        for index, steps in buffers(share, self.buffer_rows, self.start_step):
            first = steps[0] * per
            stop = min(share.rows, (steps[-1] + 1) * per)
            pieces = [self.split.read(a, b) for a, b in share.slice(first, stop)]
            window = Split.concat(pieces) if pieces else self.split.read(0, 0)
            if self.shuffle:
                order = np.random.default_rng([self.seed, self.epoch, self.rank, index]).permutation(len(window))
                window = window.take(order)
            for step in steps:
                if step < self.start_step:
                    continue
                lo = min(step * per - first, len(window))
                batch = self._make_batch(window.read(lo, min(lo + per, len(window))), share.batch_size(step))
                yield batch.pin_memory() if self.pin_memory else batch

    def _make_batch(self, part: Split, size: int) -> Batch:
        pad = size - len(part)
        real = np.ones(len(part), np.float32) if self._weight_of is None else self._weight_of[part.slices]
        weights = np.concatenate([real, np.zeros(pad, np.float32)])

        def padded(a: np.ndarray, fill: float) -> np.ndarray:
            if pad == 0:
                return a
            return np.concatenate([a, np.full((pad,) + a.shape[1:], fill, dtype=a.dtype)])

        lengths: List[np.ndarray] = []
        values: List[np.ndarray] = []
        for feature in self._features:
            if feature == HISTORY_FEATURE:
                hist = np.full((size, 0), HISTORY_PAD) if part.history is None else padded(part.history, HISTORY_PAD)
                mask = hist != HISTORY_PAD
                lengths.append(mask.sum(axis=1, dtype=np.int32))
                values.append(hist[mask])
            elif feature in self._multi_hot:
                bags: Ragged = part.sparse[feature]
                lengths.append(padded(bags.lengths().astype(np.int32), 0))
                values.append(bags.values)
            else:
                lengths.append(np.ones(size, dtype=np.int32))
                values.append(padded(part.sparse[feature], UNKNOWN_ID))
        kjt = KeyedJaggedTensor.from_lengths_sync(
            keys=self._features,
            values=torch.from_numpy(np.concatenate([v.astype(np.int64, copy=False) for v in values])),
            lengths=torch.from_numpy(np.concatenate(lengths)),
        )
        return Batch(
            dense_features=torch.from_numpy(padded(part.dense, 0.0).astype(np.float32, copy=False)),
            sparse_features=kjt,
            labels={k: torch.from_numpy(padded(v, 0.0).astype(np.float32, copy=False)) for k, v in part.labels.items()},
            weights=torch.from_numpy(weights),
            slices=None if part.slices is None else torch.from_numpy(padded(part.slices, 0).astype(np.int64)),
        )



