"""Frequency-adaptive learning rate (FALR): a per-row learning rate from online lookup counts.

Row ``i`` of a table trains at ``lr * f(count_i)``, where ``count_i`` is how many times
the row has been looked up in training so far (this batch included) and ``f`` is, with
``ref`` the table's largest count (Qiu et al. 2025, arXiv 2505.05605) or a fixed count:

- ``log``:   ``f(c) = log(1 + c) / log(1 + ref)``
- ``power``: ``f(c) = (c / ref) ** power``

both capped at 1 and raised to ``floor``. Rare rows, which memorise fastest, move slowly.

How it is exact on FBGEMM's fused in-backward optimizers: SGD, Adagrad and row-wise
Adagrad all update a touched row by ``-lr * u`` where ``u`` depends on the gradient and
the optimizer state but not on ``lr`` (the accumulators sum squared gradients only).
So a row's update at ``lr * s`` is ``s`` times its update at ``lr``. FALR keeps the
touched rows' values just before the fused update (a pre-hook on the TBE's backward
node) and right after it (a post-hook) sets ``w = w_before + s * (w_after - w_before)``.
The optimizer state is untouched and equals that of a per-row-LR optimizer. Scaling the
gradient instead would be exact for SGD only (Adagrad's accumulator would see it).

Counting happens in a forward hook on each TorchRec kernel module, whose input is
exactly this rank's local ids after the input all-to-all, in training forwards only
(frozen tables' lookups count too: the counts measure how often the data shows a row). Counters are ``int32`` per
local row, sharded like the table, and saved with the run (this object is a
``Stateful``: ``state_dict()`` holds one ``ShardedTensor`` per table).

Example::

    falr = FrequencyAdaptiveLR(dmp, FALRConfig("log", floor=0.05))
    pipeline = TrainPipelineSparseDist(dmp, optimizer, device)
    pipeline.progress(batches)            # counts, then scales each fused update
    dcp.save({"model": dmp.state_dict(), "falr": falr}, checkpoint_id=path)
"""

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed._shard.metadata import ShardMetadata
from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor, ShardedTensorMetadata
from torch.distributed._shard.sharded_tensor.metadata import TensorProperties
from torch.distributed.checkpoint.stateful import Stateful
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_multiepoch.optim.options import FALRConfig
from dlrm_multiepoch.optim.shards import TableShard, table_shards
from dlrm_multiepoch.part import TrainPart
from dlrm_multiepoch.saved_state import StateMismatch
from dlrm_multiepoch.tables import check_sharded, table_names

logger = logging.getLogger(__name__)

COUNT_DTYPE = torch.int32


@dataclass
class _KernelCounts:
    """Counters and id layout of one fused kernel (TBE) that holds FALR tables."""

    shards: List[TableShard]
    counts: torch.Tensor  # COUNT_DTYPE [sum of local rows of the TBE's tables]
    row_start: torch.Tensor  # int64 [tables]: first flat counter of each table
    feature_table: torch.Tensor  # int64 [features]: TBE table index of each input feature
    enabled: Optional[torch.Tensor]  # bool [tables]; None when FALR covers every table of the kernel
    table_max: torch.Tensor  # float64 [tables]: running max count of each local shard (exact to 2^53)
    global_max: bool  # the table maxima must be reduced over ranks (row-split tables)
    rows_view: Optional[torch.Tensor]  # [total rows, D] view of the weights when every table has width D
    fixed_ref: Optional[torch.Tensor]  # float64 [tables] filled with --falr_ref N; None: the running max
    hooks: List[Any] = field(default_factory=list)


def _untracked(t: torch.Tensor) -> torch.Tensor:
    """``t``'s memory under a version counter of its own. The TBE's autograd nodes save the
    weights; a later in-place write through a tracked view would fail their backward
    (the semi-sync pipeline runs the next forward before this backward). FBGEMM's own
    fused update writes untracked too."""
    return t.data


def _flat_weights(shards: List[TableShard]) -> Optional[torch.Tensor]:
    """One ``[rows, D]`` view over all the TBE's tables when they are laid out back to back
    with one width; None otherwise (FALR then works table by table)."""
    views = [_untracked(s.weight()) for s in shards]
    dims = {v.shape[1] for v in views}
    if len(dims) != 1:
        return None
    first = views[0]
    storage = first.untyped_storage()
    expected = first.storage_offset()
    for v in views:
        if v.untyped_storage().data_ptr() != storage.data_ptr() or v.storage_offset() != expected:
            return None
        expected += v.numel()
    if first.stride() != (first.shape[1], 1):
        return None
    total = sum(v.shape[0] for v in views)
    return torch.as_strided(first, (total, first.shape[1]), first.stride(), first.storage_offset())


