"""Id dropout: a seeded train-time batch transform that looks up a fraction of ids as
the unknown row.

Row 0 of every table of the app's datasets serves ids unseen in training (cold-start users
and items in the test split), but at ``--min_count 1`` no training id maps there, so it
keeps its random init. Dropping a fraction ``p`` of training ids to row 0 trains it on a
random sample of all rows, as dropout trains a network to work without some inputs. The
draw depends only on ``(seed, epoch, batch index, rank)``: a resumed run drops the same ids.

In your own loop, the row dropped ids go to must be a spare one (``unknown_id``, default 0):
if row 0 of a table is a real id, the dropped ids train that id's row instead. Give the
table a row no id uses and name it (``unknown_id={"user": 1000}``); with ``model=`` given,
a feature no table serves, or an ``unknown_id`` outside its table, is refused when built.
Any batch with a ``sparse_features`` KJT works (a dataclass, a ``NamedTuple`` or an object).

Example::

    dropout = IdDropout.for_tables(data.tables, {"t_user": 0.05, "t_item": 0.05}, seed=0, rank=rank)
    for i, batch in enumerate(loader):
        batch = dropout(batch, epoch=0, index=i)
"""

import copy
import dataclasses
import zlib
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import nn
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_multiepoch.data.dataset import UNKNOWN_ID, TableSpec
from dlrm_multiepoch.part import TrainPart


def with_sparse_features(batch: Any, features: KeyedJaggedTensor) -> Any:
    """A copy of ``batch`` with ``sparse_features`` replaced (a dataclass, a ``NamedTuple`` or any object)."""
    if dataclasses.is_dataclass(batch):
        return dataclasses.replace(batch, sparse_features=features)
    if hasattr(batch, "_replace"):  # a NamedTuple
        return batch._replace(sparse_features=features)
    out = copy.copy(batch)
    out.sparse_features = features
    return out


class IdDropout(TrainPart):
    """Replace each id of feature ``f`` by its table's unknown row with probability ``rates[f]``.

    As a :class:`~dlrm_multiepoch.part.TrainPart` it transforms each epoch's training batches.

    Args:
        rates: feature -> probability in ``[0, 1)``; features left out keep their ids.
        seed: base seed of the draws.
        rank: this process's rank (ranks draw independently).
        unknown_id: the row dropped ids look up: one for every feature, or feature -> row
            (features left out: 0). It must be a row no real id uses.
        model: the model (sharded or not); when given, every feature in ``rates`` must be
            served by one of its tables and every ``unknown_id`` lie inside that table.

    Example::

        IdDropout({"user": 0.1}, seed=0)(batch, epoch=1, index=17)
        IdDropout({"user": 0.1}, unknown_id={"user": 1000}, model=dmp)   # user's table has 1001 rows
    """

    def __init__(
        self,
        rates: Mapping[str, float],
        seed: int = 0,
        rank: int = 0,
        unknown_id: Union[int, Mapping[str, int]] = UNKNOWN_ID,
        model: Optional[nn.Module] = None,
    ) -> None:
        bad = {f: p for f, p in rates.items() if not 0.0 <= p < 1.0}
        if bad:
            raise ValueError(f"--id_dropout: rates must be in [0, 1), got {bad}")
        self.rates = {f: float(p) for f, p in rates.items() if p > 0}
        given = dict(unknown_id) if isinstance(unknown_id, Mapping) else {f: unknown_id for f in self.rates}
        self.unknown_ids = {f: int(given.get(f, UNKNOWN_ID)) for f in self.rates}
        if model is not None:
            _check_rows(self.unknown_ids, model)
        self.seed = seed
        self.rank = rank
        self._cache: Dict[tuple, Tuple[torch.Tensor, torch.Tensor]] = {}

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

    def _per_feature(self, keys: Sequence[str]) -> Tuple[torch.Tensor, torch.Tensor]:
        """Each feature's rate (float32, as the draws) and unknown row, in ``keys`` order."""
        key = tuple(keys)
        if key not in self._cache:
            rates = torch.tensor([self.rates.get(k, 0.0) for k in keys])
            self._cache[key] = (rates, torch.tensor([self.unknown_ids.get(k, UNKNOWN_ID) for k in keys]))
        return self._cache[key]

    def __call__(self, batch: Any, epoch: int, index: int) -> Any:
        """``batch`` with dropped ids replaced; lengths, offsets, weights and everything else unchanged."""
        kjt = batch.sparse_features
        values = kjt.values()
        per_feature = kjt.lengths().view(len(kjt.keys()), -1).sum(1).cpu()
        rates, rows = self._per_feature(kjt.keys())
        rate = torch.repeat_interleave(rates, per_feature, output_size=values.numel())
        row = torch.repeat_interleave(rows, per_feature, output_size=values.numel())
        gen = torch.Generator().manual_seed(zlib.crc32(f"{self.seed}/{epoch}/{index}/{self.rank}".encode()))
        drop = (torch.rand(values.numel(), generator=gen) < rate).to(values.device)
        dropped = KeyedJaggedTensor(
            keys=kjt.keys(),
            values=torch.where(drop, row.to(values.device, values.dtype), values),
            weights=kjt.weights_or_none(),
            lengths=kjt.lengths(),
            offsets=kjt.offsets(),
            stride=kjt.stride(),
        )
        return with_sparse_features(batch, dropped)

    def apply(self, batches: Iterator[Any], epoch: int, start: int = 0) -> Iterator[Any]:
        """Transform an epoch's batches; ``start`` is the index of the first (when resuming mid-epoch)."""
        for i, batch in enumerate(batches, start):
            yield self(batch, epoch, i)

    def epoch_batches(self, batches: Iterator[Any], epoch: int, start: int) -> Iterator[Any]:
        return self.apply(batches, epoch, start)


def _check_rows(unknown_ids: Mapping[str, int], model: nn.Module) -> None:
    """Every feature served by a table of ``model``, every unknown row inside its table; else one line naming both."""
    from dlrm_multiepoch.tables import embedding_modules  # torchrec's modules: only when a model is given

    rows = {f: t.num_embeddings for m in embedding_modules(model) for t in m.tables for f in t.feature_names}
    unserved = sorted(set(unknown_ids) - set(rows))
    if unserved:
        raise ValueError(f"IdDropout: no table of the model serves feature(s) {unserved}; features: {sorted(rows)}")
    for feature, row in sorted(unknown_ids.items()):
        if not 0 <= row < rows[feature]:
            raise ValueError(
                f"IdDropout: unknown_id {row} of feature {feature!r} is not a row of its table (rows 0..{rows[feature] - 1}): "
                f"give the table a spare row no id uses (num_embeddings={rows[feature] + 1}) and pass unknown_id="
                f"{{{feature!r}: {rows[feature]}}}"
            )
