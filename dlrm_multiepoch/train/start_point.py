"""Where a run's state comes from when it does not start fresh: its own checkpoint, or another run's.

- **Resume** (``--resume``): the run continues its own training from one of its
  checkpoints; the freeze schedule must be the one it was saved with.
- **Branch** (``--start_from CHECKPOINT_DIR``): a new run, in its own folder, starts from
  another run's ``step_N`` checkpoint: weights, fused and dense optimizer state, the
  data position and the remedies' state come from it, so the branch continues that
  training bitwise. Its freeze schedule and ``--reinit`` are its own flags (the schedule
  *suffix*), and must do what the parent did up to the checkpoint; every other setting
  must be the parent's. Its ``summary.json`` starts with the parent's evaluations up to
  the checkpoint, so its curve reads from step 0; its wall time counts its own training.
  Once the branch has saved a checkpoint, ``--resume auto`` continues from that.

Example::

    run, resume_from, start_from = open_checked_run(cfg, env.world_size, spec, log=print)   # None unless it applies
    ...  # build the trainer's parts
    start_branch(trainer, start_from, changes)
"""

from typing import Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from torch.distributed.checkpoint.stateful import Stateful
from torchrec.distributed import DistributedModelParallel
from torchrec.optim.keyed import CombinedOptimizer

from dlrm_multiepoch.auto.config import AUTO
from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.distributed import DistEnv
from dlrm_multiepoch.optim.options import ReinitSchedule
from dlrm_multiepoch.schedule import FreezeSchedule, ResolvedSchedule
from dlrm_multiepoch.train.build import check_resumable
from dlrm_multiepoch.train.checkpoint import (
    CheckpointError,
    CheckpointInfo,
    Checkpointer,
    check_sharding,
    table_sharding,
    verify_checkpoint,
)
from dlrm_multiepoch.run_files import flat_config, path_matches
from dlrm_multiepoch.train.config import TrainConfig
from dlrm_multiepoch.train.metrics_logger import MetricsLogger
from dlrm_multiepoch.train.progress import TrainProgress
from dlrm_multiepoch.train.run_folder import RunFolder, open_run_folder
from dlrm_multiepoch.train.spec import TrainSpec

START_FROM = "--start_from"
# Settings a branch may set otherwise than its parent (dotted TrainConfig.to_dict() paths;
# a trailing "." covers a section): its schedule suffix, its folder and launch, and what
# only evaluation, logging or checkpointing reads. Everything else shapes the training
# the parent did, so it must be the parent's.
SUFFIX_FIELDS = (
    "epochs", "freeze_schedule", "optim.reinit", "auto.", "run_name", "tensorboard_dir", "resume", "start_from",
    "stop_at_epoch", "overwrite", "eval_every_n_steps", "eval_batch_size", "train_eval_rows", "log_every_n_steps",
    "progress_bar", "checkpoint", "checkpoint_every_n_steps", "keep_checkpoints", "prefetch_batches",
)  # fmt: skip
# Parts a branch does not take from its parent: the schedule is its own, the summary its own.
OWN_PARTS = ("freeze", "metrics")


class BuiltRun(Protocol):
    """What resuming and branching read and set of the built :class:`~dlrm_multiepoch.train.trainer.Trainer`
    (described here, not imported: the trainer imports this module)."""

    cfg: TrainConfig
    env: DistEnv
    data: InteractionData
    model: DistributedModelParallel
    optimizer: CombinedOptimizer
    run: RunFolder
    logger: MetricsLogger
    progress: TrainProgress
    checkpointed: Dict[str, Stateful]
    checkpointer: Checkpointer
    steps_per_epoch: int

    @property
    def step(self) -> int: ...

    def after_load(self, checkpoint: str) -> None: ...


def open_checked_run(
    cfg: TrainConfig, world_size: int, spec: TrainSpec, log: Callable[[str], None]
) -> Tuple[RunFolder, Optional[CheckpointInfo], Optional[CheckpointInfo]]:
    """The config checked, the run folder locked, and the checkpoint it resumes or branches from, each verified
    (collective). Done before any data is parsed: a wrong ``--resume`` fails in seconds.

    Returns:
        ``(run folder, checkpoint to resume or None, checkpoint to branch from or None)``.
    """
    cfg.validate(world_size=world_size)
    spec.check(cfg)
    cfg.check_paths()
    run = open_run_folder(cfg, log, spec.label(cfg))
    if run.resume_from is not None:
        check_resumable(run.resume_from, cfg, world_size)
        spec.check_checkpoint(run.resume_from)
    start_from = find_branch_point(cfg, run, world_size, log)
    if start_from is not None:
        spec.check_checkpoint(start_from, START_FROM)
    return run, run.resume_from, start_from


