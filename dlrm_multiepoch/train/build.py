"""Builders of the :class:`~dlrm_multiepoch.train.trainer.Trainer`'s parts from a :class:`TrainConfig`, and up-front checks.

Each builder takes what it needs from the config (the one place each setting is read)
and returns public parts (:mod:`dlrm_multiepoch.part`) with their defaults: the
run's data and loaders, the model and optimizer, the freeze schedule and what decides
from validation, the table remedies, the pipeline, the non-finite-loss policy and the
validator.
"""

import contextlib
import sys
from typing import Any, Callable, Collection, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch
from torch.fx._symbolic_trace import is_fx_tracing
from torchrec.distributed import DistributedModelParallel
from torchrec.optim.keyed import CombinedOptimizer

from dlrm_multiepoch.auto import AutoFreezeSchedule
from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.data.identity import IDENTITY
from dlrm_multiepoch.data.id_dropout import IdDropout
from dlrm_multiepoch.data.load import load_dataset
from dlrm_multiepoch.data.loader import BatchLoader
from dlrm_multiepoch.distributed import DistEnv
from dlrm_multiepoch.freeze import FreezeScheduleWrapper
from dlrm_multiepoch.import_path import is_import_path
from dlrm_multiepoch.names import TRAIN_SAMPLE, VAL
from dlrm_multiepoch.optim.accumulation import GradientAccumulation
from dlrm_multiepoch.optim.falr import FrequencyAdaptiveLR
from dlrm_multiepoch.optim.lr import TableLRScheduler
from dlrm_multiepoch.optim.reinit import TableReinit
from dlrm_multiepoch.part import FreezePart, TrainPart
from dlrm_multiepoch.pipeline import StaleFractionLog, StepPipeline, make_train_pipeline
from dlrm_multiepoch.run_files import DATA_ERROR_MARK
from dlrm_multiepoch.step_output import check_step_output
from dlrm_multiepoch.tables import table_names
from dlrm_multiepoch.train.auto_run import AutoRun
from dlrm_multiepoch.train.checkpoint import CheckpointInfo
from dlrm_multiepoch.train.config import TrainConfig
from dlrm_multiepoch.train.evaluate import SplitEvaluator
from dlrm_multiepoch.train.metrics_logger import MetricsLogger
from dlrm_multiepoch.train.nonfinite import SkipNonFiniteBatches, StopOnNonFinite
from dlrm_multiepoch.train.pretrained import load_pretrained_tables
from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, shard_model
from dlrm_multiepoch.train.spec import TRAIN, TrainSpec, evaluated_splits
from dlrm_multiepoch.train.validator import Decisions, Validator


