"""Measure how stale a semi-synchronous lookup really is.

A batch looked up before the previous batch's backward reads every row that backward
updates one update late. The fraction of such rows is what the semi-sync trade-off
rests on ("consecutive batches share few IDs"), so it is measured on the real data:
for batch B, the rows B looks up on this rank's shards that batch B-1 also looked up
(and therefore updated), over all rows B looks up, summed over ranks.

Everything stays on the device: rows are sorted int64 keys and overlaps come from
``searchsorted``, so measuring adds no host synchronisation; the per-step counts are
summed over ranks with one asynchronous ``all_reduce`` that is waited a step later.
"""

from dataclasses import dataclass
from collections import deque
from typing import Any, Collection, Deque, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import nn
from torchrec.distributed.types import ShardingType
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_multiepoch.part import TrainPart, WindowLog
from dlrm_multiepoch.tables import describe

# Row ids of a table sit in the low bits of a key, the table's index above them.
_TABLE_SHIFT = 40


def _shardings(module: nn.Module) -> list:
    entry = describe(module)
    shardings = entry.shardings() if entry is not None else []
    if not shardings:
        raise TypeError(
            f"{type(module).__name__} is no sharded EmbeddingBagCollection / EmbeddingCollection / "
            "FeatureProcessedEmbeddingBagCollection; staleness is measured for those only"
        )
    return shardings


class ShardRows:
    """Turns the post-input-dist features of one sharded module into sorted row keys.

    After the input all-to-all a rank holds, per sharding, the ids of every rank's
    samples for the table shards it owns: exactly the rows its lookup reads and its
    fused optimizer updates. Keys are ``table_index << 40 | id`` (should a sharding
    hand over shard-local ids, that is still one key per row of the shard).

    Args:
        module: a sharded ``EmbeddingBagCollection`` / ``EmbeddingCollection`` / FP-EBC.
    """

    def __init__(self, module: nn.Module) -> None:
        self.tables: List[str] = []  # key >> 40 -> table name
        self._features: List[Optional[Dict[str, int]]] = []  # per sharding; None: data-parallel
        self._masks: Dict[Tuple[FrozenSet[str], torch.device], torch.Tensor] = {}
        self._table_indices: Dict[Tuple[Tuple[str, ...], torch.device], torch.Tensor] = {}
        for sharding_type, sharding in _shardings(module):
            if sharding_type == ShardingType.DATA_PARALLEL.value:
                # Replicated tables see only this rank's ids but are updated with every
                # rank's: their staleness is not measurable locally. They are left out.
                self._features.append(None)
                continue
            features: Dict[str, int] = {}
            for table in sharding.embedding_tables():
                if table.name not in self.tables:
                    self.tables.append(table.name)
                for feature in table.feature_names:
                    features[feature] = self.tables.index(table.name)
            self._features.append(features)

    def table_mask(self, names: Collection[str], device: torch.device) -> torch.Tensor:
        """Bool tensor over table indices: True for the tables in ``names``.

        Cached: the frozen set changes only at schedule boundaries, and building a
        device tensor from a Python list each step would sync the host on CUDA.
        """
        key = (frozenset(names), device)
        if key not in self._masks:
            self._masks[key] = torch.tensor([t in names for t in self.tables], dtype=torch.bool, device=device)
        return self._masks[key]

    def _table_index(self, features: Dict[str, int], keys: List[str], device: torch.device) -> torch.Tensor:
        key = (tuple(keys), device)
        if key not in self._table_indices:
            self._table_indices[key] = torch.tensor([features[k] for k in keys], dtype=torch.int64, device=device)
        return self._table_indices[key]

    def __call__(self, dist_input: List[KeyedJaggedTensor]) -> torch.Tensor:
        if len(dist_input) != len(self._features):
            raise ValueError(f"expected {len(self._features)} feature lists (one per sharding), got {len(dist_input)}")
        keys: List[torch.Tensor] = []
        for features, kjt in zip(self._features, dist_input):
            if features is None or not kjt.keys():
                continue
            missing = [k for k in kjt.keys() if k not in features]
            if missing:
                raise KeyError(f"features {missing} belong to no table of this sharding; tables map {sorted(features)}")
            values = kjt.values()
            table = self._table_index(features, kjt.keys(), values.device)
            if kjt.variable_stride_per_key():
                per_key = torch.tensor(kjt.length_per_key(), dtype=torch.int64, device=values.device)
            else:  # stays on the device: no host sync
                per_key = kjt.lengths().view(len(kjt.keys()), -1).sum(1).to(torch.int64)
            table_of_value = torch.repeat_interleave(table, per_key, output_size=values.numel())
            keys.append((table_of_value << _TABLE_SHIFT) | values.to(torch.int64))
        if not keys:
            device = dist_input[0].values().device if dist_input else None
            return torch.empty(0, dtype=torch.int64, device=device)
        return torch.sort(torch.cat(keys)).values


