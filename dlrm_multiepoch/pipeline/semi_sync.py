"""A ``TrainPipelineSparseDist`` that starts batch B's embedding lookup before B-1's backward."""

from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Dict, Iterator, List, Optional, Set, Tuple, Type

import torch
from torch.autograd.profiler import record_function
from torchrec.distributed.train_pipeline.pipeline_context import EmbeddingTrainPipelineContext
from torchrec.distributed.train_pipeline.runtime_forwards import EmbeddingPipelinedForward
from torchrec.distributed.train_pipeline.train_pipelines import TrainPipelineSparseDist
from torchrec.distributed.types import ShardingType
from torchrec.sparse.jagged_tensor import JaggedTensor, KeyedTensor
from torchrec.streamable import Pipelineable

from dlrm_multiepoch.pipeline.staleness import PendingStaleness, ShardRows, StalenessMeter, row_overlap, table_names

@dataclass
class SemiSyncContext(EmbeddingTrainPipelineContext):
    """Per-batch state: TorchRec's embedding-pipeline context plus staleness bookkeeping.

    Attributes:
        row_keys: module name -> sorted row keys this batch looks up on this rank.
        got_grad: names of modules whose lookup output received a gradient in this
            batch's backward, i.e. whose tables this batch's backward updated.
        staleness: this batch's pending stale-row counts; ``None`` when its lookup ran
            after the previous batch's update (exactly 0 stale rows).
    """

    row_keys: Dict[str, torch.Tensor] = field(default_factory=dict)
    got_grad: Set[str] = field(default_factory=set)
    staleness: Optional[PendingStaleness] = None


def _output_tensors(out: Any) -> list:
    if isinstance(out, KeyedTensor):
        return [out.values()]
    if isinstance(out, dict):
        return [jt.values() for jt in out.values() if isinstance(jt, JaggedTensor)]
    return []


def data_parallel_tables(model: torch.nn.Module) -> List[str]:
    """``module.table`` names that ``DistributedModelParallel``'s plan made data-parallel."""
    plan = getattr(model, "plan", None)
    if plan is None:
        return []
    return sorted(
        f"{path}.{table}" if path else table
        for path, module_plan in plan.plan.items()
        for table, sharding in module_plan.items()
        if sharding.sharding_type == ShardingType.DATA_PARALLEL.value
    )


class PrefetchedLookupForward(EmbeddingPipelinedForward):
    """Replaces a sharded module's forward: returns the lookup the pipeline already started.

    Unlike TorchRec's ``EmbeddingPipelinedForward`` the embeddings stay attached to
    the graph, so one ``loss.backward()`` runs the output-dist backward and the fused
    table update as in ``TrainPipelineSparseDist``; and nothing here touches CUDA
    streams on CPU. A gradient hook marks the module in ``context.got_grad``: no
    gradient (a frozen table whose output was detached downstream) means no update.
    """

    def __call__(self, *input: Any, **kwargs: Any) -> Any:
        requests = self._context.embedding_a2a_requests
        if self._name not in requests:
            raise AssertionError(
                f"no prefetched lookup for {self._name!r} in batch {self._context.index}: the module was called "
                f"twice in one forward, or outside SemiSyncTrainPipeline.progress; available: {sorted(requests)}"
            )
        awaitable = requests.pop(self._name)
        context, name = self._context, self._name

        def watch(out: Any) -> Any:
            for tensor in _output_tensors(out):
                if tensor.requires_grad:
                    tensor.register_hook(lambda grad: context.got_grad.add(name))
            return out

        # Managed-collision modules return (embeddings, remapped ids).
        (awaitable[0] if isinstance(awaitable, tuple) else awaitable).callbacks.append(watch)
        return awaitable