def _wanted_tables(names: List[str], replicated: set, tables: Optional[Sequence[str]]) -> set:
    """The tables FALR covers: ``tables``, or every table with a fused optimizer."""
    if not names:
        raise ValueError("FrequencyAdaptiveLR: the model has no embedding tables")
    if tables is None:
        if replicated:
            logger.info("FALR leaves data-parallel tables %s at the plain learning rate", sorted(replicated))
        return set(names) - replicated
    unknown = sorted(set(tables) - set(names))
    if unknown:
        raise ValueError(f"--falr_tables: unknown table(s) {unknown}; tables: {names}")
    dense = sorted(set(tables) & replicated)
    if dense:
        raise ValueError(
            f"--falr_tables: {dense} are data-parallel (trained by a regular optimizer, not a fused one); "
            "FALR scales fused table updates only: leave them out or drop data_parallel from --sharding_types"
        )
    return set(tables)


def _check_supported(shards: List[TableShard], wanted: set) -> None:
    for s in shards:
        if s.name not in wanted:
            continue
        if getattr(s.tbe, "lxu_cache_weights", torch.empty(0)).numel():
            raise ValueError(
                f"FALR: table {s.name!r} uses a UVM-caching kernel, whose cached rows FALR cannot see; "
                "exclude it with --falr_tables or use the plain fused kernel"
            )
        if s.column_split:
            raise ValueError(
                f"FALR: table {s.name!r} is column-wise sharded, which FALR does not support (its counters would "
                "be duplicated per column shard); exclude it with --falr_tables or drop column_wise from "
                "--sharding_types"
            )


