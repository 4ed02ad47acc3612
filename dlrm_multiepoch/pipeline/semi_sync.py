"""A ``TrainPipelineSparseDist`` that starts batch B's embedding lookup before B-1's backward."""

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Dict, Iterator, List, Optional, Set, Tuple, Type

import torch
import torch.distributed as dist
from torch.autograd.profiler import record_function
from torchrec.distributed.train_pipeline.pipeline_context import EmbeddingTrainPipelineContext
from torchrec.distributed.train_pipeline.train_pipelines import TrainPipelineSparseDist
from torchrec.streamable import Pipelineable

from dlrm_multiepoch.pipeline.prefetch import PrefetchedLookupForward, late_lookup_reason, overlap_line
from dlrm_multiepoch.pipeline.staleness import PendingStaleness, ShardRows, StalenessMeter, stale_row_counts
from dlrm_multiepoch.tables import describe

logger = logging.getLogger(__name__)

# Measure the stale-row fraction on one training step in this many: the work is done for 2
# batches in 20 instead of every batch (docs/BENCHMARKS.md, "Cost of measuring staleness").
STALENESS_INTERVAL = 20


@dataclass
class SemiSyncContext(EmbeddingTrainPipelineContext):
    """Per-batch state: TorchRec's embedding-pipeline context plus staleness bookkeeping.

    Attributes:
        row_keys: module name -> sorted row keys this batch looks up on this rank
            (only for batches whose staleness is sampled, and their predecessors).
        got_grad: names of modules whose lookup output received a gradient in this
            batch's backward, i.e. whose tables this batch's backward updated.
        staleness: this batch's pending stale-row counts; ``None`` when its lookup ran
            after the previous batch's update (exactly 0 stale rows).
    """

    row_keys: Dict[str, torch.Tensor] = field(default_factory=dict)
    got_grad: Set[str] = field(default_factory=set)
    staleness: Optional[PendingStaleness] = None


