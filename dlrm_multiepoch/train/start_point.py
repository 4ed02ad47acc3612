"""Where a run's state comes from when it does not start fresh: its own checkpoint, or another run's.

- **Resume** (``--resume``): the run continues its own training from one of its
  checkpoints; the freeze schedule must be the one it was saved with.
- **Branch** (``--start_from CHECKPOINT_DIR``): a new run, in its own folder, starts from
  another run's ``step_N`` checkpoint: weights, fused and dense optimizer state, the
  data position and the remedies' state come from it, so the branch continues that
  training bitwise. Its freeze schedule and ``--reinit`` are its own flags (the schedule
  *suffix*), and must do what the parent did up to the checkpoint; every other setting
  must be the parent's, but where its data lives (``--data_path``). Its ``summary.json`` starts with the parent's evaluations up to
  the checkpoint, so its curve reads from step 0; its wall time counts its own training.
  Once the branch has saved a checkpoint, ``--resume auto`` continues from that.
- **Data**: a resume continues on the data its checkpoint was trained on (each source file's
  content and the encoding flags, :mod:`~dlrm_multiepoch.data.identity`), or is refused
  before any row is parsed; a branch onto other data is a fine-tuning, said and recorded.

Both are one :class:`~dlrm_multiepoch.train.checkpoint.StartPoint`, chosen as torchtitan's
``CheckpointManager`` chooses (the run's own checkpoint if it has one, else the initial
one, less the parts excluded from loading), checked here against the config (the
parsed schedule sections, never their text again), then loaded by the checkpointer's one
:meth:`~dlrm_multiepoch.train.checkpoint.Checkpointer.restore`.

Example::

    run, start = open_checked_run(cfg, env.world_size, spec, log=print)   # start: None for a fresh run
    other_data = check_start_data(start, cfg, env, None, log)             # before any row is parsed
    changes = check_start(start, cfg, spec.config_record(cfg), data.tables, steps_per_epoch)
    ...  # build the trainer's parts and its checkpointer
    changes += checkpointer.restore(start)
    record_start(start, progress, logger, other_data)
"""

from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

from dlrm_multiepoch.auto.config import AUTO
from dlrm_multiepoch.config_section import BRANCH_MAY_CHANGE
from dlrm_multiepoch.data.dataset import InteractionData, TableSpec
from dlrm_multiepoch.data.identity import IDENTITY, data_identity, identity_changes
from dlrm_multiepoch.distributed import DistEnv
from dlrm_multiepoch.optim.options import ReinitSchedule
from dlrm_multiepoch.run_files import flat_config, path_matches
from dlrm_multiepoch.schedule import FreezeSchedule, ResolvedSchedule
from dlrm_multiepoch.train.build import check_resumable, data_errors
from dlrm_multiepoch.train.checkpoint import (
    START_FROM,
    CheckpointError,
    CheckpointInfo,
    StartPoint,
    check_compatible,
    verify_checkpoint,
)
from dlrm_multiepoch.train.config import TrainConfig, record_paths
from dlrm_multiepoch.train.metrics_logger import MetricsLogger
from dlrm_multiepoch.train.progress import TrainProgress
from dlrm_multiepoch.train.run_folder import RunFolder, open_run_folder
from dlrm_multiepoch.train.spec import TrainSpec

# Settings a branch may set otherwise than its parent (dotted TrainConfig.to_dict() paths;
# a trailing "." covers a section: the fields with the BRANCH_MAY_CHANGE role): its schedule suffix, its
# folder and launch, and what only evaluation, logging or checkpointing reads. Everything
# else shapes the training the parent did, so it must be the parent's.
SUFFIX_FIELDS = record_paths(BRANCH_MAY_CHANGE)
# Parts a branch does not take from its parent (its exclude_from_loading): the schedule is its own, the summary its own.
OWN_PARTS = ("freeze", "metrics")


def open_checked_run(
    cfg: TrainConfig, world_size: int, spec: TrainSpec, log: Callable[[str], None]
) -> Tuple[RunFolder, Optional[StartPoint]]:
    """The config checked, the run folder locked, and the checkpoint it resumes or branches from, verified and
    checked against the config where the data is not needed (collective). Done before any data is parsed: a wrong
    ``--resume`` fails in seconds.

    Returns:
        ``(run folder, where it starts: its own checkpoint, --start_from's, or None for a fresh start)``.
    """
    cfg.validate(world_size=world_size)
    spec.check(cfg)
    cfg.check_paths()
    run = open_run_folder(cfg, log, spec.label(cfg))
    if run.resume_from is not None:
        check_resumable(run.resume_from, cfg, world_size)
        spec.check_checkpoint(run.resume_from)
        check_same_schedule(run.resume_from, cfg)
    start = StartPoint.choose(run.resume_from, find_branch_point(cfg, run, world_size, log), OWN_PARTS)
    if start is not None and start.is_branch:
        spec.check_checkpoint(start.checkpoint, START_FROM)
    return run, start


def check_same_schedule(info: CheckpointInfo, cfg: TrainConfig) -> None:
    """Refuse to resume a checkpoint trained with another freeze schedule.

    Compared in the form the freeze part saves (``delayed`` equals its expansion; ``auto``;
    none for ``joint``), from the config's parsed schedule.

    Raises:
        ValueError: naming ``--resume``, both schedules as given.
    """
    saved_freeze = info.parts.get("freeze")
    saved_schedule = saved_freeze["schedule"] if saved_freeze is not None else None
    if saved_schedule != cfg.freeze.saved_schedule:
        raise ValueError(
            f"--resume {info.path!r}: the checkpoint was trained with --freeze_schedule "
            f"{info.state['config']['freeze_schedule']!r}, this run has {cfg.freeze.freeze_schedule!r}"
        )


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