class FrequencyAdaptiveLR(TrainPart):
    """Per-row learning rate ``lr * f(count)`` on the fused tables of a sharded model.

    Its hooks do the work; as a :class:`~dlrm_multiepoch.part.TrainPart` it only saves
    its counters (``falr``) and describes itself.

    Args:
        model: a ``DistributedModelParallel`` model whose tables have fused in-backward
            SGD, Adagrad or row-wise Adagrad (FBGEMM ``EXACT_*``).
        config: the multiplier ``f``.
        tables: tables to apply it to; ``None`` = every table with a fused optimizer
            (data-parallel tables, trained by a regular optimizer, are left at the plain LR
            and logged). Naming a data-parallel or unknown table is an error.
        process_group: group over which row-split tables reduce their largest count
            (default: a new group of all ranks, made only when some table is row-split).

    Example::

        falr = FrequencyAdaptiveLR(dmp, FALRConfig("log"), tables=["t_user", "t_item"])
        print(falr.memory_bytes(), falr.counts("t_user"))
    """

    def __init__(
        self,
        model: nn.Module,
        config: FALRConfig,
        tables: Optional[Sequence[str]] = None,
        process_group: Optional[dist.ProcessGroup] = None,
    ) -> None:
        self.config = config
        self.model = model
        check_sharded(model, "FrequencyAdaptiveLR")
        shards = table_shards(model)
        wanted = _wanted_tables(table_names(model), {s.name for s in shards if not s.fused}, tables)
        _check_supported(shards, wanted)
        self.tables = sorted(wanted)
        self._kernels: List[_KernelCounts] = []
        kernels: Dict[int, List[TableShard]] = {}
        for s in shards:
            if s.fused:
                kernels.setdefault(id(s.kernel), []).append(s)
        for kernel_shards in kernels.values():
            if any(s.name in wanted for s in kernel_shards):
                self._kernels.append(self._make_counts(kernel_shards, wanted))
        self._shard_of: Dict[str, List[Tuple[_KernelCounts, int]]] = {}
        for k in self._kernels:
            for i, s in enumerate(k.shards):
                if s.name in wanted:
                    self._shard_of.setdefault(s.name, []).append((k, i))
        needs_group = any(k.global_max for k in self._kernels)
        self._pg: Optional[dist.ProcessGroup] = None
        if config.ref is None and dist.is_initialized() and dist.get_world_size() > 1:
            device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
            flag = torch.tensor([int(needs_group)], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank must join new_group
            if flag.item():
                self._check_row_split_over_all_ranks()
                self._pg = process_group or dist.new_group(backend=dist.get_backend())
        self.attach()

    def attach(self) -> None:
        """Install the hooks (done by the constructor; again after :meth:`remove`)."""
        for k in self._kernels:
            if not k.hooks:
                k.hooks.append(k.shards[0].kernel.register_forward_hook(self._make_hook(k)))

    def _make_counts(self, shards: List[TableShard], wanted: set) -> _KernelCounts:
        kernel = shards[0].kernel
        device = shards[0].weight().device
        rows = [s.local_rows for s in shards]
        row_start = torch.tensor([0] + rows[:-1], dtype=torch.int64).cumsum(0)
        return _KernelCounts(
            shards=shards,
            counts=torch.zeros(sum(rows), dtype=COUNT_DTYPE, device=device),
            row_start=row_start.to(device),
            feature_table=torch.tensor(kernel._feature_table_map, dtype=torch.int64, device=device),
            enabled=None if all(s.name in wanted for s in shards) else torch.tensor([s.name in wanted for s in shards], device=device),
            # float64: CPU's scatter_reduce amax is many times faster on floats than on ints.
            table_max=torch.zeros(len(shards), dtype=torch.float64, device=device),
            global_max=self.config.ref is None and any(s.row_split and s.name in wanted for s in shards),
            rows_view=_flat_weights(shards),
            fixed_ref=(
                None if self.config.ref is None
                else torch.full((len(shards),), float(self.config.ref), dtype=torch.float64, device=device)
            ),
        )

    def _check_row_split_over_all_ranks(self) -> None:
        world = dist.get_world_size()
        for k in self._kernels:
            for s in k.shards:
                if not s.row_split:
                    continue
                ranks = {m.placement.rank() for m in s.config.global_metadata.shards_metadata}
                if len(ranks) != world:
                    raise ValueError(
                        f"FALR with --falr_ref max: table {s.name!r} is row-split over ranks {sorted(ranks)} of "
                        f"{world} (table_row_wise or grid sharding); give a fixed count with --falr_ref N"
                    )

    # -- the hooks ---------------------------------------------------------------

    def _ids(self, k: _KernelCounts, features: KeyedJaggedTensor) -> torch.Tensor:
        """Per-value TBE table index and flat counter index, with no host sync on CUDA."""
        values = features.values()
        n_features = len(features.keys())
        if features.variable_stride_per_key():
            per_feature = torch.tensor(features.length_per_key(), device=values.device)
        else:
            per_feature = features.lengths().view(n_features, -1).sum(1)
        feature = torch.repeat_interleave(
            torch.arange(n_features, device=values.device), per_feature, output_size=values.numel()
        )
        table = k.feature_table[feature]
        return table, k.row_start[table] + values.long()

    def _make_hook(self, k: _KernelCounts) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: Any, output: torch.Tensor) -> None:
            if not (module.training and torch.is_grad_enabled() and output.grad_fn is not None):
                return  # evaluation: no update to scale, and lookups there are not training
            features = inputs[0]
            table, flat = self._ids(k, features)
            k.counts.index_add_(0, flat, torch.ones_like(flat, dtype=COUNT_DTYPE))
            counts = k.counts[flat].double()
            k.table_max.scatter_reduce_(0, table, counts, reduce="amax")
            if k.fixed_ref is not None:
                ref, work = k.fixed_ref, None
            else:
                ref = k.table_max.clone()
                work = dist.all_reduce(ref, op=dist.ReduceOp.MAX, group=self._pg, async_op=True) if k.global_max else None
            state: Dict[str, Any] = {}

            def before_update(grad_outputs: Any) -> None:
                if work is not None:
                    work.wait()
                scale = self.config.multiplier(counts, ref[table])
                if k.enabled is not None:
                    scale = torch.where(k.enabled[table], scale, torch.ones_like(scale))
                state["parts"] = parts = self._row_sets(k, table, flat, scale)
                state["before"] = [w.index_select(0, rows) for w, rows, _ in parts]

            def after_update(grad_inputs: Any, grad_outputs: Any) -> None:
                # Duplicate ids write identical values, so which write lands does not matter. lerp
                # with weight 1 returns the fused result exactly (tables FALR leaves alone).
                for (w, rows, scale), before in zip(state["parts"], state["before"]):
                    after = w.index_select(0, rows)
                    w.index_copy_(0, rows, torch.lerp(before, after, scale[:, None].expand_as(after)))

            output.grad_fn.register_prehook(before_update)
            output.grad_fn.register_hook(after_update)

        return hook

    @staticmethod
    def _row_sets(
        k: _KernelCounts, table: torch.Tensor, flat: torch.Tensor, scale: torch.Tensor
    ) -> List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """``(weights view, row ids, multipliers)`` covering this call's looked-up rows."""
        if k.rows_view is not None:
            return [(k.rows_view, flat, scale)]
        # Tables of different widths: one set per table (a host sync per table on CUDA).
        parts = []
        for t, s in enumerate(k.shards):
            mine = table == t
            parts.append((_untracked(s.weight()), flat[mine] - k.row_start[t], scale[mine]))
        return parts

    # -- inspection, state ----------------------------------------------------------

    def counts(self, table: str) -> torch.Tensor:
        """This rank's counters of ``table``: one ``[local_rows]`` tensor (empty if no local shard)."""
        if table not in self.tables:
            raise KeyError(f"FALR is not applied to table {table!r}; its tables: {self.tables}")
        parts = [k.counts[k.row_start[i] : k.row_start[i] + k.shards[i].local_rows] for k, i in self._shard_of.get(table, [])]
        return torch.cat(parts) if parts else torch.zeros(0, dtype=COUNT_DTYPE)

    def memory_bytes(self) -> int:
        """Bytes of counters on this rank."""
        return sum(k.counts.numel() * k.counts.element_size() for k in self._kernels)

    def state_dict(self) -> Dict[str, Any]:
        """``{table: ShardedTensor [num_embeddings] int32}``, sharded by rows like the table."""
        out: Dict[str, Any] = {}
        for k in self._kernels:
            for i, s in enumerate(k.shards):
                if s.name not in self.tables:
                    continue
                local = k.counts[k.row_start[i] : k.row_start[i] + s.local_rows]
                out[s.name] = _sharded_counts(s, local)
        return out

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restore every table's counters; StateMismatch names a table the state has none for (before loading any)."""
        mine = {s.name for k in self._kernels for s in k.shards if s.name in self.tables}  # this rank's shards
        missing = sorted(mine - set(state_dict))
        if missing:
            raise StateMismatch(
                f"frequency-adaptive LR: the saved state has no counters for table(s) {missing}; "
                f"it has {sorted(state_dict)}"
            )
        for k in self._kernels:
            for i, s in enumerate(k.shards):
                if s.name not in self.tables:
                    continue
                local = state_dict[s.name].local_shards()[0].tensor
                k.counts[k.row_start[i] : k.row_start[i] + s.local_rows].copy_(local)
                k.table_max[i] = float(local.max()) if local.numel() else 0.0

    def remove(self) -> None:
        """Detach the hooks: the tables train at the plain learning rate (counting stops)."""
        for k in self._kernels:
            for h in k.hooks:
                h.remove()
            k.hooks.clear()


    # -- as a part of the training loop ---------------------------------------------

    def checkpoint_parts(self) -> Dict[str, Stateful]:
        return {"falr": self}

    def describe(self, log: Callable[[str], None], record: Callable[[str, Any], None]) -> None:
        fraction = falr_memory_fraction(self, self.model)
        log(
            f"FALR {self.config} on {self.tables}: {self.memory_bytes():,} counter bytes on this "
            f"rank ({fraction:.1%} of the local shards of those tables)"
        )
        record("falr_memory", {"bytes_rank0": self.memory_bytes(), "fraction_rank0": fraction})