def find_branch_point(
    cfg: TrainConfig, run: RunFolder, world_size: int, log: Callable[[str], None]
) -> Optional[CheckpointInfo]:
    """The verified checkpoint ``--start_from`` names, when this launch branches from it (collective).

    None when there is no ``--start_from`` or the run folder has a checkpoint of its own
    to resume (a branch restarted after its first checkpoint continues from its own).

    Raises:
        FileNotFoundError / CheckpointError: naming ``--start_from`` and the damaged file.
        ValueError: a best-validation checkpoint, ``--epochs`` below its position, or a
            mid-epoch position on another number of ranks or batch size.
    """
    if not cfg.checkpoint.start_from or run.resume_from is not None:
        return None
    try:
        info = verify_checkpoint(cfg.checkpoint.start_from)
    except (FileNotFoundError, CheckpointError) as e:
        raise type(e)(f"{START_FROM} {cfg.checkpoint.start_from!r}: {e}") from None
    check_resumable(info, cfg, world_size, flag=START_FROM)
    log(f"branching from {info.path} (step {info.step}) into {run.path}")
    return info


def check_branch(info: CheckpointInfo, cfg: TrainConfig, steps_per_epoch: int, tables: Sequence[str]) -> None:
    """Refuse a branch whose training up to the checkpoint would not have been its parent's.

    Args:
        info: the parent's checkpoint.
        cfg: the branch's config.
        steps_per_epoch: optimizer steps per epoch (the same for both: same data and batch).
        tables: the model's table names (for ``--reinit``).

    Raises:
        ValueError: naming the flag that differs, or the schedule group and step (or the
            table and epoch of a re-initialisation) where the two runs part before the checkpoint.

    Example::

        check_branch(info, cfg, steps_per_epoch=71, tables=["t_user", "t_item"])
    """
    parent, now = info.state["config"], cfg.to_dict()
    where = f"{START_FROM} {info.path!r}"
    flat_parent, flat_now = flat_config(parent), flat_config(now)
    for key in sorted(set(flat_parent) | set(flat_now)):
        if path_matches(key, SUFFIX_FIELDS):
            continue
        if flat_parent.get(key) != flat_now.get(key):
            flag = "--" + key.split(".")[-1]
            raise ValueError(
                f"{where}: the parent trained with {flag} {flat_parent.get(key)!r}, this run has "
                f"{flat_now.get(key)!r}; a branch continues its parent's training, so only its schedule suffix "
                "(--freeze_schedule, --reinit, --epochs) and evaluation/checkpoint settings may differ"
            )
    if parent["epochs"] != cfg.epochs and (cfg.optim.table_lr_decay != "constant" or "%" in cfg.optim.table_lr_warmup):
        raise ValueError(
            f"{where}: --epochs {parent['epochs']} -> {cfg.epochs} with a table LR schedule that follows the run's "
            f"length (--table_lr_warmup {cfg.optim.table_lr_warmup!r}, --table_lr_decay {cfg.optim.table_lr_decay!r}): "
            "the parent's steps had other learning rates; give the branch the parent's --epochs"
        )
    if parent["freeze_schedule"].strip() == AUTO or cfg.freeze.is_auto:
        raise ValueError(f"{where}: --freeze_schedule auto decides from its own history and cannot branch")
    done = info.parts["progress"]
    ours = _resolved(cfg.freeze.freeze_schedule, cfg.epochs, steps_per_epoch)
    theirs = _resolved(parent["freeze_schedule"], parent["epochs"], steps_per_epoch)
    for group in sorted(set(ours.windows) | set(theirs.windows)):
        for step in range(info.step):
            a, b = _trains(theirs, group, step), _trains(ours, group, step)
            if a != b:
                raise ValueError(
                    f"{where}: at step {step} (before the checkpoint's step {info.step}) group {group!r} "
                    f"{'trains' if a else 'is frozen'} in the parent's --freeze_schedule {parent['freeze_schedule']!r} "
                    f"but {'trains' if b else 'is frozen'} in this run's {cfg.freeze.freeze_schedule!r}: a branch may only "
                    "change the schedule from the checkpoint on"
                )
    begun = done["epoch"] + (done["batch_in_epoch"] > 0)  # epochs whose start (and re-init) the parent did
    mine = cfg.optim.reinit_schedule
    before = ReinitSchedule.parse(parent["optim"]["reinit"], parent["epochs"])
    for epoch in range(begun):
        if mine.tables_at(epoch, tables) != before.tables_at(epoch, tables):
            raise ValueError(
                f"{where}: before epoch {epoch + 1} the parent re-initialised {before.tables_at(epoch, tables)} "
                f"(--reinit {parent['optim']['reinit']!r}) and this run would re-initialise "
                f"{mine.tables_at(epoch, tables)} (--reinit {cfg.optim.reinit!r}); that epoch began before the checkpoint"
            )


