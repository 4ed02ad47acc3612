"""The training loop: data -> batch -> sharded model -> pipeline -> optimizer, over public parts, with a validator."""

import contextlib
import itertools
import math
import sys
import time
from typing import Any, Dict, Iterator, List, Optional

import torch
from torch.distributed.checkpoint.stateful import Stateful
from torchrec.distributed import DistributedModelParallel
from torchrec.optim.keyed import CombinedOptimizer
from tqdm import tqdm

from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.data.identity import IDENTITY, data_identity
from dlrm_multiepoch.distributed import DistEnv
from dlrm_multiepoch.import_path import is_import_path
from dlrm_multiepoch.part import TrainPart, TrainParts
from dlrm_multiepoch.run_files import DATA_ERROR_MARK
from dlrm_multiepoch.step_output import StepOutput
from dlrm_multiepoch.train.build import build_loaders, build_nonfinite, build_pipeline, build_remedies
from dlrm_multiepoch.train.build import build_schedule, build_sharded_model, build_validator, check_model_forward
from dlrm_multiepoch.train.build import describe_run, prepare_data
from dlrm_multiepoch.train.checkpoint import Checkpointer, StartPoint, table_sharding
from dlrm_multiepoch.train.config import TrainConfig
from dlrm_multiepoch.train.metrics_logger import MetricsLogger, train_scalars
from dlrm_multiepoch.train.progress import TrainProgress
from dlrm_multiepoch.train.run_folder import RunFolder
from dlrm_multiepoch.train.spec import TRAIN, TrainSpec
from dlrm_multiepoch.train.start_point import check_same_data, check_start, open_checked_run, record_start
from dlrm_multiepoch.train.start_point import start_message
from dlrm_multiepoch.train.validator import Validator


def pause_step(stop_at_epoch: float, steps_per_epoch: int) -> int:
    """The step ``--stop_at_epoch`` pauses at, ``round(stop_at_epoch * steps_per_epoch)`` (0: no pause).

    Raises:
        ValueError: a pause inside an epoch that rounds to an epoch's end (too few steps per epoch), naming
            the flag and what to change.
    """
    step = math.floor(stop_at_epoch * steps_per_epoch + 0.5)
    if stop_at_epoch and not float(stop_at_epoch).is_integer() and steps_per_epoch and step % steps_per_epoch == 0:
        raise ValueError(
            f"--stop_at_epoch {stop_at_epoch:g} pauses inside epoch {math.ceil(stop_at_epoch)}, but with "
            f"{steps_per_epoch} step(s) per epoch it rounds to step {step}, an epoch's end: too few steps per epoch to "
            "pause inside one. Pause at a whole epoch, or take more steps per epoch (a smaller --batch_size); a "
            "schedule search judges inside epochs unless given --rung_fraction 1"
        )
    return step


