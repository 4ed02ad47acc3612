"""The training loop: data -> batch -> sharded model -> pipeline -> optimizer, over public parts, with a validator."""

import itertools
import math
import time
from typing import Any, Dict, Iterator, List, Optional

import torch
from torch.distributed.checkpoint.stateful import Stateful
from tqdm import tqdm

from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.data.identity import IDENTITY
from dlrm_multiepoch.distributed import DistEnv
from dlrm_multiepoch.part import FreezePart, TrainPart, TrainParts
from dlrm_multiepoch.pipeline import StepPipeline
from dlrm_multiepoch.step_output import StepOutput
from dlrm_multiepoch.train.build import build_loaders, build_nonfinite, build_pipeline, build_remedies, build_schedule
from dlrm_multiepoch.train.build import build_sharded_model, build_validator, check_your_model, describe_run
from dlrm_multiepoch.train.build import prepare_data
from dlrm_multiepoch.train.checkpoint import Checkpointer, StartPoint, table_sharding
from dlrm_multiepoch.train.config import TrainConfig
from dlrm_multiepoch.train.metrics_logger import MetricsLogger, train_scalars
from dlrm_multiepoch.train.progress import TrainProgress, pause_step
from dlrm_multiepoch.train.spec import TRAIN, TrainSpec
from dlrm_multiepoch.train.start_point import check_start, check_start_data, open_checked_run, record_start
from dlrm_multiepoch.train.start_point import start_message