def row_overlap(keys: torch.Tensor, previous: torch.Tensor, skip_tables: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``[rows of keys also in previous, distinct rows of keys]`` as a float64 tensor.

    Both inputs are sorted (duplicates allowed). Rows of the tables marked in the
    bool tensor ``skip_tables`` (indexed by ``key >> 40``) never count as shared.
    No host synchronisation.

    Example::

        >>> row_overlap(torch.tensor([1, 1, 2, 5]), torch.tensor([0, 2, 2, 9]))
        tensor([1., 3.], dtype=torch.float64)
    """
    if keys.numel() == 0:
        return torch.zeros(2, dtype=torch.float64, device=keys.device)
    first = torch.ones_like(keys, dtype=torch.bool)
    first[1:] = keys[1:] != keys[:-1]
    if previous.numel() == 0:
        stale = torch.zeros((), dtype=torch.int64, device=keys.device)
    else:
        previous = previous.to(keys.device)
        at = torch.searchsorted(previous, keys).clamp_max(previous.numel() - 1)
        shared = first & (previous[at] == keys)
        if skip_tables is not None and skip_tables.numel():
            shared &= ~skip_tables.to(keys.device)[keys >> _TABLE_SHIFT]
        stale = shared.sum()
    return torch.stack([stale, first.sum()]).to(torch.float64)


def stale_row_counts(
    keys: Mapping[str, torch.Tensor],
    previous: Mapping[str, torch.Tensor],
    got_grad: Collection[str],
    shard_rows: Mapping[str, ShardRows],
    frozen: Collection[str],
    device: torch.device,
) -> torch.Tensor:
    """``[stale rows, rows]`` of one batch on this rank: of the rows it looked up (``keys``: module -> sorted row
    keys), those the batch before it also looked up (``previous``) and so updated; not the rows of ``frozen``
    tables, nor of modules whose lookup got no gradient in that batch's backward (``got_grad``: their tables
    did not move). Summed over modules; ``shard_rows``: each module's :class:`ShardRows`."""
    counts = torch.zeros(2, dtype=torch.float64, device=device)
    for name, module_keys in keys.items():
        rows = shard_rows[name]
        skip = rows.table_mask(frozen, module_keys.device)
        overlap = row_overlap(module_keys, previous.get(name, module_keys[:0]), skip)
        if name not in got_grad:
            overlap[0] = 0.0  # no gradient reached the lookup: its tables did not move
        counts += overlap.to(device)
    return counts


@dataclass
class PendingStaleness:
    """Counts of one batch whose sum over ranks may still be in flight."""

    counts: torch.Tensor  # [stale rows, looked-up rows], float64
    work: Optional[dist.Work] = None

    def fraction(self) -> torch.Tensor:
        if self.work is not None:
            self.work.wait()
            self.work = None
        return self.counts[0] / self.counts[1].clamp_min(1.0)


HISTORY_LIMIT = 100_000


