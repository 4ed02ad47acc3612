"""Your own TorchRec loop with dlrm-multiepoch's parts, end to end: shard, train, validate, save, resume.

The model and the data are the user's own (``deepfm.py``: a DeepFM-style model over
TorchRec's ``Batch``); this file adds the parts, and the two loops below are the docs' two
drop-in blocks verbatim, each marked with the page that shows it (``tests/test_example_deepfm.py``
fails if they differ):

- ``--loop freeze``: the freeze schedule and the semi-synchronous pipeline (README.md's block);
- ``--loop parts``: the remedies, the automatic schedule and validation over the same
  parts the app's ``Trainer`` runs (docs/DROPIN.md's block).

Both save a checkpoint after every epoch with one ``dcp.save`` and resume from one with
one ``dcp.load`` of the same dict (``--resume_from``); the parts loop prints each
evaluation, the freeze loop the validation metrics it ends with. Run it on 2 CPU ranks::

    torchrun --nproc_per_node 2 examples/deepfm/train_deepfm.py --loop parts --checkpoint_dir /tmp/deepfm
    torchrun --nproc_per_node 2 examples/deepfm/train_deepfm.py --loop parts --checkpoint_dir /tmp/deepfm \\
        --resume_from /tmp/deepfm/epoch_0          # after a stop in epoch 2: bitwise as if it had not stopped
"""

import argparse
import logging
import os
import warnings
from typing import Any, Dict, Optional, Sequence

import torch
import torch.distributed as dist
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from torch import nn
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.embedding import EmbeddingCollectionSharder
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.model_parallel import DefaultDataParallelWrapper
from torchrec.distributed.sharding_plan import construct_module_sharding_plan, row_wise, table_wise
from torchrec.distributed.types import ShardingPlan
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
from torchrec.optim.optimizers import in_backward_optimizer_filter

from deepfm import POOLED, SEQUENCE, DeepFM, Loader, splits

TASKS = ["click"]  # DeepFM predicts one label


def shard(model: DeepFM, world_size: int, device: torch.device) -> DistributedModelParallel:
    """An explicit plan: ``user`` and ``history`` on the first rank only, ``category`` on the last, ``item`` row-wise.

    The tables train with FBGEMM's fused row-wise Adagrad (the sharders' ``fused_params``).
    Gradient accumulation skips DDP's all-reduce between micro-batches, which DDP's static
    graph (TorchRec's default) cannot: hence ``static_graph=False``.
    """
    fused = {"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": 0.05}
    ebc, ec = EmbeddingBagCollectionSharder(fused_params=fused), EmbeddingCollectionSharder(fused_params=fused)
    kernel = "fused"  # an explicit plan without a kernel gets the dense one, trained by the dense optimizer
    where = {"user": table_wise(rank=0, compute_kernel=kernel), "item": row_wise(compute_kernel=kernel)}
    where["category"] = table_wise(rank=world_size - 1, compute_kernel=kernel)
    sizes = dict(local_size=world_size, world_size=world_size, device_type=device.type)
    plan = ShardingPlan(
        {
            "ebc": construct_module_sharding_plan(model.ebc, where, sharder=ebc, **sizes),
            "ec": construct_module_sharding_plan(model.ec, {"history": table_wise(rank=0, compute_kernel=kernel)}, sharder=ec, **sizes),
        }
    )  # fmt: skip
    wrapper = DefaultDataParallelWrapper(static_graph=False)
    return DistributedModelParallel(model, device=device, plan=plan, sharders=[ebc, ec], data_parallel_wrapper=wrapper)


def build(rank: int, world_size: int, device: torch.device, seed: int = 0):
    """The sharded model and its dense optimizer (Adam over everything the fused optimizer does not train)."""
    torch.manual_seed(seed)
    model = shard(DeepFM(POOLED, SEQUENCE), world_size, device)
    params = dict(in_backward_optimizer_filter(model.named_parameters()))
    return model, KeyedOptimizerWrapper(params, lambda p: torch.optim.Adam(p, lr=1e-2))