@contextlib.contextmanager
def data_errors(env: DistEnv) -> Iterator[None]:
    """Mark an error reading the data: every run of these data flags fails the same way (the sweep says so)."""
    try:
        yield
    except (ValueError, OSError) as e:
        if env.is_main:
            print(f"{DATA_ERROR_MARK} {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        raise


def prepare_data(
    cfg: TrainConfig, env: DistEnv, data: Optional[InteractionData], spec: TrainSpec = TRAIN
) -> Tuple[InteractionData, str]:
    """``data`` (default: ``--dataset`` loaded on every rank; the cache's file lock lets one rank build it) with
    what ``spec`` adds (the supervised run: its train sample), checked for what the run needs; and the name of
    the split it trains on. An error is marked as the data's (:func:`data_errors`)."""
    with data_errors(env):
        if data is None:
            data = load_dataset(cfg.data, log=print if env.is_main else lambda _: None)
        train_split = spec.prepare(data, cfg)
        check_splits(data, train_split, spec.evaluated_splits(data))
        if cfg.freeze.is_auto and VAL not in data.splits:
            raise ValueError(f"--freeze_schedule auto needs a '{VAL}' split; dataset {data.name!r} has none")
    return data, train_split


def build_loader(
    cfg: TrainConfig, data: InteractionData, split: str, env: DistEnv, shuffle: bool = False
) -> BatchLoader:
    """This rank's loader of ``split``: training batches (shuffled) or evaluation batches."""
    return BatchLoader(
        data,
        split,
        cfg.loader.batch_size if shuffle else cfg.loader.eval_batch_size,
        env.rank,
        env.world_size,
        shuffle=shuffle,
        seed=cfg.seed,
        block_rows=cfg.loader.shuffle_block_rows,
        buffer_rows=cfg.loader.shuffle_buffer_rows,
        prefetch_batches=cfg.loader.prefetch_batches,
        pin_memory=env.device.type == "cuda",
    )


def build_loaders(
    cfg: TrainConfig, data: InteractionData, env: DistEnv, train_split: str = "train", spec: TrainSpec = TRAIN
) -> Tuple[BatchLoader, Dict[str, BatchLoader]]:
    """This rank's training loader (of ``train_split``) and one evaluation loader per split ``spec`` evaluates."""
    evaluated = {split: build_loader(cfg, data, split, env) for split in spec.evaluated_splits(data)}
    return build_loader(cfg, data, train_split, env, shuffle=True), evaluated


def check_splits(data: InteractionData, train_split: str = "train", evaluated: Optional[List[str]] = None) -> None:
    """Refuse, before any training, a run whose train split or an evaluated split has no rows.

    An empty split would train a whole epoch and then fail in its evaluation. A split
    with fewer rows than ranks is fine: ranks without rows get weight-0 padding.
    """
    sizes = {name: len(split) for name, split in data.splits.items()}
    if sizes[train_split] == 0:
        raise ValueError(
            f"the {train_split} split of {data.name} is empty (split sizes {sizes}); check --max_rows and the data"
        )
    for name in evaluated_splits(data) if evaluated is None else evaluated:
        if sizes[name] == 0:
            raise ValueError(
                f"the {name} split of {data.name} is empty (split sizes {sizes}), so it cannot be evaluated; "
                f"raise --test_fraction or use more rows (--max_rows, a larger --data_path)"
            )


def check_resumable(info: CheckpointInfo, cfg: TrainConfig, world_size: int, flag: str = "--resume") -> None:
    """Refuse a resume that would skip or redo work: ``--epochs`` below what is done, or a moved data position.

    A mid-epoch data position is a number of steps into that epoch's order, which
    depends on the batch size and, with the block shuffle, on the number of ranks (each
    rank reads a contiguous share of the shuffled blocks): it continues only where both
    are the same. An end-of-epoch checkpoint continues anywhere. ``flag`` names the
    flag that gave the checkpoint (``--resume`` or ``--start_from``) in the messages.
    """
    if info.state.get("kind") == "best":
        raise ValueError(
            f"{flag} {info.path!r} is a best-validation checkpoint (weights to deploy, no data position); "
            "resume from a step_N checkpoint"
        )
    done = info.parts["progress"]
    epochs_done = done["epoch"] + (done["batch_in_epoch"] > 0)
    if epochs_done > cfg.epochs:
        raise ValueError(
            f"--epochs {cfg.epochs} is below what checkpoint {info.path} has trained (epoch {done['epoch'] + 1}"
            f"{', batch ' + str(done['batch_in_epoch']) if done['batch_in_epoch'] else ' done'}); "
            f"pass --epochs {epochs_done} or more"
        )
    saved_ranks = info.state.get("world_size", world_size)
    if done["batch_in_epoch"] and saved_ranks != world_size:
        raise ValueError(
            f"{flag} {info.path!r} was taken {done['batch_in_epoch']} batches into epoch {done['epoch'] + 1} on "
            f"{saved_ranks} ranks; the shuffled order of an epoch depends on the number of ranks, so that position "
            f"continues only on {saved_ranks} ranks. Resume on {saved_ranks} ranks, or from an end-of-epoch checkpoint"
        )
    saved_batch = info.state["config"]["batch_size"]
    if done["batch_in_epoch"] and saved_batch != cfg.loader.batch_size:
        raise ValueError(
            f"--batch_size {cfg.loader.batch_size}: checkpoint {info.path} was taken {done['batch_in_epoch']} batches into "
            f"an epoch at --batch_size {saved_batch}, a data position that only that batch size continues; "
            f"resume with --batch_size {saved_batch} (or from an end-of-epoch checkpoint)"
        )


def describe_run(
    cfg: TrainConfig,
    env: DistEnv,
    data: InteractionData,
    model: DistributedModelParallel,
    steps_per_epoch: int,
    job_id: Optional[str],
    logger: MetricsLogger,
    parts: TrainPart,
    spec: TrainSpec = TRAIN,
) -> None:
    """The run's build on the console (model, ranks, plan, each part) and in the summary (config, dataset, job,
    encoding, what the parts record)."""
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(
        f"built {spec.label(cfg)}: {n_params:,} parameters on rank {env.rank} "
        f"({env.world_size} ranks, {env.backend} on {env.device}); "
        f"{steps_per_epoch} steps/epoch at global batch {cfg.loader.batch_size}\n{model.plan}"
    )
    logger.info(f"TensorBoard run folder: {logger.run_dir}")
    record = spec.config_record(cfg)
    logger.record("config", record)
    logger.record("dataset", {name: len(split) for name, split in data.splits.items()})
    logger.record("job_id", job_id)
    logger.record("world_size", env.world_size)  # a sweep or search rerun on another -j is refused by it
    logger.record("encoding", data.encoding)
    logger.record(IDENTITY, data.identity)
    logger.text("config", f"```\n{record}\n```")
    parts.describe(logger.info, logger.record)


def table_base_lrs(cfg: TrainConfig, names: List[str]) -> Dict[str, float]:
    """Each of the model's tables ``names``: its base LR (``--embedding_learning_rate`` or
    ``--embedding_lr_scale``, overridden by ``--table_lr``); an override of an unknown table is an error."""
    values = cfg.optim.table_lr_values
    values.check_tables(names)
    return {t: values.get(t) for t in names}


def build_sharded_model(
    cfg: TrainConfig,
    data: InteractionData,
    env: DistEnv,
    fresh: bool,
    log: Callable[[str], None],
    spec: TrainSpec = TRAIN,
) -> Tuple[DistributedModelParallel, CombinedOptimizer, Dict[str, float]]:
    """``spec``'s model, sharded (with ``--pretrained_tables`` when ``fresh``: a checkpoint brings its own), its
    optimizer and each table's base LR."""
    model = spec.build_model(data, cfg.model, env.device)
    base_lrs = table_base_lrs(cfg, table_names(model))  # the model's tables: yours may not be the dataset's
    apply_embedding_optimizer(model, cfg.optim.embedding_optimizer, cfg.optim.base_table_lr(), base_lrs)
    dmp = shard_model(model, env, cfg.pipeline.sharding_type_list, static_graph=cfg.optim.grad_accum_steps == 1)
    if cfg.freeze.pretrained_tables and fresh:
        load_pretrained_tables(dmp, cfg.freeze.pretrained_tables, log, data_options=cfg.data.cache_options())
    return dmp, build_optimizer(dmp, cfg.optim.learning_rate), base_lrs


def check_your_model(
    cfg: TrainConfig, model: DistributedModelParallel, data: InteractionData, env: DistEnv, batches: Iterable[Batch]
) -> None:
    """``--model MODULE:NAME``: your model's forward checked on the first of ``batches`` before anything trains
    (:func:`check_model_forward`); the app's own models need no check."""
    if is_import_path(cfg.model.model):
        check_model_forward(model, batches, data.tasks, env.device, f"--model {cfg.model.model!r}")


def check_model_forward(
    model: DistributedModelParallel, batches: Iterable[Batch], tasks: Sequence[str], device: torch.device, where: str
) -> None:
    """Refuse, naming ``where``, a model whose forward does not return what the parts read (``(loss, output)``,
    :func:`~dlrm_multiepoch.step_output.check_step_output`): one evaluation forward now, on the first of
    ``batches`` (on every rank: a collective; it changes nothing but a managed-collision remapper's state, as every
    evaluation does), and the first training forward when it comes, before its backward."""
    it = iter(batches)
    try:
        batch = next(it).to(device)
    finally:
        getattr(it, "close", lambda: None)()  # a prefetching loader's thread
    model.eval()
    with torch.no_grad():
        result = model(batch)
    model.train()
    check_step_output(result, batch.batch_size, tasks, f"{where} (in eval mode)")

    def first_training_forward(module: torch.nn.Module, args: Tuple[Any, ...], result: Any) -> None:
        if not module.training or is_fx_tracing():  # TorchRec's pipelines trace the model once
            return
        handle.remove()
        check_step_output(result, args[0].batch_size, tasks, f"{where} (in training)")

    handle = model.module.register_forward_hook(first_training_forward)


def build_schedule(
    cfg: TrainConfig,
    model: DistributedModelParallel,
    optimizer: CombinedOptimizer,
    steps_per_epoch: int,
    data: InteractionData,
    checkpoint_dir: str,
    logger: MetricsLogger,
) -> Tuple[FreezePart, Decisions]:
    """The freeze part of ``--freeze_schedule`` (fixed, automatic, or for ``joint`` one that freezes nothing) and
    what decides from validation (the automatic schedule's :class:`AutoRun`; nothing otherwise)."""
    text = cfg.freeze.freeze_schedule
    if cfg.freeze.is_joint:
        return FreezePart(), Decisions()
    if cfg.freeze.is_auto:
        auto = AutoFreezeSchedule(model, steps_per_epoch, cfg.epochs, data.tasks, optimizer=optimizer, config=cfg.auto)
        state = {"config": cfg.to_dict(), "tables": {t.name: t.num_embeddings for t in data.tables}}
        sample = TRAIN_SAMPLE if cfg.auto.auto_gate else None
        return auto, AutoRun(auto, checkpoint_dir, model, optimizer, logger, VAL, sample, state)
    try:
        return FreezeScheduleWrapper(model, cfg.freeze.schedule, steps_per_epoch, cfg.epochs, optimizer=optimizer), Decisions()
    except ValueError as e:
        raise ValueError(f"--freeze_schedule {text!r}: {e}") from None


def build_remedies(
    cfg: TrainConfig,
    data: InteractionData,
    model: DistributedModelParallel,
    optimizer: CombinedOptimizer,
    steps_per_epoch: int,
    rank: int,
    base_lrs: Dict[str, float],
    log: Callable[[str], None],
) -> List[TrainPart]:
    """The table remedies the config asks for, as parts in hook order."""
    o = cfg.optim
    # `tables` is every table of the model: a TrainSpec's model may have tables the dataset does not name.
    reinit = TableReinit(model, optimizer, o.reinit_schedule, cfg.seed, log=log)
    accumulation = (
        GradientAccumulation(model, optimizer, o.grad_accum_steps, o.grad_accum_lr_rule) if o.grad_accum_steps > 1 else None
    )
    factor = accumulation.lr_factor if accumulation is not None else 1.0
    parts: List[TrainPart] = [
        TableLRScheduler(model, o.lr_schedule, steps_per_epoch, cfg.epochs, base_lrs=base_lrs, factor=factor)
    ]
    falr_config = o.falr_config
    if falr_config is not None:
        parts.append(FrequencyAdaptiveLR(model, falr_config, o.falr_table_list))
    if accumulation is not None:
        parts.append(accumulation)
    rates, names = cfg.remedies.id_dropout_values, [t.name for t in data.tables]
    rates.check_tables(names)
    dropout = IdDropout.for_tables(data.tables, {t: rates.get(t) for t in names}, cfg.seed, rank)
    if dropout:
        parts.append(dropout)
    return parts + [reinit]


def build_pipeline(
    cfg: TrainConfig,
    model: DistributedModelParallel,
    optimizer: Any,
    env: DistEnv,
    frozen_tables: Callable[[], Collection[str]],
    step_count: Callable[[], int],
) -> Tuple[StepPipeline, List[TrainPart]]:
    """The ``--pipeline`` stepping ``optimizer`` (the parts' :meth:`~dlrm_multiepoch.part.TrainParts.wrap_optimizer`),
    and its logging parts (the semi-synchronous one's stale fraction)."""
    pipeline = make_train_pipeline(
        cfg.pipeline.name,
        model,
        optimizer,
        env.device,
        warmup_batches=cfg.pipeline.pipeline_warmup_batches,
        frozen_tables=frozen_tables,
        staleness_interval=cfg.pipeline.pipeline_staleness_interval,
        step_count=step_count,
    )
    return pipeline, [StaleFractionLog(pipeline)] if cfg.pipeline.name == "semi_sync" else []


def build_nonfinite(
    cfg: TrainConfig, model: DistributedModelParallel, steps_per_epoch: int, last_checkpoint: Callable[[], Optional[str]]
) -> TrainPart:
    """What a non-finite loss does: skip its batch (``--skip_nonfinite_batches``) or stop the run."""
    if cfg.pipeline.skip_nonfinite_batches:
        return SkipNonFiniteBatches(model)
    return StopOnNonFinite(steps_per_epoch, last_checkpoint)


def build_validator(
    cfg: TrainConfig,
    data: InteractionData,
    model: DistributedModelParallel,
    pipeline: StepPipeline,
    loaders: Dict[str, BatchLoader],
    env: DistEnv,
    decisions: Decisions,
    logger: MetricsLogger,
) -> Validator:
    """Every split of ``loaders`` (through the pipeline, in eval mode) at epoch ends and every
    ``--eval_every_n_steps``, logged; ``decisions`` at their cadence."""
    evaluate = SplitEvaluator(model, pipeline.progress, dict(loaders), data.tasks, env.device, data.slices, [TRAIN_SAMPLE])
    return Validator(evaluate, list(loaders), cfg.metrics.eval_every_n_steps, decisions, logger.log_evaluation)