class StalenessMeter:
    """Per-step stale-row fraction and its running mean over the steps recorded so far.

    A step whose lookup ran after the previous update (synchronous, warm-up, first
    batch of an epoch) records exactly 0. Reading ``last``/``mean`` is the only point
    that waits for the device.

    Args:
        process_group: group to sum counts over (default: the default group, when
            initialised; a single process otherwise).

    Example::

        meter = StalenessMeter()
        meter.record(meter.measure(torch.tensor([stale, looked_up], dtype=torch.float64)), device, step)
        writer.add_scalar("pipeline/stale_fraction", meter.last, step)
    """

    def __init__(self, process_group: Optional[dist.ProcessGroup] = None) -> None:
        self._group = process_group
        self._last: Optional[torch.Tensor] = None
        self._sum: Optional[torch.Tensor] = None
        # (step, fraction) not yet taken by take_history(); bounded so a caller that
        # never takes them cannot grow it without limit.
        self._history: Deque[Tuple[int, torch.Tensor]] = deque(maxlen=HISTORY_LIMIT)
        self.steps = 0

    def measure(self, counts: torch.Tensor) -> PendingStaleness:
        """Start summing this rank's ``[stale, looked-up]`` counts over ranks (asynchronously)."""
        counts = counts.clone()
        work = None
        if dist.is_available() and dist.is_initialized() and dist.get_world_size(self._group) > 1:
            work = dist.all_reduce(counts, group=self._group, async_op=True)
        return PendingStaleness(counts, work)

    def record(self, pending: Optional[PendingStaleness], device: torch.device, step: Optional[int] = None) -> None:
        """Record one step: ``pending`` counts, or ``None`` for an exact 0 (fresh lookup).

        Args:
            pending: the step's counts, or None.
            device: where an exact 0 is created.
            step: the step's number (default: the count of steps recorded before it).
        """
        fraction = (
            torch.zeros((), dtype=torch.float64, device=device) if pending is None else pending.fraction()
        )
        self._last = fraction
        self._sum = fraction.clone() if self._sum is None else self._sum + fraction
        self._history.append((self.steps if step is None else step, fraction))
        self.steps += 1

    def take_history(self) -> List[Tuple[int, float]]:
        """``(step, fraction)`` of the steps recorded since the last call, oldest first.

        One device synchronisation for all of them, so a training loop can log every
        recorded value at its logging interval instead of waiting on every step.
        """
        if not self._history:
            return []
        steps = [step for step, _ in self._history]
        values = torch.stack([fraction for _, fraction in self._history]).tolist()
        self._history.clear()
        return list(zip(steps, values))

    @property
    def last(self) -> float:
        """Stale-row fraction of the most recent step (NaN before any step is recorded)."""
        return float("nan") if self._last is None else float(self._last.item())

    @property
    def mean(self) -> float:
        """Mean of the per-step fractions over all recorded steps (NaN before any)."""
        return float("nan") if self._sum is None else float(self._sum.item()) / self.steps

    def reset(self) -> None:
        self._last = None
        self._sum = None
        self._history.clear()
        self.steps = 0


class StaleFractionLog(TrainPart):
    """Logs a semi-synchronous pipeline's stale-row fraction every window (a training-loop part).

    Per-step values are read once per logging window: reading each step would wait on that
    step's all-reduce (and on CUDA sync the host) in the hot path. Only the sampled steps
    (``staleness_interval``) have one; each is logged at the step count after it.

    Args:
        pipeline: anything with a ``staleness_meter`` and ``mean_stale_fraction``, e.g. a
            :class:`~dlrm_multiepoch.pipeline.SemiSyncTrainPipeline`.

    Example::

        parts = TrainParts([freeze, StaleFractionLog(pipeline)])
    """

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline

    def after_window(self, losses: Sequence[torch.Tensor], step: int, log: WindowLog) -> None:
        for sampled, fraction in self.pipeline.staleness_meter.take_history():
            log.scalars({"pipeline/stale_fraction": fraction}, sampled + 1)
        log.scalars({"pipeline/mean_stale_fraction": self.pipeline.mean_stale_fraction}, step)