def freeze_loop(
    model: nn.Module, dense_optimizer: Any, schedule: str, loader: Loader, epochs: int, device: torch.device,
    checkpoint_dir: str, resume_from: Optional[str] = None,
) -> Dict[str, Any]:  # fmt: skip
    """README.md's block: a freeze schedule and the semi-synchronous pipeline; returns its names."""
    # [README.md: drop-in loop]
    import torch.distributed.checkpoint as dcp
    from torchrec.optim.keyed import CombinedOptimizer
    from dlrm_multiepoch import FreezeScheduleWrapper, SemiSyncTrainPipeline, init_optimizer_state

    optimizer = CombinedOptimizer([model.fused_optimizer, dense_optimizer])
    freeze = FreezeScheduleWrapper(model, schedule, len(loader), epochs, optimizer=optimizer)
    pipeline = SemiSyncTrainPipeline(model, optimizer, device, frozen_tables=freeze.frozen_tables)
    state = {"model": model, "optimizer": optimizer, "freeze": freeze}  # what dcp.save saves and dcp.load restores
    if resume_from is not None:  # a checkpoint this loop saved: continue after its epoch
        init_optimizer_state(optimizer, resume_from)  # the optimizer state it holds, for dcp.load to fill in place
        dcp.load(state, checkpoint_id=resume_from)
    for epoch in range(freeze.global_step // len(loader), epochs):
        loader.set_epoch(epoch)
        it = iter(loader)
        while True:
            try:
                pipeline.progress(it)
            except StopIteration:
                break
            freeze.step()
        dcp.save(state, checkpoint_id=f"{checkpoint_dir}/epoch_{epoch}")
    # [end of block]
    return locals()


def parts_loop(
    model: nn.Module, optimizer: Any, tasks: Sequence[str], loader: Loader, val_loader: Loader, epochs: int,
    device: torch.device, rank: int, id_dropout: Dict[str, float], checkpoint_dir: str, resume_from: Optional[str] = None,
) -> Dict[str, Any]:  # fmt: skip
    """docs/DROPIN.md's block: the remedies, the automatic schedule and validation; returns its names."""
    # [docs/DROPIN.md: drop-in parts]
    import itertools
    import torch.distributed.checkpoint as dcp
    from dlrm_multiepoch import (
        AutoFreezeSchedule, AutoRun, BinaryMetrics, FALRConfig, FrequencyAdaptiveLR, GradientAccumulation, IdDropout,
        MetricsLogger, ReinitSchedule, SemiSyncTrainPipeline, SkipNonFiniteBatches, TableLRSchedule, TableLRScheduler,
        TableReinit, TrainParts, TrainProgress, Validator, eval_outputs, init_optimizer_state,
    )

    # optimizer: CombinedOptimizer([model.fused_optimizer, dense_optimizer]), as in the README's block
    steps = len(loader)
    freeze = AutoFreezeSchedule(model, steps, epochs, tasks, optimizer=optimizer)  # tables frozen, then trained, on val
    # a dense step every 2 batches; DistributedModelParallel built with DefaultDataParallelWrapper(static_graph=False)
    accumulation = GradientAccumulation(model, optimizer, steps=2)
    parts = TrainParts([                                                           # their hooks run in this order
        SkipNonFiniteBatches(model),                                               # a NaN loss trains nothing
        TableLRScheduler(model, TableLRSchedule.parse("0.5", "cosine", 0.1), steps, epochs, factor=accumulation.lr_factor),
        FrequencyAdaptiveLR(model, FALRConfig("log")),                             # per-row LR from lookup counts
        accumulation,
        IdDropout(id_dropout, seed=0, rank=rank, model=model),                     # dropped ids look up row 0 (unknown_id)
        TableReinit(model, optimizer, ReinitSchedule.parse("tables@1", epochs)),  # fresh tables before epoch 2
        freeze,
    ])  # fmt: skip
    progress = TrainProgress()  # the one step count (and epoch): every part is handed it
    pipeline = SemiSyncTrainPipeline(  # its optimizer runs the parts' hook between backward and step (accumulation)
        model, parts.wrap_optimizer(optimizer), device, frozen_tables=freeze.frozen_tables, step_count=lambda: progress.step
    )

    def validate(splits):  # yours: {split: {task: {metric: value}}}; the automatic schedule reads val's
        model.eval()
        metrics = BinaryMetrics(tasks)
        for out in eval_outputs(pipeline.progress, val_loader):  # your model's outputs: a StepOutput
            metrics.update(out.logits, out.labels, out.weights)
        model.train()
        return {"val": metrics.compute()}

    logger = MetricsLogger(f"{checkpoint_dir}/logs", enabled=rank == 0)  # TensorBoard scalars and summary.json
    validator = Validator(
        validate, ["val"], decisions=AutoRun(freeze, checkpoint_dir, model, optimizer, logger), report=logger.log_evaluation
    )
    parts.describe(logger.info, logger.record)  # one line per part: what it does
    state = {"model": model, "optimizer": optimizer, "progress": progress, "metrics": logger, **parts.checkpoint_parts()}
    if resume_from is not None:  # a checkpoint this loop saved: continue after its epoch
        init_optimizer_state(optimizer, resume_from)  # the optimizer state it holds, for dcp.load to fill in place
        dcp.load(state, checkpoint_id=resume_from)
        parts.after_load(progress)
    for epoch in range(progress.epoch, epochs):
        parts.before_epoch(epoch)
        loader.set_epoch(epoch)
        batches = parts.epoch_batches(iter(loader), epoch, start=0)
        end = progress.step + steps
        while progress.step < end and not validator.stopped:
            # Train up to the next evaluation; the pipeline drains there (its batches end).
            segment = itertools.islice(batches, min(end - progress.step, validator.steps_to_next(progress.step)))
            window = []
            while True:
                try:
                    with parts.step_context(progress.step, last_of_epoch=progress.step + 1 == end):
                        window.append(pipeline.progress(segment))
                except StopIteration:
                    break
                progress.step += 1
                parts.after_step(progress.step)
            if not window:  # the loader ran out before len(loader) batches
                break
            parts.after_window([out.loss for out in window], progress.step, logger)  # LRs, freeze states, skipped
            if progress.step < end:
                validator.at_step(progress.step, epoch=progress.step / steps)
        if validator.stopped:
            break
        validator.validate(progress.step, epoch + 1)
        progress.epoch, progress.batch_in_epoch = epoch + 1, 0
        parts.before_save(progress)
        dcp.save(state, checkpoint_id=f"{checkpoint_dir}/epoch_{epoch}")
        parts.after_save()
    validator.finish(progress.step)  # the automatic schedule ends on its best-validation weights
    # [end of block]
    return locals()


def report(pipeline: Any, model: nn.Module, val_loader: Loader, rank: int, title: str) -> Dict[str, Dict[str, float]]:
    """The validation metrics of the model as it is now, through the loop's pipeline; rank 0 prints them."""
    from dlrm_multiepoch import BinaryMetrics, eval_outputs

    model.eval()
    metrics = BinaryMetrics(TASKS)
    for out in eval_outputs(pipeline.progress, val_loader):
        metrics.update(out.logits, out.labels, out.weights)
    model.train()
    results = metrics.compute()  # a collective: every rank sums its rows in
    if rank == 0:
        for task, m in results.items():
            print(f"{title}: validation {task}: auc {m['auc']:.4f}  logloss {m['logloss']:.4f}  ne {m['ne']:.4f}")
    return results


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loop", choices=["freeze", "parts"], default="parts")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=64, help="rows per rank and step")
    parser.add_argument("--train_rows", type=int, default=8192)
    parser.add_argument("--val_rows", type=int, default=512)
    parser.add_argument("--schedule", default="delayed", help="the freeze schedule of --loop freeze")
    parser.add_argument("--id_dropout", type=float, default=0.05, help="share of ids looked up as row 0 (--loop parts)")
    parser.add_argument("--checkpoint_dir", required=True)
    parser.add_argument("--resume_from", help="a checkpoint folder this script saved (CHECKPOINT_DIR/epoch_E)")
    args = parser.parse_args(argv)

    if not dist.is_initialized():  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    logging.basicConfig(format="%(name)s: %(message)s")
    # The parts log what they do (e.g. which lookups overlap) at INFO; say it once, from rank 0.
    logging.getLogger("dlrm_multiepoch").setLevel(logging.INFO if rank == 0 else logging.WARNING)
    warnings.filterwarnings("ignore", category=FutureWarning)  # torch's deprecations inside TorchRec and DCP

    train, val = splits(args.train_rows, args.val_rows)
    loader = Loader(train, args.batch_size, rank, world_size)
    model, dense_optimizer = build(rank, world_size, device)
    val_loader = Loader(val, args.batch_size, rank, world_size, shuffle=False)
    if args.loop == "freeze":
        names = freeze_loop(
            model, dense_optimizer, args.schedule, loader, args.epochs, device, args.checkpoint_dir, args.resume_from
        )
        names["validation"] = report(names["pipeline"], model, val_loader, rank, f"after {args.epochs} epochs")
        return names
    optimizer = CombinedOptimizer([model.fused_optimizer, dense_optimizer])
    id_dropout = {feature: args.id_dropout for feature in list(POOLED) + list(SEQUENCE)}
    return parts_loop(
        model, optimizer, TASKS, loader, val_loader, args.epochs, device, rank, id_dropout, args.checkpoint_dir,
        args.resume_from,
    )  # fmt: skip


if __name__ == "__main__":
    main()