def _resolved(text: str, epochs: int, steps_per_epoch: int) -> ResolvedSchedule:
    return FreezeSchedule.parse(text).resolve(steps_per_epoch, epochs)


def _trains(schedule: ResolvedSchedule, group: str, step: int) -> bool:
    return schedule.trains(group, step) if group in schedule.windows else True


def start_branch(trainer: BuiltRun, info: CheckpointInfo, changes: List[str]) -> None:
    """Load the parent's state (all but the schedule and the summary) into a built trainer.

    Collective. The freeze schedule moves to the checkpoint's step under this run's own
    schedule; the summary starts with the parent's evaluations up to that step.
    """
    check_branch(info, trainer.cfg, trainer.steps_per_epoch, [t.name for t in trainer.data.tables])
    changes = changes + check_sharding(info, table_sharding(trainer.model.plan), flag=START_FROM)
    parts = {name: part for name, part in trainer.checkpointed.items() if name not in OWN_PARTS}
    # The parts (the freeze schedule among them) move to the checkpoint's step in after_load.
    Checkpointer(trainer.run.checkpoints, trainer.model, trainer.optimizer, parts).load(info)
    parent_wall_time = trainer.progress.wall_time_s
    trainer.progress.wall_time_s = 0.0  # this run's cost is its own training
    evaluations = [e for e in info.parts["metrics"].get("evaluations", []) if e["step"] <= info.step]
    trainer.logger.restore({"evaluations": evaluations})
    branch = {"path": info.path, "step": info.step, "epoch": trainer.progress.epoch, "batch": trainer.progress.batch_in_epoch}
    trainer.logger.record("started_from", branch | {"parent_wall_time_s": parent_wall_time})
    trainer.after_load(info.path)
    trainer.logger.info(
        f"started from {info.path} at {trainer.progress} with --freeze_schedule {trainer.cfg.freeze.freeze_schedule!r}; "
        f"training to epoch {trainer.cfg.epochs}" + "".join(f"\n  changed since the checkpoint: {c}" for c in changes)
    )


def resume_run(trainer: BuiltRun, info: CheckpointInfo, changes: List[str]) -> None:
    """Load ``info``'s state into the built trainer's parts; training continues at its data position."""
    saved_freeze = info.parts.get("freeze")
    # Compared in normalised form ("delayed" == its expansion, "auto"); None: every group trains.
    saved_schedule = saved_freeze["schedule"] if saved_freeze is not None else None
    freeze = trainer.checkpointed.get("freeze")
    if saved_schedule != (freeze.source.describe() if freeze is not None else None):
        raise ValueError(
            f"--resume {info.path!r}: the checkpoint was trained with --freeze_schedule "
            f"{info.state['config']['freeze_schedule']!r}, this run has {trainer.cfg.freeze.freeze_schedule!r}"
        )
    changes = changes + check_sharding(info, table_sharding(trainer.model.plan))
    trainer.checkpointer.load(info)
    trainer.after_load(info.path)  # the parts continue at the loaded step (the auto schedule checks its best)
    progress = trainer.progress
    resumed = {"path": info.path, "step": trainer.step, "epoch": progress.epoch, "batch": progress.batch_in_epoch}
    trainer.logger.record("resumed_from", trainer.logger.summary.get("resumed_from", []) + [resumed])
    if info.state["world_size"] != trainer.env.world_size:
        resharded = f"world size {info.state['world_size']} -> {trainer.env.world_size} (tables and optimizer state resharded)"
        changes = changes + [resharded]
    trainer.logger.info(
        f"resumed from {info.path} at {trainer.progress}; training to epoch {trainer.cfg.epochs}"
        + "".join(f"\n  changed since the checkpoint: {change}" for change in changes)
    )