class Trainer:
    """Builds every part of a run from a :class:`TrainConfig` and a :class:`TrainSpec` (what kind of run) and trains it.

    The loop calls its :class:`~dlrm_multiepoch.part.TrainPart`\\ s' hooks (each a no-op by default: the loop
    never asks which parts a run has) with ``progress``, the one step count; a resumed or branched run
    (``start``) is one :meth:`Checkpointer.restore`.

    Args:
        cfg: the run's config.
        env: process group facts from :func:`dlrm_multiepoch.distributed.init_distributed`.
        data: an already loaded dataset (default: ``cfg.data`` is loaded); the trainer
            adds its train sample split to it.
        spec: the model, its loss, the split trained on and what is evaluated and left behind
            (default: the supervised run; :class:`~dlrm_multiepoch.train.pretrain.PretrainSpec` pre-trains).

    Example::

        env = init_distributed()
        summary = Trainer(parse_config(), env).train()
    """

    freeze: FreezePart  # FreezeScheduleWrapper, AutoFreezeSchedule, or for joint one that freezes nothing
    nonfinite: TrainPart  # what a non-finite loss does: StopOnNonFinite or SkipNonFiniteBatches
    pipeline: StepPipeline  # it steps parts.wrap_optimizer(optimizer): the parts act between backward and step
    parts: TrainParts  # every part whose hooks the loop calls, the validator last
    checkpointed: Dict[str, Stateful]  # what every checkpoint saves beside the model and the optimizer
    start: Optional[StartPoint]  # the checkpoint resumed (--resume) or branched from (--start_from); None: fresh
    last_checkpoint: Optional[str] = None  # the newest checkpoint saved or started from

    def __init__(
        self, cfg: TrainConfig, env: DistEnv, data: Optional[InteractionData] = None, spec: TrainSpec = TRAIN
    ) -> None:
        self.cfg, self.env, self.spec = cfg, env, spec
        log = print if env.is_main else lambda _: None
        self.run, self.start = open_checked_run(cfg, env.world_size, spec, log)
        torch.manual_seed(cfg.seed)
        # A resume onto other data is refused before any row is parsed; a branch onto other data fine-tunes.
        data_changes = [] if self.start is None else check_start_data(self.start, cfg, env, data, log)
        self.data, train_split = prepare_data(cfg, env, data, spec)
        self.train_loader, self.eval_loaders = build_loaders(cfg, self.data, env, train_split, spec)
        self.steps_per_epoch = min(len(self.train_loader), cfg.loader.limit_train_batches or len(self.train_loader))
        config_changes = [] if self.start is None else check_start(
            self.start, cfg, spec.config_record(cfg), self.data.tables, self.steps_per_epoch
        )
        self.pause_at = pause_step(cfg.checkpoint.stop_at_epoch, self.steps_per_epoch)  # 0: no pause
        # On resume, TensorBoard hides what the interrupted job logged after the checkpoint.
        self.logger = MetricsLogger(self.run.path, enabled=env.is_main, purge_step=self.run.purge_step)
        self.progress = TrainProgress()
        self._build_parts()
        self.checkpointed = {"progress": self.progress, "metrics": self.logger, **self.parts.checkpoint_parts()}
        keep, job = cfg.checkpoint.keep_checkpoints, self.run.job_id
        self.checkpointer = Checkpointer(self.run.checkpoints, self.model, self.optimizer, self.checkpointed, keep, job, log)
        self._wall_time_before, self._train_start = 0.0, time.perf_counter()  # before: the launches this one resumes
        describe_run(cfg, env, self.data, self.model, len(self.train_loader), self.run.job_id, self.logger, self.parts, spec)
        if self.start is not None:
            self._restore(self.start, config_changes, data_changes)

    def _build_parts(self) -> None:
        """The sharded model, its optimizer and the loop's parts, in hook order: the non-finite check first (it stops
        before anything logs), remedies before the freeze part, the validator last."""
        cfg, env, data, spe, info = self.cfg, self.env, self.data, self.steps_per_epoch, self.logger.info
        # A fresh run's tables may be pre-trained ones; a checkpoint brings its own.
        model, optimizer, base_lrs = build_sharded_model(cfg, data, env, self.start is None, info, self.spec)
        check_your_model(cfg, model, data, env, next(iter(self.eval_loaders.values()), self.train_loader))
        self.model, self.optimizer = model, optimizer
        self.freeze, decisions = build_schedule(cfg, model, optimizer, spe, data, self.run.checkpoints, self.logger)
        remedies = build_remedies(cfg, data, model, optimizer, spe, env.rank, base_lrs, info)
        own_parts = self.spec.parts()  # the parts that may act on gradients exist before the pipeline that steps them
        stepped = TrainParts([*remedies, self.freeze, *own_parts]).wrap_optimizer(optimizer)
        step_count = lambda: self.progress.step  # noqa: E731 (the semi-synchronous pipeline's warm-up reads it)
        self.pipeline, logging = build_pipeline(cfg, model, stepped, env, self.freeze.frozen_tables, step_count)
        self.nonfinite = build_nonfinite(cfg, model, spe, lambda: self.last_checkpoint)
        self.validator = build_validator(cfg, data, model, self.pipeline, self.eval_loaders, env, decisions, self.logger)
        self.parts = TrainParts([self.nonfinite, *remedies, self.freeze, *logging, *own_parts, self.validator])

    @property
    def step(self) -> int:
        """Optimizer steps done over the whole run."""
        return self.progress.step

    def _halted(self) -> bool:
        """The one place the loop decides to stop: the decisions ended the run, or --epochs or --stop_at_epoch."""
        paused = bool(self.pause_at and self.step >= self.pause_at)
        return self.validator.stopped or self.progress.epoch >= self.cfg.epochs or paused

    def _every(self, n: int) -> bool:
        return bool(n) and self.step % n == 0

    def train(self) -> Dict[str, Any]:
        """Train what is left of ``cfg.epochs`` (up to ``--stop_at_epoch``, a pause), evaluating and checkpointing
        as configured; return the summary."""
        self._train_start = time.perf_counter()
        # When this launch's training began: its launcher (a search) tells the seconds before its first step.
        self.logger.record("train_started_at", round(time.time(), 3))
        if self.progress.epoch >= self.cfg.epochs:
            self.logger.info(f"nothing left to train: {self.progress.epoch} of {self.cfg.epochs} epochs are done")
        while not self._halted():
            self.run_epoch(self.progress.epoch)
        if self.progress.epoch < self.cfg.epochs and not self.validator.stopped:
            # Paused by --stop_at_epoch: the run is not over, so no end-of-run records.
            at = f"{self.step / self.steps_per_epoch:g} of {self.cfg.epochs}"
            self.logger.info(f"paused after epoch {at} (--stop_at_epoch); --resume auto continues")
        else:
            self.validator.finish(self.step)
            self.logger.record("eval_time_s", self.validator.seconds)  # part of the wall time (this job's)
            self.logger.record("wall_time_s", self._wall_time())
            self.spec.finish(self)
        self.logger.close()
        self.run.close()  # the folder is complete: the next trainer may take it
        return self.logger.summary

    def run_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` (0-based; the parts' ``before_epoch``: ``--reinit``), train (the rest of) it,
        evaluate, and save a checkpoint (unless ``--no-checkpoint``)."""
        # Only when the epoch starts here: a mid-epoch resume continues after the re-init.
        if not (self.progress.epoch == epoch and self.progress.batch_in_epoch > 0):
            self.parts.before_epoch(epoch)
        self.train_epoch(epoch)
        if self.validator.stopped or self.progress.batch_in_epoch < self.steps_per_epoch:  # stopped or paused mid-epoch
            return
        self.validator.validate(self.step, epoch + 1)
        self.progress.epoch, self.progress.batch_in_epoch = epoch + 1, 0
        if self.cfg.checkpoint.enabled:
            self.save_checkpoint()

    def _wall_time(self) -> float:
        return self._wall_time_before + time.perf_counter() - self._train_start

    def _steps_to_boundary(self) -> float:
        """Steps until the next mid-epoch evaluation, step checkpoint or pause (the pipeline drains there)."""
        every = self.cfg.checkpoint.checkpoint_every_n_steps if self.cfg.checkpoint.enabled else 0
        checkpoint = every - self.step % every if every else math.inf
        pause = self.pause_at - self.step if self.pause_at > self.step else math.inf
        return min(self.validator.steps_to_next(self.step), checkpoint, pause)

    def train_epoch(self, epoch: int) -> None:
        """Train epoch ``epoch`` from its data position: the batches a resumed checkpoint had not done."""
        steps = self.steps_per_epoch
        first = self.progress.batch_in_epoch if self.progress.epoch == epoch else 0
        self.progress.epoch, self.progress.batch_in_epoch = epoch, first
        self.train_loader.set_epoch(epoch, start_step=first)
        batches: Iterator[Batch] = itertools.islice(iter(self.train_loader), steps - first)
        batches = self.parts.epoch_batches(batches, epoch, first)
        shown = self.env.is_main and self.cfg.metrics.progress_bar
        bar = tqdm(total=steps, initial=first, desc=f"epoch {epoch + 1}", disable=not shown)
        done = first
        while done < steps and not self._halted():
            segment = int(min(steps - done, self._steps_to_boundary()))
            self._train_segment(itertools.islice(batches, segment), epoch, bar)
            done += segment
            self.progress.batch_in_epoch = done
            if done == steps:
                break  # the epoch's evaluation and checkpoint follow in run_epoch
            self.validator.at_step(self.step, epoch + done / steps)
            if self.validator.stopped:
                break
            if self.cfg.checkpoint.enabled and self._every(self.cfg.checkpoint.checkpoint_every_n_steps):
                self.save_checkpoint()
            if self._halted():  # a --stop_at_epoch pause
                self._pause(epoch + done / steps)
                break
        bar.close()

    def _pause(self, epoch: float) -> None:
        """A pause inside an epoch: every split evaluated (not fed to the decisions: a paused run decides as an
        unpaused one) and a checkpoint, unless this step just had them."""
        if not self._every(self.cfg.metrics.eval_every_n_steps):
            self.validator.validate(self.step, epoch, observe=False)
        if not self._every(self.cfg.checkpoint.checkpoint_every_n_steps):
            self.save_checkpoint()

    def _train_segment(self, batches: Iterator[Batch], epoch: int, bar: tqdm) -> None:
        self.model.train()
        window: List[StepOutput] = []
        t0 = time.perf_counter()
        while True:
            try:
                with self.parts.step_context(self.step, last_of_epoch=(self.step + 1) % self.steps_per_epoch == 0):
                    out = self.pipeline.progress(batches)
            except StopIteration:
                break
            self.progress.step += 1
            self.parts.after_step(self.step)
            window.append(out)
            bar.update(1)
            if len(window) == self.cfg.metrics.log_every_n_steps:
                t0 = self._log_train(window, epoch, time.perf_counter() - t0, bar)
                window = []
        if window:
            self._log_train(window, epoch, time.perf_counter() - t0, bar)

    def _log_train(self, window: List[StepOutput], epoch: int, seconds: float, bar: tqdm) -> float:
        self.parts.after_window([o.loss for o in window], self.step, self.logger)  # the non-finite check first
        values = train_scalars(window, epoch, seconds, self.env.world_size)
        self.logger.scalars(values, self.step)
        bar.set_postfix(loss=f"{values['train/loss']:.4f}", samples_per_s=f"{values['train/samples_per_sec']:,.0f}")
        return time.perf_counter()

    def save_checkpoint(self) -> str:
        """Save the whole training state to ``<run_dir>/checkpoints/step_<step>`` (collective)."""
        start = time.perf_counter()
        self.progress.wall_time_s = self._wall_time()
        self.parts.before_save(self.progress)
        tables, sharding = {t.name: t.num_embeddings for t in self.data.tables}, table_sharding(self.model.plan)
        record = {"config": self.spec.config_record(self.cfg), "tables": tables, "sharding": sharding}
        path = self.checkpointer.save(self.step, {**record, IDENTITY: self.data.identity})
        self.last_checkpoint = path
        self.parts.after_save()
        self.logger.info(f"saved checkpoint {path} ({self.progress}) in {time.perf_counter() - start:.1f}s")
        return path

    def _restore(self, start: StartPoint, config_changes: List[str], data_changes: List[str]) -> None:
        """Continue from ``start`` (a resume or a branch): restored, recorded, every part at the loaded step."""
        changes = config_changes + self.checkpointer.restore(start)
        record_start(start, self.progress, self.logger, data_changes)
        self.last_checkpoint = start.checkpoint.path
        self._wall_time_before = self.progress.wall_time_s
        self.parts.after_load(self.progress)
        self.logger.info(start_message(start, self.progress, self.cfg, changes))