class SemiSyncTrainPipeline(TrainPipelineSparseDist):
    """``TrainPipelineSparseDist`` with bounded staleness: lookups overlap the previous backward.

    Step for batch i (batches i+1 and i+2 are in flight)::

        [start lookup(i)]               staleness=0 / warm-up / late modules: after i-1's update
        forward(i)                      uses the lookup of i started one step earlier
        start lookup(i+1)               staleness=1: TBE lookup + async output all-to-all
        load batch i+3, input dist(i+2)
        backward(i), optimizer step     fused table update of i's rows

    With ``staleness=1`` batch i+1 reads the tables as they were before batch i's
    update (bounded staleness 1, like gradient accumulation of 2 for the tables), and
    its output all-to-all hides behind batch i's backward. Dense weights are always
    current. With ``staleness=0`` results are bitwise equal to
    ``TrainPipelineSparseDist``. On CPU/gloo "asynchronous" means the collectives run
    on gloo's threads while the main thread computes; on CUDA they run on NCCL's
    stream, the lookup itself on the current stream (ordered before the update).

    Modules whose lookup uses weights the dense optimizer updates in place
    (data-parallel or dense-kernel tables, an FP-EBC's feature processors) and
    managed-collision modules (whose lookup may evict rows) look up after the update,
    as in ``TrainPipelineSparseDist``; the others overlap. Which modules overlap and
    which do not (and why) is logged once, at INFO on logger ``dlrm_multiepoch`` (the
    ones that do not also as a warning).

    The stale-row fraction is measured (:mod:`.staleness`) on one training step in
    ``staleness_interval``, steps 1, 1 + N, 1 + 2N, ... (step 0 is always fresh; every step
    with ``staleness_interval=1``), and exposed as
    :attr:`stale_fraction` and :attr:`mean_stale_fraction`. A step records 0 when
    the lookup ran after the update or when the previous batch's backward sent no
    gradient into the tables (e.g. all frozen by detaching their output); rows of the
    tables ``frozen_tables()`` names never count. At the end of a dataloader the
    pipeline drains (no batch dropped or repeated); the next epoch's first lookup is
    fresh. ``detach()``/``attach()`` work as in TorchRec's pipeline at any point: only
    deliberately stale lookups are ever in flight between ``progress()`` calls.

    Args:
        model: ``DistributedModelParallel`` model; ``model(batch)`` returns ``(loss, output)``.
        optimizer: e.g. ``CombinedOptimizer`` of fused table + dense optimizers.
        device: compute device.
        execute_all_batches: must be True: in-flight batches always run.
        context_type: a subclass of :class:`SemiSyncContext`.
        apply_jit, pipeline_postproc, custom_model_fwd, dmp_collection_sync_interval_batches,
            enable_inplace_copy_batch, free_features_storage_early: as in ``TrainPipelineSparseDist``.
        enqueue_batch_after_forward: must be False (the next batch is fetched after
            the forward anyway).
        clear_data_dist_inputs: must be False.
        staleness: 0 (synchronous) or 1 (semi-synchronous).
        warmup_batches: the first this many training batches (counted since
            construction or ``reset()``, across epochs, or by ``step_count``) look up
            fresh tables, unless every table is frozen.
        frozen_tables: optional hint from a freeze schedule, e.g.
            ``FreezeScheduleWrapper.frozen_tables``: the tables the current batch's
            backward leaves unchanged. Their rows never count as stale; with every
            table frozen, early lookups are exact and start even during warm-up. A wrapper
            built before ``DistributedModelParallel`` sharded the model is refused here.
        measure_staleness: measure the stale-row fraction (row keys of two batches
            and one small async all-reduce per sampled step). Without it,
            ``staleness=1`` reports NaN; ``staleness=0`` always reports exactly 0.
        staleness_interval: measure on one training step in this many, from step 1
            (1: every step, exact per-step values).
        step_count: the training steps done so far, read from your loop's own counter
            (e.g. ``lambda: progress.step``), so a resumed run's warm-up and sampled
            steps continue where they were; default: counted by the pipeline since
            construction or ``reset()``.

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
        staleness_interval: int = STALENESS_INTERVAL,
        step_count: Optional[Callable[[], int]] = None,
    ) -> None:
        if staleness_interval < 1:
            raise ValueError(f"staleness_interval must be >= 1, got {staleness_interval}")
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
        self.staleness = staleness
        self.warmup_batches = warmup_batches
        self._frozen_tables = frozen_tables
        self._train_steps = 0
        self._step_count = step_count
        self.measure_staleness = measure_staleness
        self._measure = measure_staleness and staleness > 0
        self.staleness_interval = staleness_interval
        self._shard_rows: Dict[str, ShardRows] = {}
        self.staleness_meter = StalenessMeter()
        # Set when the model is pipelined: modules whose lookups may run before the update.
        self._early: List[torch.nn.Module] = []
        self._late: List[torch.nn.Module] = []
        self._early_tables: Set[str] = set()
        self._reported: Set[str] = set()
        self._overlap: Tuple[int, List[str], List[str]] = (-1, [], [])
        # A freeze schedule built before DistributedModelParallel lost its hooks to the sharding: say so now.
        check_bound = getattr(getattr(frozen_tables, "__self__", None), "check_bound", None)
        if callable(check_bound):
            check_bound()

    # -- what the app logs ------------------------------------------------------

    @property
    def stale_fraction(self) -> float:
        """Fraction of the rows looked up for the last sampled batch that the batch before it updated.

        Rows are (table shard, row) pairs of the overlapping modules summed over ranks,
        padding ids included; data-parallel tables are left out. NaN when not measured (also
        before the first sampled step, step 1).
        """
        return self.staleness_meter.last

    @property
    def mean_stale_fraction(self) -> float:
        """Mean of :attr:`stale_fraction` over all sampled steps so far."""
        return self.staleness_meter.mean

    # -- pipeline stages ----------------------------------------------------------

    def _pipeline_model(self, batch: Any, context: Any, pipelined_forward: Type[Any] = PrefetchedLookupForward) -> None:
        super()._pipeline_model(batch, context, pipelined_forward)
        self._early, self._late = [], []
        main = not dist.is_initialized() or dist.get_rank() == 0
        for module in self._pipelined_modules:
            reason = late_lookup_reason(module) if self.staleness else None
            (self._late if reason else self._early).append(module)
            name = module.forward.name
            if reason and name not in self._reported and main:
                logger.warning("SemiSyncTrainPipeline: %r looks up after each update (no overlap): %s", name, reason)
            self._reported.add(name)
        self._early_tables = {t for m in self._early for t in describe(m).table_names}
        overlap = (self.staleness, sorted(m.forward.name for m in self._early), sorted(m.forward.name for m in self._late))
        if overlap != self._overlap and main:  # said once, and again only if it changes
            logger.info("SemiSyncTrainPipeline: %s", overlap_line(*overlap))
        self._overlap = overlap

    def fill_pipeline(self, dataloader_iter: Iterator[Pipelineable]) -> None:
        """From empty: batches 0 and 1 through input dist, batch 2 loaded."""
        if self.batches:
            return
        if not self.enqueue_batch(dataloader_iter):
            return
        self._init_pipelined_modules(self.batches[0], self.contexts[0], self._pipelined_forward_type)
        self.wait_sparse_data_dist(self.contexts[0])
        if not self.enqueue_batch(dataloader_iter):
            return
        self.start_sparse_data_dist(self.batches[1], self.contexts[1])
        self.wait_sparse_data_dist(self.contexts[1])
        self.enqueue_batch(dataloader_iter)

    def _sampled(self, step: int) -> bool:
        # Steps 1, 1 + N, 1 + 2N, ...: step 0 is always fresh (nothing trained before it), so a run of a few
        # steps still measures one that can be stale.
        return step % self.staleness_interval == 1 % self.staleness_interval

    def start_embedding_lookup(
        self,
        batch: Optional[Pipelineable],
        context: SemiSyncContext,
        modules: Optional[List[torch.nn.Module]] = None,
        step: int = 0,
    ) -> None:
        """Finish ``batch``'s input dist, run its lookup and start its output dist (not waited).

        Args:
            batch: the batch (None: nothing to do).
            context: its context.
            modules: the pipelined modules to look up (default: all).
            step: the training step the batch will be (decides whether its row keys are kept).
        """
        if batch is None:
            return
        keys_needed = self._measure and (self._sampled(step) or self._sampled(step + 1))
        with record_function(f"## start_embedding_lookup {context.index} ##"):
            on_streams = self._data_dist_stream is not None
            current = torch.get_device_module(self._device).current_stream() if on_streams else None
            for module in self._pipelined_modules if modules is None else modules:
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
                if keys_needed and any(module is m for m in self._early):
                    if name not in self._shard_rows:
                        self._shard_rows[name] = ShardRows(module)
                    context.row_keys[name] = self._shard_rows[name](dist_input)
                context.embedding_a2a_requests[name] = module.compute_and_output_dist(module_context, dist_input)

    @property
    def train_steps(self) -> int:
        """Training batches run (the warm-up counts these): ``step_count()``, or since construction or :meth:`reset`."""
        return self._step_count() if self._step_count is not None else self._train_steps

    def _frozen(self) -> Set[str]:
        return set(self._frozen_tables()) if self._frozen_tables is not None else set()

    def _lookup_before_backward(self) -> bool:
        """Whether the next batch's overlapping lookups may read the tables before the current batch's update."""
        if self.staleness == 0 or not self._early or not self.batches or not self._model.training:
            return False
        if self.train_steps + 1 >= self.warmup_batches:  # the next batch is training batch train_steps + 1
            return True
        # In warm-up only when every overlapping table is frozen (its lookup is then exact).
        return self._frozen_tables is not None and bool(self._early_tables) and self._early_tables <= self._frozen()

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
        step = self.train_steps
        next_step = step + 1
        # Lookups not started early start now, after the previous update (as in TrainPipelineSparseDist):
        # between progress() calls only deliberately stale lookups are in flight.
        pending = [m for m in self._pipelined_modules if m.forward.name not in context.embedding_a2a_requests]
        self.start_embedding_lookup(batch, context, pending, step=step)
        with record_function(f"## forward {context.index} ##"):
            losses, output = self._model_fwd(batch)
        del batch
        self.dequeue_batch()

        early = self._lookup_before_backward()
        if early:
            self.start_embedding_lookup(self.batches[0], self.contexts[0], self._early, step=next_step)
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

        if early and self._measure and self._sampled(next_step):
            self.contexts[0].staleness = self._measure_staleness(context, self.contexts[0])
        if self._model.training:
            self._train_steps += 1
            if (self._measure or self.staleness == 0) and self._sampled(step):
                self.staleness_meter.record(context.staleness, self._device, step)
        return output

    def _measure_staleness(self, previous: SemiSyncContext, current: SemiSyncContext) -> PendingStaleness:
        """Rows ``current`` looked up (before ``previous``'s update) that ``previous`` updated."""
        counts = stale_row_counts(
            current.row_keys, previous.row_keys, previous.got_grad, self._shard_rows, self._frozen(), self._device
        )
        return self.staleness_meter.measure(counts)

    def _drain(self) -> None:
        """Wait for every collective in flight (lookups, input dists) and drop its result."""
        for context in self.contexts:
            for awaitable in context.embedding_a2a_requests.values():
                for a in awaitable if isinstance(awaitable, tuple) else (awaitable,):
                    a.wait()
            for request in context.input_dist_tensors_requests.values():
                request.wait()
            for _, awaitable in context.fused_splits_awaitables:
                awaitable.wait()

    def detach(self) -> torch.nn.Module:
        """Give the model its own forwards back; in-flight batches stay queued (as in TorchRec).

        Only deliberately stale lookups (``staleness=1``) are in flight between
        ``progress()`` calls; ``attach()`` (or the next ``progress()``) resumes with them.
        """
        for module in self._pipelined_modules:
            # TorchRec leaves it set, and a row-wise FP-EBC then skips its input preprocessing.
            module.is_pipelined = False
        return super().detach()

    def attach(self, model: Optional[torch.nn.Module] = None, sparse_dist: bool = True) -> None:
        """Pipeline the model again; queued batches keep their input dists (never run twice)."""
        super().attach(model, sparse_dist=False)

    def reset(self) -> None:
        self._drain()
        super().reset()
        self._train_steps = 0
        self.staleness_meter.reset()
