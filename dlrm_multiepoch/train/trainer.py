"""The training loop: data -> batch -> sharded model -> pipeline -> optimizer -> evaluator -> logger."""

import itertools
import math
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import torch
from torch.distributed.checkpoint.stateful import Stateful
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
from torchrec.optim.keyed import CombinedOptimizer
from tqdm import tqdm

from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.auto import AUTO, AutoFreezeSchedule
from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.distributed import DistEnv
from dlrm_multiepoch.models.dlrm import ModelOutput
from dlrm_multiepoch.models.factory import build_model
from dlrm_multiepoch.pipeline import SemiSyncTrainPipeline, make_train_pipeline
from dlrm_multiepoch.train.auto_run import AutoRun
from dlrm_multiepoch.train.build import (
    TRAIN_SAMPLE,
    VAL,
    Freeze,
    add_train_sample,
    build_freeze,
    build_loader,
    check_resumable,
    check_splits,
    evaluated_splits,
    load_data,
)
from dlrm_multiepoch.train.checkpoint import Checkpointer, check_compatible, table_sharding
from dlrm_multiepoch.train.config import TrainConfig
from dlrm_multiepoch.train.evaluate import ALL_ROWS, TaskMetrics, evaluate_slices, undefined_metrics
from dlrm_multiepoch.train.metrics_logger import MetricsLogger, format_metrics, metric_scalars
from dlrm_multiepoch.train.nonfinite import (
    NonFiniteLossError,
    SkipNonFiniteBatches,
    finite_mean,
    first_nonfinite_step,
)
from dlrm_multiepoch.train.pretrained import load_pretrained_tables
from dlrm_multiepoch.train.progress import TrainProgress
from dlrm_multiepoch.train.remedies import Remedies, table_base_lrs
from dlrm_multiepoch.train.run_folder import RunFolder, open_run_folder
from dlrm_multiepoch.train.start_point import find_branch_point, resume_run, start_branch
from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, shard_model