class SemiSyncTrainPipeline(TrainPipelineSparseDist):
    """``TrainPipelineSparseDist`` with bounded staleness: lookups overlap the previous backward.

    Step for batch i (batches i+1 and i+2 are in flight)::

        forward(i)                      uses the lookup of i started one step earlier
        start lookup(i+1)               staleness=1: TBE lookup + async output all-to-all
        load batch i+3, input dist(i+2)
        backward(i), optimizer step     fused table update of i's rows
        [start lookup(i+1)]             staleness=0 / warm-up: lookup after the update

    With ``staleness=1`` batch i+1 reads the tables as they were before batch i's
    update (bounded staleness 1, like gradient accumulation of 2 for the tables), and
    its output all-to-all hides behind batch i's backward. Dense weights are always
    current. With ``staleness=0`` results are bitwise equal to
    ``TrainPipelineSparseDist``. On CPU/gloo "asynchronous" means the collectives run
    on gloo's threads while the main thread computes; on CUDA they run on NCCL's
    stream, the lookup itself on the current stream (ordered before the update).

    The stale-row fraction of every step is measured (:mod:`.staleness`) and exposed
    as :attr:`stale_fraction` and :attr:`mean_stale_fraction`. A step records 0 when
    the lookup ran after the update or when the previous batch's backward sent no
    gradient into the tables (e.g. all frozen by detaching their output); rows of the
    tables ``frozen_tables()`` names never count. At the end of a dataloader the
    pipeline drains (no batch dropped or repeated); the next epoch's first lookup is
    fresh. ``detach()``/``attach()`` only while drained.

    Args:
        model: ``DistributedModelParallel`` model; ``model(batch)`` returns ``(loss, output)``.
        optimizer: e.g. ``CombinedOptimizer`` of fused table + dense optimizers.
        device: compute device.
        execute_all_batches: must be True: in-flight batches always run.
        apply_jit: as in ``TrainPipelineSparseDist``.
        context_type: a subclass of :class:`SemiSyncContext`.
        pipeline_postproc: as in ``TrainPipelineSparseDist``.
        custom_model_fwd: as in ``TrainPipelineSparseDist``.
        dmp_collection_sync_interval_batches: as in ``TrainPipelineSparseDist``.
        enqueue_batch_after_forward: must be False (the next batch is fetched after
            the forward anyway).
        enable_inplace_copy_batch: as in ``TrainPipelineSparseDist``.
        free_features_storage_early: as in ``TrainPipelineSparseDist``.
        clear_data_dist_inputs: must be False.
        staleness: 0 (synchronous) or 1 (semi-synchronous).
        warmup_batches: the first this many training batches (counted since
            construction or ``reset()``, across epochs) look up fresh tables, unless
            every table is frozen.
        frozen_tables: optional hint from a freeze schedule, e.g.
            ``FreezeScheduleWrapper.frozen_tables``: the tables the current batch's
            backward leaves unchanged. Their rows never count as stale; with every
            table frozen, early lookups are exact and start even during warm-up.
        measure_staleness: measure the stale-row fraction (one small async
            all-reduce per semi-synchronous step). Without it, ``staleness=1``
            reports NaN; ``staleness=0`` always reports exactly 0.

    Example::

        pipeline = SemiSyncTrainPipeline(dmp, optimizer, device, staleness=1, warmup_batches=100)
        for epoch in range(2):
            it = iter(loader)
            while True:
                try:
                    out = pipeline.progress(it)
                except StopIteration:
                    break
                writer.add_scalar("pipeline/stale_fraction", pipeline.stale_fraction, step)
    """

    _pipelined_forward_type = PrefetchedLookupForward

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        execute_all_batches: bool = True,
        apply_jit: bool = False,
        context_type: Type[SemiSyncContext] = SemiSyncContext,
        pipeline_postproc: bool = False,
        custom_model_fwd: Optional[Callable[[Optional[Pipelineable]], Tuple[torch.Tensor, Any]]] = None,
        dmp_collection_sync_interval_batches: Optional[int] = 1,
        enqueue_batch_after_forward: bool = False,
        enable_inplace_copy_batch: bool = False,
        free_features_storage_early: bool = False,
        clear_data_dist_inputs: bool = False,
        *,
        staleness: int = 1,
        warmup_batches: int = 0,
        frozen_tables: Optional[Callable[[], Collection[str]]] = None,
        measure_staleness: bool = True,
    ) -> None:
        if staleness not in (0, 1):
            raise ValueError(f"staleness must be 0 (synchronous) or 1 (semi-synchronous), got {staleness!r}")
        if warmup_batches < 0:
            raise ValueError(f"warmup_batches must be >= 0, got {warmup_batches}")
        if not execute_all_batches:
            raise ValueError(
                "SemiSyncTrainPipeline needs execute_all_batches=True: it drains its in-flight batches (whose "
                "lookups have already run) at the end of a dataloader instead of dropping them"
            )
        if not (isinstance(context_type, type) and issubclass(context_type, SemiSyncContext)):
            raise ValueError(f"context_type must subclass SemiSyncContext, got {context_type!r}")
        if enqueue_batch_after_forward or clear_data_dist_inputs:
            raise ValueError(
                "SemiSyncTrainPipeline fixes its own schedule: enqueue_batch_after_forward and "
                "clear_data_dist_inputs must be False"
            )
        super().__init__(
            model=model,
            optimizer=optimizer,
            device=device,
            execute_all_batches=True,
            apply_jit=apply_jit,
            context_type=context_type,
            pipeline_postproc=pipeline_postproc,
            custom_model_fwd=custom_model_fwd,
            dmp_collection_sync_interval_batches=dmp_collection_sync_interval_batches,
            enable_inplace_copy_batch=enable_inplace_copy_batch,
            free_features_storage_early=free_features_storage_early,
        )
        replicated = data_parallel_tables(model) if staleness == 1 else []
        if replicated:
            raise ValueError(
                f"SemiSyncTrainPipeline(staleness=1) cannot train data-parallel tables "
                f"{replicated}: the dense optimizer updates their weights in place after the next "
                "batch's early lookup has saved them for its backward (autograd: 'modified by an inplace "
                "operation'). Shard them table_wise/column_wise (the app's default --sharding_types) or use "
                "staleness=0 (--pipeline sparse_dist)"
            )
        self.staleness = staleness
        self.warmup_batches = warmup_batches
        self._frozen_tables = frozen_tables
        self._train_steps = 0
        self.measure_staleness = measure_staleness
        self._measure = measure_staleness and staleness > 0
        self._shard_rows: Dict[str, ShardRows] = {}
        self.staleness_meter = StalenessMeter()

    # -- what the app logs ------------------------------------------------------

    @property
    def stale_fraction(self) -> float:
        """Fraction of the rows looked up for the last trained batch that the batch before it updated.

        Rows are (table shard, row) pairs summed over ranks, padding ids included;
        data-parallel tables are left out. NaN when not measured.
        """
        return self.staleness_meter.last

    @property
    def mean_stale_fraction(self) -> float:
        """Mean of :attr:`stale_fraction` over all steps so far."""
        return self.staleness_meter.mean

    # -- pipeline stages ----------------------------------------------------------

    def fill_pipeline(self, dataloader_iter: Iterator[Pipelineable]) -> None:
        """From empty: batch 0 through input dist and lookup, batch 1 through input dist, batch 2 loaded."""
        if self.batches:
            return
        if not self.enqueue_batch(dataloader_iter):
            return
        self._init_pipelined_modules(self.batches[0], self.contexts[0], self._pipelined_forward_type)
        self.wait_sparse_data_dist(self.contexts[0])
        self.start_embedding_lookup(self.batches[0], self.contexts[0])
        if not self.enqueue_batch(dataloader_iter):
            return
        self.start_sparse_data_dist(self.batches[1], self.contexts[1])
        self.wait_sparse_data_dist(self.contexts[1])
        self.enqueue_batch(dataloader_iter)

    def start_embedding_lookup(self, batch: Optional[Pipelineable], context: SemiSyncContext) -> None:
        """Finish ``batch``'s input dist, run its lookup and start its output dist (not waited)."""
        if batch is None:
            return
        with record_function(f"## start_embedding_lookup {context.index} ##"):
            on_streams = self._data_dist_stream is not None
            current = torch.get_device_module(self._device).current_stream() if on_streams else None
            for module in self._pipelined_modules:
                name = module.forward.name
                with self._stream_context(self._data_dist_stream):
                    dist_input = context.input_dist_tensors_requests.pop(name).wait()
                module_context = context.module_contexts.pop(name)
                if on_streams:
                    # Input dist ran on the data-dist stream; the lookup runs on the
                    # current one, ordered before the next table update.
                    current.wait_stream(self._data_dist_stream)
                    dist_input.record_stream(current)
                    module_context.record_stream(current)
                if self._measure:
                    if name not in self._shard_rows:
                        self._shard_rows[name] = ShardRows(module)
                    context.row_keys[name] = self._shard_rows[name](dist_input)
                context.embedding_a2a_requests[name] = module.compute_and_output_dist(module_context, dist_input)

    @property
    def train_steps(self) -> int:
        """Training batches run since construction or :meth:`reset` (the warm-up counts these)."""
        return self._train_steps

    @train_steps.setter
    def train_steps(self, steps: int) -> None:
        # A resumed job sets the count it had reached, so its warm-up ends where the
        # uninterrupted job's would have.
        self._train_steps = steps

    def _frozen(self) -> Set[str]:
        return set(self._frozen_tables()) if self._frozen_tables is not None else set()

    def _lookup_before_backward(self) -> bool:
        """Whether the next batch's lookup may read the tables before the current batch's update."""
        if self.staleness == 0 or not self.batches or not self._model.training:
            return False
        if self._train_steps + 1 >= self.warmup_batches:  # the next batch is training batch _train_steps + 1
            return True
        if self._frozen_tables is None:
            return False
        all_tables = set().union(*(table_names(m) for m in self._pipelined_modules))
        return bool(all_tables) and all_tables <= self._frozen()

    def progress(self, dataloader_iter: Iterator[Pipelineable]) -> Any:
        if not self._model_attached:
            self.attach(self._model)
        self.fill_pipeline(dataloader_iter)
        if not self.batches:
            raise StopIteration

        self._set_module_context(self.contexts[0])
        if self._model.training:
            with record_function("## zero_grad ##"):
                self._optimizer.zero_grad()
        self._wait_for_batch()
        if len(self.batches) >= 3:
            self.start_sparse_data_dist(self.batches[2], self.contexts[2])

        batch, context = self.batches[0], self.contexts[0]
        with record_function(f"## forward {context.index} ##"):
            losses, output = self._model_fwd(batch)
        del batch
        self.dequeue_batch()

        early = self._lookup_before_backward()
        if early:
            self.start_embedding_lookup(self.batches[0], self.contexts[0])
        # Load batch i+3 while the lookup's output dist is in flight.
        self.enqueue_batch(dataloader_iter)
        if len(self.batches) >= 2:
            self.wait_sparse_data_dist(self.contexts[1])

        if self._model.training:
            with record_function(f"## backward {context.index} ##"):
                torch.sum(losses, dim=0).backward()
            self.sync_embeddings(self._model, self._dmp_collection_sync_interval_batches, context)
            with record_function(f"## optimizer {context.index} ##"):
                self._optimizer.step()

        if self.batches:
            if early:
                if self._measure:
                    self.contexts[0].staleness = self._measure_staleness(context, self.contexts[0])
            else:
                self.start_embedding_lookup(self.batches[0], self.contexts[0])
        if self._model.training:
            self._train_steps += 1
            if self._measure or self.staleness == 0:
                self.staleness_meter.record(context.staleness, self._device)
        return output

    def _measure_staleness(self, previous: SemiSyncContext, current: SemiSyncContext) -> PendingStaleness:
        """Rows ``current`` looked up (before ``previous``'s update) that ``previous`` updated."""
        frozen = self._frozen()
        counts = torch.zeros(2, dtype=torch.float64, device=self._device)
        for name, keys in current.row_keys.items():
            rows = self._shard_rows[name]
            overlap = row_overlap(keys, previous.row_keys.get(name, keys[:0]), rows.table_mask(frozen, keys.device))
            if name not in previous.got_grad:
                overlap[0] = 0.0  # no gradient reached the lookup: its tables did not move
            counts += overlap.to(self._device)
        return self.staleness_meter.measure(counts)

    def attach(self, model: Optional[torch.nn.Module] = None, sparse_dist: bool = True) -> None:
        if self.batches:
            # The parent would restart the input dist of a batch whose lookup already ran.
            raise RuntimeError(
                "SemiSyncTrainPipeline.attach() with batches in flight: detach/attach only after progress() "
                "has raised StopIteration (the pipeline is drained)"
            )
        super().attach(model, sparse_dist)

    def reset(self) -> None:
        super().reset()
        self._train_steps = 0
        self.staleness_meter.reset()