def check_same_data(start: StartPoint, identity: Mapping[str, Any], log: Callable[[str], None]) -> List[str]:
    """Refuse a resume onto other data than its checkpoint was trained on; a branch onto other data is a
    fine-tuning: said, and its changes returned (for the summary). Checked before any row is parsed.

    Args:
        start: where the run starts.
        identity: this run's data (:func:`~dlrm_multiepoch.data.identity.data_identity`; empty: unknown).
        log: rank-0 logger.

    Raises:
        ValueError: a resume whose checkpoint recorded other data, naming the file and what changed.
    """
    recorded = start.checkpoint.state.get(IDENTITY)
    changes = identity_changes(recorded, identity) if isinstance(recorded, Mapping) and identity else []
    path = start.checkpoint.path
    if changes and not start.is_branch:
        raise ValueError(
            f"--resume {path!r}: the checkpoint was trained on other data: {'; '.join(changes)}. A run continues on "
            "the data it started on: to train on the new data, start a new run (another --run_name; for a sweep or "
            f"search, a new experiment folder); to fine-tune this checkpoint on it, start a new run with "
            f"--start_from {path}"
        )
    if changes:
        log(f"{START_FROM} {path}: fine-tuning on other data than the checkpoint's: {'; '.join(changes)}")
    return changes


def check_start_data(
    start: StartPoint, cfg: TrainConfig, env: DistEnv, data: Optional[InteractionData], log: Callable[[str], None]
) -> List[str]:
    """:func:`check_same_data` on this run's data: ``data``'s identity, else that of ``cfg.data``'s files (before
    any row is parsed; an error reading them is marked as the data's, :func:`~dlrm_multiepoch.train.build.data_errors`)."""
    with data_errors(env):
        identity = data.identity if data is not None else data_identity(cfg.data)
    return check_same_data(start, identity, log)


def check_start(
    start: StartPoint, cfg: TrainConfig, config: Mapping[str, Any], tables: Sequence[TableSpec], steps_per_epoch: int
) -> List[str]:
    """Refuse a checkpoint whose shapes differ from this run's, or (a branch) whose training up to it would not
    have been the parent's; list the other changed settings, for the log.

    Args:
        start: where the run starts.
        cfg: the run's validated config.
        config: its record (``TrainSpec.config_record``), as checkpoints save it.
        tables: the run's embedding tables.
        steps_per_epoch: optimizer steps per epoch.
    """
    changes = check_compatible(start.checkpoint, config, tables, flag=start.flag)
    if start.is_branch:
        check_branch(start.checkpoint, cfg, steps_per_epoch, [t.name for t in tables])
    return changes


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
    assert cfg.freeze.schedule is not None, "check_branch reads the validated config's parsed schedule"
    ours = cfg.freeze.schedule.resolve(steps_per_epoch, cfg.epochs)
    # The parent's schedule comes as text in its checkpoint's config record.
    theirs = FreezeSchedule.parse(parent["freeze_schedule"]).resolve(steps_per_epoch, parent["epochs"])
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


def _trains(schedule: ResolvedSchedule, group: str, step: int) -> bool:
    return schedule.trains(group, step) if group in schedule.windows else True


def record_start(
    start: StartPoint, progress: TrainProgress, logger: MetricsLogger, other_data: Sequence[str] = ()
) -> None:
    """Record in the summary where the loaded run continues from: a resume appends to ``resumed_from`` (one entry
    per launch); a branch records ``started_from`` (with its parent's wall time), starts its summary with the
    parent's evaluations up to the checkpoint and counts its own wall time from zero.

    Args:
        start: the checkpoint just restored.
        progress: the restored position.
        logger: the run's summary (a branch's holds nothing of the parent's: its part was not loaded).
        other_data: how a branch's data differs from its parent's (:func:`check_same_data`: a fine-tuning).
    """
    info = start.checkpoint
    where = {"path": info.path, "step": info.step, "epoch": progress.epoch, "batch": progress.batch_in_epoch}
    if not start.is_branch:
        logger.record("resumed_from", logger.summary.get("resumed_from", []) + [where])
        return
    parent_wall_time, progress.wall_time_s = progress.wall_time_s, 0.0  # this run's cost is its own training
    inherited = [e for e in info.parts["metrics"].get("evaluations", []) if e["step"] <= info.step]
    fine_tuning = {"other_data": list(other_data)} if other_data else {}
    started = where | {"parent_wall_time_s": parent_wall_time} | fine_tuning
    # One write: a reader never sees the parent's evaluations without where they stop (the sweep's console follower).
    logger.restore({"evaluations": inherited, "started_from": started})


def start_message(start: StartPoint, progress: TrainProgress, cfg: TrainConfig, changes: Sequence[str]) -> str:
    """The console line of a resume or a branch: where, with what schedule, to which epoch, and what changed."""
    if start.is_branch:
        how = f"started from {start.checkpoint.path} at {progress} with --freeze_schedule {cfg.freeze.freeze_schedule!r}"
    else:
        how = f"resumed from {start.checkpoint.path} at {progress}"
    return f"{how}; training to epoch {cfg.epochs}" + "".join(f"\n  changed since the checkpoint: {c}" for c in changes)