class Trainer:
    """Builds every part of a run from a :class:`TrainConfig` and trains it.

    Attributes list the swappable parts; each is built by one function so later
    features (freeze schedules, other pipelines) replace one attribute. Parts with
    state beyond the model and optimizer are listed in ``checkpointed`` (name ->
    ``Stateful``): the :class:`Checkpointer` saves and restores every entry, so a
    feature registers its state there before the trainer resumes.

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
    remedies: Remedies  # table LR schedule, FALR, re-initialisation, accumulation, id dropout
    pipeline: TrainPipelineSparseDist
    logger: MetricsLogger
    run: RunFolder
    progress: TrainProgress
    checkpointed: Dict[str, Stateful]
    checkpointer: Checkpointer

    def __init__(self, cfg: TrainConfig, env: DistEnv, data: Optional[InteractionData] = None) -> None:
        self.cfg = cfg
        self.env = env
        cfg.validate(world_size=env.world_size)
        cfg.check_paths()
        log = print if env.is_main else lambda _: None
        # Found, verified and checked before the data is parsed: a wrong --resume fails in seconds.
        self.run = open_run_folder(cfg, log)
        self.resume_from = self.run.resume_from
        if self.resume_from is not None:
            check_resumable(self.resume_from, cfg, env.world_size)
        self.start_from = find_branch_point(cfg, self.run, env.world_size, log)  # --start_from: another run's state
        torch.manual_seed(cfg.seed)
        if data is None:
            self.data = load_data(cfg, env)
        else:
            self.data = data
            add_train_sample(data, cfg)
        check_splits(self.data)
        if cfg.freeze_schedule.strip() == AUTO and VAL not in self.data.splits:
            raise ValueError(f"--freeze_schedule auto needs a '{VAL}' split; dataset {self.data.name!r} has none")
        if self.start_from is not None:
            changes = check_compatible(self.start_from, cfg.to_dict(), self.data.tables, flag="--start_from")
        else:
            changes = check_compatible(self.resume_from, cfg.to_dict(), self.data.tables) if self.resume_from else []
        self.train_loader = build_loader(cfg, self.data, "train", env, shuffle=True)
        self.eval_loaders = {
            split: build_loader(cfg, self.data, split, env) for split in evaluated_splits(self.data)
        }
        # On resume, TensorBoard hides what the interrupted job logged after the checkpoint.
        self.logger = MetricsLogger(self.run.path, enabled=env.is_main, purge_step=self.run.purge_step)
        base_lrs = table_base_lrs(cfg, self.data)
        model = build_model(self.data, cfg.model, env.device)
        apply_embedding_optimizer(model, cfg.optim.embedding_optimizer, cfg.optim.base_table_lr(), base_lrs)
        self.model = shard_model(model, env, cfg.sharding_type_list, static_graph=cfg.optim.grad_accum_steps == 1)
        if cfg.pretrained_tables and self.resume_from is None and self.start_from is None:  # the checkpoint has them
            options = cfg.data.cache_options()
            load_pretrained_tables(self.model, cfg.pretrained_tables, self.logger.info, data_options=options)
        self.optimizer = build_optimizer(self.model, cfg.optim.learning_rate)
        self.freeze = build_freeze(cfg, self.model, self.optimizer, self.steps_per_epoch, self.data.tasks)
        self.auto_run = (
            AutoRun(self.freeze, self.run.checkpoints, self.model, self.optimizer, self.logger)
            if isinstance(self.freeze, AutoFreezeSchedule)
            else None
        )
        self.remedies = Remedies.build(cfg, self.data, self.model, self.optimizer, self.steps_per_epoch, env.rank, base_lrs)
        self.pipeline = make_train_pipeline(
            cfg.pipeline,
            self.model,
            self.remedies.pipeline_optimizer(self.optimizer),
            env.device,
            warmup_batches=cfg.pipeline_warmup_batches,
            frozen_tables=self.freeze.frozen_tables if self.freeze is not None else None,
            staleness_interval=cfg.pipeline_staleness_interval,
        )
        self.skipper = SkipNonFiniteBatches(self.model.module) if cfg.skip_nonfinite_batches else None
        self.progress = TrainProgress()
        self.checkpointed = {"progress": self.progress, "metrics": self.logger, **self.remedies.checkpoint_parts()}
        if self.freeze is not None:
            self.checkpointed["freeze"] = self.freeze
        self.checkpointer = Checkpointer(
            self.run.checkpoints, self.model, self.optimizer, self.checkpointed, cfg.keep_checkpoints, self.run.job_id, log
        )
        self.last_checkpoint: Optional[str] = None
        self._warned: Set[Tuple[str, str]] = set()
        self._wall_time_before = 0.0  # of the launches this one resumes
        self._eval_seconds = 0.0  # of this job, in evaluation passes
        self._train_start = time.perf_counter()
        self._log_build()
        if self.resume_from is not None:
            resume_run(self, self.resume_from, changes)
        elif self.start_from is not None:
            start_branch(self, self.start_from, changes)

    @property
    def step(self) -> int:
        """Optimizer steps done over the whole run."""
        return self.progress.step

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
        self.logger.record("job_id", self.run.job_id)
        self.logger.record("encoding", self.data.encoding)
        self.logger.text("config", f"```\n{self.cfg.to_dict()}\n```")
        self.remedies.describe(self.model, self.logger.info, self.logger.record)

    # -- training ---------------------------------------------------------------

    def train(self) -> Dict[str, Any]:
        """Train what is left of ``cfg.epochs`` (up to ``--stop_at_epoch``, a pause), evaluating and checkpointing
        as configured; return the summary."""
        self._train_start = time.perf_counter()
        if self.progress.epoch >= self.cfg.epochs:
            self.logger.info(f"nothing left to train: {self.progress.epoch} of {self.cfg.epochs} epochs are done")
        end = min(self.cfg.epochs, math.ceil(self.pause_step / self.steps_per_epoch) or self.cfg.epochs)
        while self.progress.epoch < end and not self.stopped and (self.step < self.pause_step or not self.pause_step):
            self.run_epoch(self.progress.epoch)
        if self.progress.epoch < self.cfg.epochs and not self.stopped:
            # Paused by --stop_at_epoch: the run is not over, so no end-of-run records.
            at = self.step / self.steps_per_epoch
            self.logger.info(f"paused after epoch {at:g} of {self.cfg.epochs} (--stop_at_epoch); --resume auto continues")
        else:
            if self.auto_run is not None:
                self.auto_run.end_on_best(self.step, self.steps_per_epoch, lambda: self._eval_pass(list(self.eval_loaders)))
            self.logger.record("eval_time_s", self._eval_seconds)  # part of the wall time (this job's)
            self.logger.record("wall_time_s", self._wall_time())
        self.logger.close()
        self.run.close()  # the folder is complete: the next trainer may take it
        return self.logger.summary

    def run_epoch(self, epoch: int) -> None:
        """Re-initialise tables if ``--reinit`` says so, train (the rest of) epoch ``epoch``
        (0-based), evaluate, and save a checkpoint (unless ``--no-checkpoint``)."""
        # Only when the epoch starts here: a mid-epoch resume continues after the re-init.
        if not (self.progress.epoch == epoch and self.progress.batch_in_epoch > 0):
            tables = self.remedies.before_epoch(epoch, self.model, self.optimizer, [t.name for t in self.data.tables])
            if tables:
                self.logger.info(f"re-initialised {tables} before epoch {epoch + 1} (optimizer state zeroed)")
        self.train_epoch(epoch)
        if self.stopped or self.progress.batch_in_epoch < self.steps_per_epoch:  # mid-epoch: the auto stop or a pause
            return
        self.evaluate(epoch=epoch + 1)
        self.progress.epoch, self.progress.batch_in_epoch = epoch + 1, 0
        if self.cfg.checkpoint:
            self.save_checkpoint()

    @property
    def stopped(self) -> bool:
        """Whether the auto schedule ended the run before its budget."""
        return self.auto_run is not None and self.auto_run.stopped

    def _wall_time(self) -> float:
        return self._wall_time_before + time.perf_counter() - self._train_start

    # -- checkpoints ------------------------------------------------------------

    def save_checkpoint(self) -> str:
        """Save the whole training state to ``<run_dir>/checkpoints/step_<step>`` (collective)."""
        start = time.perf_counter()
        self.progress.wall_time_s = self._wall_time()
        if self.skipper is not None:
            self.progress.skipped_nonfinite = self.skipper.skipped
        state = {
            "config": self.cfg.to_dict(),
            "tables": {t.name: t.num_embeddings for t in self.data.tables},
            "sharding": table_sharding(self.model.plan),
        }
        path = self.checkpointer.save(self.step, state)
        self.last_checkpoint = path
        if self.auto_run is not None:
            self.auto_run.after_epoch_checkpoint()
        self.logger.info(f"saved checkpoint {path} ({self.progress}) in {time.perf_counter() - start:.1f}s")
        return path

    def after_load(self, checkpoint: str) -> None:
        """Set what follows from the loaded progress (a resume's or a branch's): wall time, skip count, warm-up."""
        self.last_checkpoint = checkpoint
        self._wall_time_before = self.progress.wall_time_s
        if self.skipper is not None:
            self.skipper.skipped = self.progress.skipped_nonfinite
        if isinstance(self.pipeline, SemiSyncTrainPipeline):
            # Its warm-up counts training batches across epochs, from construction.
            self.pipeline.train_steps = self.step

    @property
    def steps_per_epoch(self) -> int:
        steps = len(self.train_loader)
        return min(steps, self.cfg.limit_train_batches) if self.cfg.limit_train_batches else steps

    @property
    def pause_step(self) -> int:
        """The step ``--stop_at_epoch`` pauses at, ``round(X * steps per epoch)`` (0: no pause)."""
        return math.floor(self.cfg.stop_at_epoch * self.steps_per_epoch + 0.5)

    def _steps_to_boundary(self) -> int:
        """Steps until the next mid-epoch evaluation, step checkpoint or pause (the pipeline drains there).

        Evaluations: all splits every ``--eval_every_n_steps``, the val split at the auto
        schedule's cadence.
        """
        periods = [self.cfg.eval_every_n_steps, self.auto_run.eval_every_n_steps if self.auto_run else 0]
        if self.cfg.checkpoint:
            periods.append(self.cfg.checkpoint_every_n_steps)
        to_pause = [self.pause_step - self.step] if self.pause_step > self.step else []
        return min([p - self.step % p for p in periods if p] + to_pause, default=math.inf)  # type: ignore[arg-type]

    def train_epoch(self, epoch: int) -> None:
        """Train epoch ``epoch`` from its data position: the batches a resumed checkpoint had not done."""
        steps = self.steps_per_epoch
        first = self.progress.batch_in_epoch if self.progress.epoch == epoch else 0
        self.progress.epoch, self.progress.batch_in_epoch = epoch, first
        self.train_loader.set_epoch(epoch, start_step=first)
        batches: Iterator[Batch] = itertools.islice(iter(self.train_loader), steps - first)
        batches = self.remedies.batches(batches, epoch, start=first)
        show = self.env.is_main and self.cfg.progress_bar
        bar = tqdm(total=steps, initial=first, desc=f"epoch {epoch + 1}", disable=not show)
        done = first
        while done < steps and not self.stopped:
            segment = min(steps - done, self._steps_to_boundary())
            self._train_segment(itertools.islice(batches, segment), epoch, bar)
            done += segment
            self.progress.batch_in_epoch = done
            if done == steps:
                break  # the epoch's evaluation and checkpoint follow in run_epoch
            if self.cfg.eval_every_n_steps and self.step % self.cfg.eval_every_n_steps == 0:
                self.evaluate(epoch=epoch + done / steps)
            elif self.auto_run is not None and self.auto_run.evaluation_due(self.step):
                self.evaluate(epoch=epoch + done / steps, splits=self._val_splits)
            if self.stopped:
                break
            if self.cfg.checkpoint and self.cfg.checkpoint_every_n_steps and self.step % self.cfg.checkpoint_every_n_steps == 0:
                self.save_checkpoint()
            if self.step == self.pause_step:
                self._pause(epoch + done / steps)
                break
        bar.close()

    def _pause(self, epoch: float) -> None:
        """A --stop_at_epoch pause inside an epoch: every split evaluated and a checkpoint, where none was already.

        The evaluation does not feed the auto schedule: a paused run decides as an unpaused one.
        """
        if not (self.cfg.eval_every_n_steps and self.step % self.cfg.eval_every_n_steps == 0):
            self.evaluate(epoch=epoch, observe=False)
        if not (self.cfg.checkpoint_every_n_steps and self.step % self.cfg.checkpoint_every_n_steps == 0):
            self.save_checkpoint()

    def _train_segment(self, batches: Iterator[Batch], epoch: int, bar: tqdm) -> None:
        self.model.train()
        window: List[ModelOutput] = []
        t0 = time.perf_counter()
        while True:
            try:
                with self.remedies.step(self.step, last_of_epoch=(self.step + 1) % self.steps_per_epoch == 0):
                    out: ModelOutput = self.pipeline.progress(batches)
            except StopIteration:
                break
            self.progress.step += 1
            if self.freeze is not None:
                self.freeze.step()
            window.append(out)
            bar.update(1)
            if len(window) == self.cfg.log_every_n_steps:
                t0 = self._log_train(window, epoch, time.perf_counter() - t0, bar)
                window = []
        if window:
            self._log_train(window, epoch, time.perf_counter() - t0, bar)

    def _check_losses(self, losses: List[torch.Tensor]) -> None:
        """Stop at a non-finite loss (all ranks together), or report the batches the skipper skipped."""
        if self.skipper is not None:
            skipped = [self.step - len(losses) + 1 + i for i, x in enumerate(losses) if not torch.isfinite(x)]
            if skipped:
                self.logger.info(
                    f"WARNING: non-finite loss at step(s) {skipped}: batches skipped, no update "
                    f"({self.skipper.skipped} skipped so far)"
                )
            return
        bad = first_nonfinite_step(losses, self.step)
        if bad is not None:
            raise NonFiniteLossError(
                f"non-finite training loss at step {bad} (epoch {self.progress.epoch + 1}); the weights after it "
                f"are not usable. Last good checkpoint: {self.last_checkpoint or 'none'}. Resume from it with "
                f"--resume PATH after lowering --learning_rate / --embedding_learning_rate or checking the data, "
                f"or pass --skip_nonfinite_batches to skip such batches"
            )

    def _log_train(self, window: List[ModelOutput], epoch: int, seconds: float, bar: tqdm) -> float:
        losses = [o.loss for o in window]
        self._check_losses(losses)
        # Local real samples times ranks: exact except in an epoch's last, padded step.
        samples = sum(float(o.weights.sum()) for o in window) * self.env.world_size
        loss = finite_mean(losses)
        values = {"train/loss": loss, "train/samples_per_sec": samples / max(seconds, 1e-9), "train/epoch": epoch}
        if self.skipper is not None:
            values["train/skipped_nonfinite_batches"] = self.skipper.skipped
        if self.freeze is not None:
            values |= {f"freeze/{group}": state for group, state in self.freeze.states().items()}
        values |= self.remedies.scalars()
        for name in window[0].losses:
            values[f"train/loss_{name}"] = finite_mean([o.losses[name] for o in window])
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

    def evaluate(self, epoch: float, splits: Optional[Sequence[str]] = None, observe: bool = True) -> Dict[str, TaskMetrics]:
        """Metrics of ``splits`` (default: every evaluated split), logged at the current step.

        With the auto schedule and ``observe``, an evaluation that covers the val split also
        feeds its decision (and only that split's metrics, plus the train sample's for a gate).
        """
        results = self._eval_pass(splits or list(self.eval_loaders))
        values = {"eval/epoch": epoch} | metric_scalars(results)
        self.logger.scalars(values, self.step)
        self.logger.evaluation({"epoch": epoch, "step": self.step, **results})
        for key, warning in undefined_metrics(results).items():
            if key not in self._warned:  # once per split and task
                self._warned.add(key)
                self.logger.info(f"WARNING: {warning}")
        self.logger.info(format_metrics(f"eval after epoch {epoch:g} (step {self.step}):", results))
        if self.auto_run is not None and observe and VAL in results:
            tables = {t.name: t.num_embeddings for t in self.data.tables}
            state = {"config": self.cfg.to_dict(), "tables": tables}
            self.auto_run.observe(results[VAL], results.get(TRAIN_SAMPLE), self.step, state)
        return results

    def _eval_pass(self, splits: Sequence[str]) -> Dict[str, TaskMetrics]:
        """Metrics per split, and per row slice of it (``test.unseen_user``, ...)."""
        start = time.perf_counter()
        self.model.eval()
        results: Dict[str, TaskMetrics] = {}
        for split in splits:
            # The train sample is seen by definition: its slices would repeat its metrics.
            slices = self.data.slices if split != TRAIN_SAMPLE else []
            per_slice = evaluate_slices(
                self.pipeline.progress, self.eval_loaders[split], self.data.tasks, self.env.device, slices
            )
            for name, metrics in per_slice.items():
                results[split if name == ALL_ROWS else f"{split}.{name}"] = metrics
        self.model.train()
        self._eval_seconds += time.perf_counter() - start
        return results

    @property
    def _val_splits(self) -> List[str]:
        return [VAL, TRAIN_SAMPLE] if self.cfg.auto.auto_gate else [VAL]
