"""Id dropout: a seeded train-time batch transform that looks up a fraction of ids as
the unknown row.

Row 0 of every table serves ids unseen in training (cold-start users and items in the
test split), but at ``--min_count 1`` no training id maps there, so it keeps its random
init. Dropping a fraction ``p`` of training ids to row 0 trains it on a random sample of
all rows, as dropout trains a network to work without some inputs. The draw depends only
on ``(seed, epoch, batch index, rank)``: a resumed run drops the same ids.

Example::

    dropout = IdDropout.for_tables(data.tables, {"t_user": 0.05, "t_item": 0.05}, seed=0, rank=rank)
    for i, batch in enumerate(loader):
        batch = dropout(batch, epoch=0, index=i)
"""

import zlib
from dataclasses import replace
from typing import Dict, Iterator, Mapping, Sequence

import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.dataset import UNKNOWN_ID, TableSpec
from dlrm_multiepoch.part import TrainPart


class IdDropout(TrainPart):
    """Replace each id of feature ``f`` by :data:`UNKNOWN_ID` with probability ``rates[f]``.

    As a :class:`~dlrm_multiepoch.part.TrainPart` it transforms each epoch's training batches.

    Args:
        rates: feature -> probability in ``[0, 1)``; features left out keep their ids.
        seed: base seed of the draws.
        rank: this process's rank (ranks draw independently).

    Example::

        IdDropout({"user": 0.1}, seed=0)(batch, epoch=1, index=17)
    """

    def __init__(self, rates: Mapping[str, float], seed: int = 0, rank: int = 0) -> None:
        bad = {f: p for f, p in rates.items() if not 0.0 <= p < 1.0}
        if bad:
            raise ValueError(f"--id_dropout: rates must be in [0, 1), got {bad}")
        self.rates = {f: float(p) for f, p in rates.items() if p > 0}
        self.seed = seed
        self.rank = rank
        self._cache: Dict[tuple, torch.Tensor] = {}

    @staticmethod
    def for_tables(tables: Sequence[TableSpec], rates: Mapping[str, float], seed: int = 0, rank: int = 0) -> "IdDropout":
        """Rates per table (``t_user``), applied to every feature the table serves."""
        known = {t.name for t in tables}
        unknown = sorted(set(rates) - known)
        if unknown:
            raise ValueError(f"--id_dropout: unknown table(s) {unknown}; tables: {sorted(known)}")
        return IdDropout({f: rates[t.name] for t in tables if t.name in rates for f in t.feature_names}, seed, rank)

    def __bool__(self) -> bool:
        return bool(self.rates)

    def _feature_rates(self, keys: Sequence[str]) -> torch.Tensor:
        key = tuple(keys)
        if key not in self._cache:
            self._cache[key] = torch.tensor([self.rates.get(k, 0.0) for k in keys])
        return self._cache[key]

    def __call__(self, batch: Batch, epoch: int, index: int) -> Batch:
        """``batch`` with dropped ids replaced; lengths, offsets and everything else unchanged."""
        kjt = batch.sparse_features
        values = kjt.values()
        per_feature = kjt.lengths().view(len(kjt.keys()), -1).sum(1).cpu()
        rate = torch.repeat_interleave(self._feature_rates(kjt.keys()), per_feature, output_size=values.numel())
        gen = torch.Generator().manual_seed(zlib.crc32(f"{self.seed}/{epoch}/{index}/{self.rank}".encode()))
        drop = (torch.rand(values.numel(), generator=gen) < rate).to(values.device)
        dropped = KeyedJaggedTensor(
            keys=kjt.keys(),
            values=torch.where(drop, torch.full_like(values, UNKNOWN_ID), values),
            lengths=kjt.lengths(),
            offsets=kjt.offsets(),
            stride=kjt.stride(),
        )
        return replace(batch, sparse_features=dropped)

    def apply(self, batches: Iterator[Batch], epoch: int, start: int = 0) -> Iterator[Batch]:
        """Transform an epoch's batches; ``start`` is the index of the first (when resuming mid-epoch)."""
        for i, batch in enumerate(batches, start):
            yield self(batch, epoch, i)

    def epoch_batches(self, batches: Iterator[Batch], epoch: int, start: int) -> Iterator[Batch]:
        return self.apply(batches, epoch, start)