@contextlib.contextmanager
def _data_errors(env: DistEnv) -> Iterator[None]:
    """Mark an error reading the data: every run of these data flags fails the same way (the sweep says so)."""
    try:
        yield
    except (ValueError, OSError) as e:
        if env.is_main:
            print(f"{DATA_ERROR_MARK} {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        raise


class Trainer:
    """Builds every part of a run from a :class:`TrainConfig` and a :class:`TrainSpec` (what kind of run) and trains it.

    The loop calls the hooks of :class:`~dlrm_multiepoch.part.TrainPart`\\ s (the
    freeze schedule, the table remedies, the non-finite-loss policy, the pipeline's
    logging) and a :class:`~dlrm_multiepoch.train.validator.Validator` at fixed points;
    every part has a do-nothing default, so the loop never asks which parts a run has.
    ``progress`` is the one step count, handed to the parts. The :class:`Checkpointer`
    saves and restores the model, the optimizer and every ``Stateful`` in ``checkpointed``; a resumed or
    branched run (``start``) is one :meth:`Checkpointer.restore` of its start point.

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

    data: InteractionData
    model: DistributedModelParallel
    optimizer: CombinedOptimizer
    freeze: TrainPart  # the freeze schedule: FreezeScheduleWrapper, AutoFreezeSchedule or NoFreeze
    skipper: TrainPart  # non-finite losses: StopOnNonFinite or SkipNonFiniteBatches
    pipeline: Any  # a TorchRec TrainPipeline
    parts: TrainParts  # every part whose hooks the loop calls, the validator last
    validator: Validator
    logger: MetricsLogger
    run: RunFolder
    progress: TrainProgress
    checkpointed: Dict[str, Stateful]
    checkpointer: Checkpointer
    start: Optional[StartPoint]  # the checkpoint resumed (--resume) or branched from (--start_from); None: fresh

    def __init__(
        self, cfg: TrainConfig, env: DistEnv, data: Optional[InteractionData] = None, spec: TrainSpec = TRAIN
    ) -> None:
        self.cfg, self.env, self.spec = cfg, env, spec
        log = print if env.is_main else lambda _: None
        self.run, self.start = open_checked_run(cfg, env.world_size, spec, log)
        torch.manual_seed(cfg.seed)
        other_data: List[str] = []  # how a branch's data differs from its parent's (a fine-tuning)
        if self.start is not None:  # a resume onto other data is refused before any row is parsed
            with _data_errors(env):
                identity = data.identity if data is not None else data_identity(cfg.data)
            other_data = check_same_data(self.start, identity, log)
        with _data_errors(env):
            self.data, train_split = prepare_data(cfg, env, data, spec)
        self.train_loader, self.eval_loaders = build_loaders(cfg, self.data, env, train_split, spec)
        self.steps_per_epoch = min(len(self.train_loader), cfg.loader.limit_train_batches or len(self.train_loader))
        start, spe = self.start, self.steps_per_epoch
        changes = check_start(start, cfg, spec.config_record(cfg), self.data.tables, spe) if start is not None else []
        self._pause_step = pause_step(cfg.checkpoint.stop_at_epoch, self.steps_per_epoch)  # 0: no pause
        # On resume, TensorBoard hides what the interrupted job logged after the checkpoint.
        self.logger = MetricsLogger(self.run.path, enabled=env.is_main, purge_step=self.run.purge_step)
        model, optimizer, base_lrs = build_sharded_model(cfg, self.data, env, start is None, self.logger.info, spec)
        if is_import_path(cfg.model.model):  # your model: its forward is checked before anything trains
            first = next(iter(self.eval_loaders.values()), self.train_loader)
            check_model_forward(model, first, self.data.tasks, env.device, f"--model {cfg.model.model!r}")
        self.model, self.optimizer, self.progress = model, optimizer, TrainProgress()
        self.freeze, decisions = build_schedule(cfg, model, optimizer, spe, self.data, self.run.checkpoints, self.logger)
        remedies, driven = build_remedies(cfg, self.data, model, optimizer, spe, env.rank, base_lrs, self.logger.info)
        frozen, step_count = self.freeze.frozen_tables, lambda: self.progress.step  # type: ignore[attr-defined]
        self.pipeline, logging = build_pipeline(cfg, model, driven, env, frozen, step_count)  # reads the one step count
        self.last_checkpoint: Optional[str] = None
        self.skipper = build_nonfinite(cfg, self.model, spe, lambda: self.last_checkpoint)
        self.validator = build_validator(cfg, self.data, model, self.pipeline, self.eval_loaders, env, decisions, self.logger)
        # Hook order: the non-finite check first (it stops before anything logs), remedies before the freeze part.
        self.parts = TrainParts([self.skipper, *remedies, self.freeze, *logging, *spec.parts(), self.validator])
        self.checkpointed = {"progress": self.progress, "metrics": self.logger, **self.parts.checkpoint_parts()}
        self.checkpointer = Checkpointer(
            self.run.checkpoints, self.model, self.optimizer, self.checkpointed, cfg.checkpoint.keep_checkpoints, self.run.job_id, log
        )
        self._wall_time_before = 0.0  # of the launches this one resumes
        self._train_start = time.perf_counter()
        describe_run(cfg, env, self.data, model, len(self.train_loader), self.run.job_id, self.logger, self.parts, spec)
        if start is not None:
            self._restore(start, changes, other_data)

    @property
    def step(self) -> int:
        """Optimizer steps done over the whole run."""
        return self.progress.step

    def _halted(self) -> bool:
        """The one place the loop decides to stop: the decisions ended the run, or --epochs or --stop_at_epoch."""
        pause = self._pause_step
        return self.validator.stopped or self.progress.epoch >= self.cfg.epochs or bool(pause and self.step >= pause)

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
            self.logger.record("eval_time_s", self.validator.evaluate.seconds)  # part of the wall time (this job's)
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

    def _steps_to_boundary(self) -> int:
        """Steps until the next mid-epoch evaluation, step checkpoint or pause (the pipeline drains there)."""
        every = self.cfg.checkpoint.checkpoint_every_n_steps if self.cfg.checkpoint.enabled else 0
        checkpoint = every - self.step % every if every else math.inf
        pause = self._pause_step - self.step if self._pause_step > self.step else math.inf
        return min(self.validator.steps_to_next(self.step), checkpoint, pause)  # type: ignore[return-value]

    def train_epoch(self, epoch: int) -> None:
        """Train epoch ``epoch`` from its data position: the batches a resumed checkpoint had not done."""
        steps = self.steps_per_epoch
        first = self.progress.batch_in_epoch if self.progress.epoch == epoch else 0
        self.progress.epoch, self.progress.batch_in_epoch = epoch, first
        self.train_loader.set_epoch(epoch, start_step=first)
        batches: Iterator[Batch] = itertools.islice(iter(self.train_loader), steps - first)
        batches = self.parts.epoch_batches(batches, epoch, first)
        show = self.env.is_main and self.cfg.metrics.progress_bar
        bar = tqdm(total=steps, initial=first, desc=f"epoch {epoch + 1}", disable=not show)
        done = first
        while done < steps and not self._halted():
            segment = min(steps - done, self._steps_to_boundary())
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
                    out: StepOutput = self.pipeline.progress(batches)
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
        tables = {t.name: t.num_embeddings for t in self.data.tables}
        config, sharding = self.spec.config_record(self.cfg), table_sharding(self.model.plan)
        state = {"config": config, "tables": tables, "sharding": sharding, IDENTITY: self.data.identity}
        path = self.checkpointer.save(self.step, state)
        self.last_checkpoint = path
        self.parts.after_save()
        self.logger.info(f"saved checkpoint {path} ({self.progress}) in {time.perf_counter() - start:.1f}s")
        return path

    def _restore(self, start: StartPoint, changes: List[str], other_data: List[str]) -> None:
        """Continue from ``start`` (a resume or a branch): the checkpointer restores it, the summary records it,
        and every part continues at the loaded step (the automatic schedule checks its best checkpoint)."""
        changes = changes + self.checkpointer.restore(start)
        record_start(start, self.progress, self.logger, other_data)
        self.last_checkpoint = start.checkpoint.path
        self._wall_time_before = self.progress.wall_time_s
        self.parts.after_load(self.progress)
        self.logger.info(start_message(start, self.progress, self.cfg, changes))