def _sharded_counts(shard: TableShard, local: torch.Tensor) -> ShardedTensor:
    """``local`` as this rank's piece of a row-sharded ``[num_embeddings]`` counter tensor."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    device = local.device
    metas = []
    for m in shard.config.global_metadata.shards_metadata:
        metas.append(ShardMetadata([m.shard_offsets[0]], [m.shard_sizes[0]], placement=str(m.placement)))
    mine = ShardMetadata([shard.row_offset], [shard.local_rows], placement=f"rank:{rank}/{device}")
    metadata = ShardedTensorMetadata(
        shards_metadata=metas,
        size=torch.Size([shard.config.num_embeddings]),
        tensor_properties=TensorProperties(dtype=local.dtype, layout=local.layout, requires_grad=False),
    )
    return ShardedTensor._init_from_local_shards_and_global_metadata(
        [Shard(local, mine)], sharded_tensor_metadata=metadata, process_group=None
    )


def falr_memory_fraction(falr: FrequencyAdaptiveLR, model: nn.Module) -> float:
    """Counter bytes over the bytes of the local shards of the tables FALR covers."""
    table_bytes = sum(
        s.weight().numel() * s.weight().element_size() for s in table_shards(model) if s.name in falr.tables
    )
    return falr.memory_bytes() / table_bytes if table_bytes else math.nan
