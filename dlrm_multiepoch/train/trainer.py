"""The training loop: data -> batch -> sharded model -> pipeline -> optimizer -> evaluator -> logger."""

import itertools
import os
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np
import torch
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
from torchrec.optim.keyed import CombinedOptimizer
from tqdm import tqdm

from dlrm_multiepoch.auto import AUTO, AutoFreezeSchedule
from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.data.load import load_dataset
from dlrm_multiepoch.data.loader import BatchLoader
from dlrm_multiepoch.distributed import DistEnv
from dlrm_multiepoch.freeze import FreezeScheduleWrapper
from dlrm_multiepoch.models.dlrm import ModelOutput
from dlrm_multiepoch.models.factory import build_model
from dlrm_multiepoch.pipeline import SemiSyncTrainPipeline, make_train_pipeline
from dlrm_multiepoch.train.auto_run import AutoRun
from dlrm_multiepoch.train.checkpoint import (
    CHECKPOINTS_DIR,
    CheckpointInfo,
    check_compatible,
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from dlrm_multiepoch.train.config import TrainConfig
from dlrm_multiepoch.train.evaluate import TaskMetrics, evaluate_pass
from dlrm_multiepoch.train.metrics_logger import MetricsLogger, format_metrics, metric_scalars
from dlrm_multiepoch.train.pretrained import load_pretrained_tables
from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, shard_model

TRAIN_SAMPLE = "train_sample"
VAL = "val"
# Splits evaluated, in this order, where the data has them; only "val" drives decisions.
EVAL_SPLITS = ("test", VAL, TRAIN_SAMPLE)


def load_data(cfg: TrainConfig, env: DistEnv) -> InteractionData:
    """Load the dataset on every rank (the cache's file lock lets one rank build it)."""
    data = load_dataset(cfg.data, log=print if env.is_main else lambda _: None)
    add_train_sample(data, cfg)
    return data


def add_train_sample(data: InteractionData, cfg: TrainConfig) -> None:
    """A fixed train sample, evaluated like the test split, shows memorisation. Drawn
    without a permutation of all rows: memory stays flat as the split grows."""
    train = data.splits["train"]
    size = min(cfg.train_eval_rows, len(train))
    rows = np.random.default_rng(cfg.seed).choice(len(train), size=size, replace=False)
    data.splits[TRAIN_SAMPLE] = train.take(np.sort(rows))


def build_loader(
    cfg: TrainConfig, data: InteractionData, split: str, env: DistEnv, shuffle: bool = False
) -> BatchLoader:
    """This rank's loader of ``split``: training batches (shuffled) or evaluation batches."""
    return BatchLoader(
        data,
        split,
        cfg.batch_size if shuffle else cfg.eval_batch_size,
        env.rank,
        env.world_size,
        shuffle=shuffle,
        seed=cfg.seed,
        block_rows=cfg.shuffle_block_rows,
        buffer_rows=cfg.shuffle_buffer_rows,
        prefetch_batches=cfg.prefetch_batches,
        pin_memory=env.device.type == "cuda",
    )


Freeze = Union[FreezeScheduleWrapper, AutoFreezeSchedule]


def build_freeze(
    cfg: TrainConfig,
    model: DistributedModelParallel,
    optimizer: CombinedOptimizer,
    steps_per_epoch: int,
    tasks: List[str],
) -> Optional[Freeze]:
    """The freeze-schedule controller of ``--freeze_schedule``; None when everything trains."""
    if not cfg.freeze_schedule or cfg.freeze_schedule == "joint":
        return None
    if cfg.freeze_schedule.strip() == AUTO:
        return AutoFreezeSchedule(model, steps_per_epoch, cfg.epochs, tasks, optimizer=optimizer, config=cfg.auto)
    return FreezeScheduleWrapper(model, cfg.freeze_schedule, steps_per_epoch, cfg.epochs, optimizer=optimizer)


def default_run_name(cfg: TrainConfig) -> str:
    return f"{cfg.data.dataset}-{cfg.model.model}-seed{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"


class Trainer:
    """Builds every part of a run from a :class:`TrainConfig` and trains it.

    Attributes list the swappable parts; each is built by one function so later
    features (freeze schedules, other pipelines) replace one attribute.

    Args:
        cfg: the run's config.
        env: process group facts from :func:`dlrm_multiepoch.distributed.init_distributed`.
        data: an already loaded dataset (default: ``cfg.data`` is loaded); the trainer
            adds its train sample split to it.

    Example::

        env = init_distributed()
        summary = Trainer(parse_config(), env).train()
    """

    data: InteractionData
    model: DistributedModelParallel
    optimizer: CombinedOptimizer
    freeze: Optional[Freeze]
    auto_run: Optional[AutoRun]  # with --freeze_schedule auto: acts on its decisions
    pipeline: TrainPipelineSparseDist
    logger: MetricsLogger

    def __init__(self, cfg: TrainConfig, env: DistEnv, data: Optional[InteractionData] = None) -> None:
        self.cfg = cfg
        self.env = env
        torch.manual_seed(cfg.seed)
        if data is None:
            self.data = load_data(cfg, env)
        else:
            self.data = data
            add_train_sample(data, cfg)
        if cfg.freeze_schedule.strip() == AUTO and VAL not in self.data.splits:
            raise ValueError(f"--freeze_schedule auto needs a '{VAL}' split; dataset {self.data.name!r} has none")
        self.train_loader = build_loader(cfg, self.data, "train", env, shuffle=True)
        self.eval_loaders = {
            split: build_loader(cfg, self.data, split, env) for split in EVAL_SPLITS if split in self.data.splits
        }
        run_dir = f"{cfg.tensorboard_dir}/{cfg.run_name or default_run_name(cfg)}"
        self.checkpoint_dir = os.path.join(run_dir, CHECKPOINTS_DIR)
        # Found and checked before anything is built: a wrong --resume fails in seconds.
        self.resume_from = find_checkpoint(cfg.resume, self.checkpoint_dir)
        if self.resume_from is not None and self.resume_from.state.get("kind") == "best":
            raise ValueError(
                f"--resume {self.resume_from.path!r} is a best-validation checkpoint (weights to deploy, no data "
                "position); resume from an epoch_N checkpoint"
            )
        changes = check_compatible(self.resume_from, cfg.to_dict(), self.data.tables) if self.resume_from else []
        # On resume, TensorBoard hides what the interrupted job logged after the checkpoint.
        purge_step = self.resume_from.step + 1 if self.resume_from else None
        self.logger = MetricsLogger(run_dir, enabled=env.is_main, purge_step=purge_step)
        model = build_model(self.data, cfg.model, env.device)
        apply_embedding_optimizer(model, cfg.optim.embedding_optimizer, cfg.optim.embedding_learning_rate)
        self.model = shard_model(model, env, cfg.sharding_type_list)
        if cfg.pretrained_tables and self.resume_from is None:  # on resume the checkpoint has the tables
            load_pretrained_tables(self.model, cfg.pretrained_tables, self.logger.info)
        self.optimizer = build_optimizer(self.model, cfg.optim.learning_rate)
        self.freeze = build_freeze(cfg, self.model, self.optimizer, self.steps_per_epoch, self.data.tasks)
        self.auto_run = (
            AutoRun(self.freeze, self.checkpoint_dir, self.model, self.optimizer, self.logger)
            if isinstance(self.freeze, AutoFreezeSchedule)
            else None
        )
        self.pipeline = make_train_pipeline(
            cfg.pipeline,
            self.model,
            self.optimizer,
            env.device,
            warmup_batches=cfg.pipeline_warmup_batches,
            frozen_tables=self.freeze.frozen_tables if self.freeze is not None else None,
            staleness_interval=cfg.pipeline_staleness_interval,
        )
        self.step = 0
        self.start_epoch = 0
        self._wall_time_before = 0.0  # of the runs this one resumes
        self._eval_seconds = 0.0  # of this job, in evaluation passes
        self._train_start = time.perf_counter()
        self._log_build()
        if self.resume_from is not None:
            self._resume(self.resume_from, changes)

    def _log_build(self) -> None:
        n_params = sum(p.numel() for p in self.model.parameters())
        self.logger.info(
            f"built {self.cfg.model.model}: {n_params:,} parameters on rank {self.env.rank} "
            f"({self.env.world_size} ranks, {self.env.backend} on {self.env.device}); "
            f"{len(self.train_loader)} steps/epoch at global batch {self.cfg.batch_size}\n{self.model.plan}"
        )
        self.logger.info(f"TensorBoard run folder: {self.logger.run_dir}")
        self.logger.record("config", self.cfg.to_dict())
        self.logger.record("dataset", {name: len(split) for name, split in self.data.splits.items()})
        self.logger.text("config", f"```\n{self.cfg.to_dict()}\n```")

    # -- training ---------------------------------------------------------------

    def train(self) -> Dict[str, Any]:
        """Train the epochs left of ``cfg.epochs``, evaluating and checkpointing after each; return the summary."""
        self._train_start = time.perf_counter()
        for epoch in range(self.start_epoch, self.cfg.epochs):
            if self.stopped:
                break
            self.run_epoch(epoch)
        if self.auto_run is not None:
            self.auto_run.end_on_best(self.step, self.steps_per_epoch, lambda: self._eval_pass(list(self.eval_loaders)))
        self.logger.record("eval_time_s", self._eval_seconds)  # part of the wall time (this job's)
        self.logger.record("wall_time_s", self._wall_time())
        self.logger.close()
        return self.logger.summary

    def run_epoch(self, epoch: int) -> None:
        """Train epoch ``epoch`` (0-based), evaluate, and save a checkpoint (unless ``--no-checkpoint``)."""
        self.train_epoch(epoch)
        if self.stopped:  # mid-epoch: no epoch evaluation, no epoch checkpoint
            return
        self.evaluate(epoch=epoch + 1)
        if self.cfg.checkpoint:
            self.save_checkpoint(epoch + 1)

    @property
    def stopped(self) -> bool:
        """Whether the auto schedule ended the run before its budget."""
        return self.auto_run is not None and self.auto_run.stopped

    def _wall_time(self) -> float:
        return self._wall_time_before + time.perf_counter() - self._train_start

    # -- checkpoints ------------------------------------------------------------

    def save_checkpoint(self, epochs_done: int) -> str:
        """Save the whole training state to ``<run_dir>/checkpoints/epoch_<epochs_done>`` (collective)."""
        start = time.perf_counter()
        state = {
            "step": self.step,
            "config": self.cfg.to_dict(),
            "tables": {t.name: t.num_embeddings for t in self.data.tables},
            "freeze": self.freeze.state_dict() if self.freeze is not None else None,
            "summary": self.logger.summary,
            "wall_time_s": self._wall_time(),
            "world_size": self.env.world_size,
        }
        path = save_checkpoint(
            self.checkpoint_dir, epochs_done, self.model, self.optimizer, state, keep=self.cfg.keep_checkpoints
        )
        if self.auto_run is not None:
            self.auto_run.after_epoch_checkpoint()
        self.logger.info(f"saved checkpoint {path} (step {self.step}) in {time.perf_counter() - start:.1f}s")
        return path

    def _resume(self, info: CheckpointInfo, changes: List[str]) -> None:
        """Load ``info``'s state into the built parts; training continues with epoch ``info.epoch``."""
        saved_freeze = info.state["freeze"]
        # Compared in normalised form ("delayed" == its expansion, "auto"); None: every group trains.
        saved_schedule = saved_freeze["schedule"] if saved_freeze is not None else None
        if saved_schedule != (self.freeze.state_dict()["schedule"] if self.freeze is not None else None):
            raise ValueError(
                f"--resume {info.path!r}: the checkpoint was trained with --freeze_schedule "
                f"{info.state['config']['freeze_schedule']!r}, this run has {self.cfg.freeze_schedule!r}"
            )
        load_checkpoint(info.path, self.model, self.optimizer)
        if self.freeze is not None:
            self.freeze.load_state_dict(saved_freeze)
        if self.auto_run is not None:
            self.auto_run.check_resumable()
        self.step = info.step
        self.start_epoch = info.epoch
        self._wall_time_before = float(info.state["wall_time_s"])
        if isinstance(self.pipeline, SemiSyncTrainPipeline):
            # Its warm-up counts training batches across epochs, from construction.
            self.pipeline.train_steps = info.step
        self.logger.restore(info.state["summary"])
        resumed = {"path": info.path, "epoch": info.epoch, "step": info.step}
        self.logger.record("resumed_from", self.logger.summary.get("resumed_from", []) + [resumed])
        self.logger.info(
            f"resumed from {info.path}: {info.epoch} epoch(s) done, step {info.step}; training epochs "
            f"{info.epoch + 1}..{self.cfg.epochs}"
            + "".join(f"\n  changed since the checkpoint: {change}" for change in changes)
        )

    @property
    def steps_per_epoch(self) -> int:
        steps = len(self.train_loader)
        return min(steps, self.cfg.limit_train_batches) if self.cfg.limit_train_batches else steps

    def train_epoch(self, epoch: int) -> None:
        self.train_loader.set_epoch(epoch)
        steps = self.steps_per_epoch
        batches: Iterator[Batch] = itertools.islice(iter(self.train_loader), steps)
        bar = tqdm(total=steps, desc=f"epoch {epoch + 1}", disable=not (self.env.is_main and self.cfg.progress_bar))
        # Train in segments that end where a mid-epoch evaluation is due (all splits every
        # --eval_every_n_steps, the val split at the auto schedule's cadence): the
        # pipeline drains its in-flight batches at the end of each segment.
        full_every = self.cfg.eval_every_n_steps
        cadences = [c for c in (full_every, self.auto_run.eval_every_n_steps if self.auto_run else 0) if c]
        done = 0
        while done < steps and not self.stopped:
            segment = min([steps - done] + [c - self.step % c for c in cadences])
            self._train_segment(itertools.islice(batches, segment), epoch, bar)
            done += segment
            if done == steps:
                break  # the epoch's own evaluation follows
            if full_every and self.step % full_every == 0:
                self.evaluate(epoch=epoch + done / steps)
            elif self.auto_run is not None and self.auto_run.evaluation_due(self.step):
                self.evaluate(epoch=epoch + done / steps, splits=self._val_splits)
        bar.close()

    def _train_segment(self, batches: Iterator[Batch], epoch: int, bar: tqdm) -> None:
        self.model.train()
        window: List[ModelOutput] = []
        t0 = time.perf_counter()
        while True:
            try:
                out: ModelOutput = self.pipeline.progress(batches)
            except StopIteration:
                break
            self.step += 1
            if self.freeze is not None:
                self.freeze.step()
            window.append(out)
            bar.update(1)
            if len(window) == self.cfg.log_every_n_steps:
                t0 = self._log_train(window, epoch, time.perf_counter() - t0, bar)
                window = []
        if window:
            self._log_train(window, epoch, time.perf_counter() - t0, bar)

    def _log_train(self, window: List[ModelOutput], epoch: int, seconds: float, bar: tqdm) -> float:
        # Local real samples times ranks: exact except in an epoch's last, padded step.
        samples = sum(float(o.weights.sum()) for o in window) * self.env.world_size
        loss = float(torch.stack([o.loss for o in window]).mean())
        values = {"train/loss": loss, "train/samples_per_sec": samples / max(seconds, 1e-9), "train/epoch": epoch}
        if self.freeze is not None:
            values |= {f"freeze/{group}": state for group, state in self.freeze.states().items()}
        for name in window[0].losses:
            values[f"train/loss_{name}"] = float(torch.stack([o.losses[name] for o in window]).mean())
        self.logger.scalars(values, self.step)
        if isinstance(self.pipeline, SemiSyncTrainPipeline):
            # Per-step values, read once per logging window: reading each step would
            # wait on that step's all-reduce (and on CUDA sync the host) in the hot path.
            # Sampled steps only (--pipeline_staleness_interval), logged at the step count after them.
            for step, fraction in self.pipeline.staleness_meter.take_history():
                self.logger.scalars({"pipeline/stale_fraction": fraction}, step + 1)
            self.logger.scalars({"pipeline/mean_stale_fraction": self.pipeline.mean_stale_fraction}, self.step)
        bar.set_postfix(loss=f"{loss:.4f}", samples_per_s=f"{values['train/samples_per_sec']:,.0f}")
        return time.perf_counter()

    # -- evaluation -------------------------------------------------------------

    def evaluate(self, epoch: float, splits: Optional[Sequence[str]] = None) -> Dict[str, TaskMetrics]:
        """Metrics of ``splits`` (default: every evaluated split), logged at the current step.

        With the auto schedule, an evaluation that covers the val split also feeds its
        decision (and only that split's metrics, plus the train sample's for a gate).
        """
        results = self._eval_pass(splits or list(self.eval_loaders))
        values = {"eval/epoch": epoch} | metric_scalars(results)
        self.logger.scalars(values, self.step)
        self.logger.evaluation({"epoch": epoch, "step": self.step, **results})
        self.logger.info(format_metrics(f"eval after epoch {epoch:g} (step {self.step}):", results))
        if self.auto_run is not None and VAL in results:
            tables = {t.name: t.num_embeddings for t in self.data.tables}
            state = {"config": self.cfg.to_dict(), "tables": tables}
            self.auto_run.observe(results[VAL], results.get(TRAIN_SAMPLE), self.step, state)
        return results

    def _eval_pass(self, splits: Sequence[str]) -> Dict[str, TaskMetrics]:
        start = time.perf_counter()
        self.model.eval()
        results = {
            s: evaluate_pass(self.pipeline.progress, self.eval_loaders[s], self.data.tasks, self.env.device)
            for s in splits
        }
        self.model.train()
        self._eval_seconds += time.perf_counter() - start
        return results

    @property
    def _val_splits(self) -> List[str]:
        return [VAL, TRAIN_SAMPLE] if self.cfg.auto.auto_gate else [VAL]
