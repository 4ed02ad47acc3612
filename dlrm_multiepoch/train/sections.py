"""The training app's own config sections (torch-free): loader, pipeline, freeze, remedies,
checkpoint and metrics. Each field is the ``--flag`` of its name (or of ``metadata["flag"]``);
each ``validate()`` checks its flags, naming them, and parses text flags once into the
:func:`~dlrm_multiepoch.config_section.parsed` fields the builders read.

Example::

    pipeline = PipelineConfig(sharding_types="table_wise,row_wise")
    pipeline.validate()
    pipeline.sharding_type_list          # ("table_wise", "row_wise")
"""

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Optional, Tuple

from dlrm_multiepoch.auto.config import AUTO
from dlrm_multiepoch.config_section import (
    BOOKKEEPING,
    BRANCH_MAY_CHANGE,
    IGNORED_BY_PRETRAINING,
    RERUN_MAY_CHANGE,
    RESERVED_BY_SEARCH,
    RESERVED_BY_SWEEP,
    STARTS_OR_PAUSES,
    SWEEP_SEARCH_COMPONENT,
    TRAIN_COMPONENT,
    VARIES_PER_LAUNCH,
    option,
    parsed,
)
from dlrm_multiepoch.names import PIPELINES, SHARDING_TYPES, check_name
from dlrm_multiepoch.schedule import FreezeSchedule
from dlrm_multiepoch.table_values import TableValues


def _at_least(section: Any, names: Tuple[str, ...], low: int, expected: str) -> None:
    for name in names:
        if getattr(section, name) < low:
            raise ValueError(f"--{name} must be {expected}, got {getattr(section, name)}")


@dataclass
class LoaderConfig:
    """Batches: sizes, the train shuffle, the background prefetch, and a cap on steps per epoch."""

    batch_size: int = option(1024, "global batch size (summed over ranks)", roles=(TRAIN_COMPONENT, SWEEP_SEARCH_COMPONENT))
    eval_batch_size: int = option(4096, "global batch size for evaluation", roles=(BRANCH_MAY_CHANGE, IGNORED_BY_PRETRAINING))
    shuffle_block_rows: int = option(
        4096, "train shuffle: rows of consecutive blocks whose order is permuted each epoch",
    )
    shuffle_buffer_rows: int = option(
        1 << 18, "train shuffle: rows each rank reads and shuffles together (its memory: this many rows)",
    )
    prefetch_batches: int = option(
        2, "batches a background thread prepares ahead of training (0: none)",
        roles=(BRANCH_MAY_CHANGE,),
    )
    limit_train_batches: int = option(0, "stop each epoch after N steps (0: no limit)")

    def validate(self, world_size: int = 1) -> None:
        """Sizes positive and divisible by ``world_size``; counts non-negative."""
        _at_least(self, ("batch_size", "eval_batch_size", "shuffle_block_rows", "shuffle_buffer_rows"), 1, "a positive integer")
        for name in ("batch_size", "eval_batch_size"):
            if getattr(self, name) % world_size:
                raise ValueError(
                    f"--{name} {getattr(self, name)} must be a multiple of the world size {world_size} "
                    f"(each rank takes an equal share of a global batch)"
                )
        _at_least(self, ("limit_train_batches", "prefetch_batches"), 0, ">= 0")


@dataclass
class PipelineConfig:
    """How a step runs: the train pipeline, the sharding the planner may use, non-finite batches."""

    name: str = option(
        "sparse_dist",
        "train pipeline: sparse_dist (TorchRec's, synchronous), semi_sync (ours: next batch's lookup "
        "overlaps this batch's backward, staleness 1), torchrec_semi_sync (TorchRec's, CUDA only)",
        flags=("--pipeline",), roles=(TRAIN_COMPONENT, SWEEP_SEARCH_COMPONENT),
    )
    pipeline_warmup_batches: int = option(0, "synchronous batches before a semi-sync pipeline starts overlapping")
    pipeline_staleness_interval: int = option(
        20, "semi_sync: measure the stale-row fraction on one step in N, from step 1 (1: every step, exact)",
    )
    sharding_types: str = option(
        "table_wise,row_wise,column_wise",
        "sharding types the planner may use (add data_parallel to allow replicated tables)",
    )
    skip_nonfinite_batches: bool = option(
        False,
        "skip a batch whose loss is NaN/inf on any rank (no update; counted in the log) instead of "
        "stopping the run; costs one host sync and one all-reduce per step",
    )
    sharding_type_list: Tuple[str, ...] = parsed()  # --sharding_types

    def validate(self) -> None:
        check_name("--pipeline", self.name, PIPELINES)
        _at_least(self, ("pipeline_warmup_batches",), 0, ">= 0")
        _at_least(self, ("pipeline_staleness_interval",), 1, ">= 1")
        types = tuple(s for s in self.sharding_types.split(",") if s)
        if not types or set(types) - set(SHARDING_TYPES):
            raise ValueError(
                f"--sharding_types {self.sharding_types!r}: expected a comma-separated subset of "
                f"{', '.join(SHARDING_TYPES)}"
            )
        self.sharding_type_list = types


@dataclass
class FreezeConfig:
    """Which parameter groups train when, and the tables a run starts from."""

    freeze_schedule: str = option(
        "joint",
        "which parameter groups train when: a preset (joint, delayed, early, frozen), e.g. "
        "'tables=frozen@[0,1) train@[1,end); module:over_arch.*=frozen; gate:feature_cross=closed@[1,2)', "
        "or 'auto': decided from the validation split (needs --val_fraction; knobs --auto_*)",
        roles=(TRAIN_COMPONENT, RESERVED_BY_SEARCH, BRANCH_MAY_CHANGE, IGNORED_BY_PRETRAINING),
    )
    pretrained_tables: str = option(
        "",
        "checkpoint folder of pre-trained tables (python -m dlrm_multiepoch.pretrain) to start from; "
        "empty: fresh",
        roles=(TRAIN_COMPONENT, SWEEP_SEARCH_COMPONENT, IGNORED_BY_PRETRAINING),
    )
    schedule: Optional[FreezeSchedule] = parsed()  # --freeze_schedule; None for 'auto'

    @property
    def is_auto(self) -> bool:
        """``--freeze_schedule auto``: the automatic schedule (:mod:`dlrm_multiepoch.auto`)."""
        return self.freeze_schedule.strip() == AUTO

    @property
    def is_joint(self) -> bool:
        """``--freeze_schedule joint`` as given: everything trains every step, and no freeze part is built."""
        return self.freeze_schedule == "joint"

    @property
    def saved_schedule(self) -> Optional[str]:
        """The schedule as this run's checkpoints save it (the freeze part's ``schedule``), from the parsed field:
        ``auto``, the parsed schedule's normal form (``delayed`` saves its expansion), None for ``joint`` (no part)."""
        if self.is_joint:
            return None
        return AUTO if self.is_auto else str(self.schedule)

    def validate(self, epochs: int) -> None:
        if self.is_auto:
            self.schedule = None
            return
        if AUTO in (e.strip() for e in self.freeze_schedule.split(";")):
            raise ValueError(
                f"--freeze_schedule {self.freeze_schedule!r}: 'auto' stands alone (the policy owns the tables; "
                "--auto_gate names a gate it may close)"
            )
        self.schedule = check_freeze_schedule(self.freeze_schedule, epochs)


def check_freeze_schedule(text: str, epochs: int) -> FreezeSchedule:
    """``--freeze_schedule`` parsed and checked against ``--epochs`` before the data gives the steps per epoch.

    Windows whose bounds are epochs, percentages or ``end`` are checked here, in
    epochs; windows with step bounds (``300step``) wait for the real run length, which
    the trainer checks before training.
    """
    if not text.strip():
        raise ValueError("--freeze_schedule is empty; use 'joint' to train everything every step")
    try:
        schedule = FreezeSchedule.parse(text)
    except ValueError as e:
        raise ValueError(f"--freeze_schedule: {e}") from None

    def in_epochs(bound: Any) -> Optional[Fraction]:
        # An epoch is one "step" here; step-unit bounds wait for the real steps per epoch.
        return None if bound.unit == "step" else bound.to_step(steps_per_epoch=1, total_steps=epochs)

    for group, windows in schedule.groups.items():
        for w in windows:
            start, end = in_epochs(w.start), in_epochs(w.end)
            where = f"--freeze_schedule: group {group!r} window {w.format(group)}"
            if start is not None and end is not None and start >= end:
                raise ValueError(f"{where} is empty or inverted: epochs [{float(start):g}, {float(end):g})")
            for value in (start, end):
                if value is not None and not 0 <= value <= epochs:
                    raise ValueError(f"{where} reaches epoch {float(value):g}, outside the run's --epochs {epochs}")
    if not any(b.unit == "step" for ws in schedule.groups.values() for w in ws for b in (w.start, w.end)):
        try:  # overlaps; no bound depends on the steps per epoch, so any positive count gives the same answer
            schedule.resolve(steps_per_epoch=100 * 100, num_epochs=epochs)
        except ValueError as e:
            raise ValueError(f"--freeze_schedule: {e}") from None
    return schedule


@dataclass
class RemedyConfig:
    """Train-time id dropout (the table-LR, FALR, re-initialisation and accumulation remedies are
    flags of the optimizer section, where run records keep them)."""

    id_dropout: str = option(
        "",
        "during training, look up this seeded fraction of ids as the unknown row 0, so it trains: "
        "'0.02' (every table) or '0.02,t_age=0' (per table); empty: off",
        roles=(IGNORED_BY_PRETRAINING,),
    )
    id_dropout_values: TableValues[float] = parsed()  # --id_dropout

    def validate(self) -> None:
        self.id_dropout_values = TableValues.parse(
            self.id_dropout, "--id_dropout", float, default=0.0, check=lambda p: 0.0 <= p < 1.0, expected="must be in [0, 1)"
        )


@dataclass
class CheckpointConfig:
    """When the training state is saved, and which checkpoint a run starts from."""

    enabled: bool = option(
        True,
        "save the training state to <run folder>/checkpoints/step_N after each epoch's evaluation "
        "(and every --checkpoint_every_n_steps)",
        flags=("--checkpoint", "--no-checkpoint"), roles=(RESERVED_BY_SEARCH, BRANCH_MAY_CHANGE, BOOKKEEPING),
    )
    checkpoint_every_n_steps: int = option(
        0,
        "also checkpoint every N train steps, with the data position, so a resume continues mid-epoch "
        "(0: after each epoch only)",
        roles=(RESERVED_BY_SEARCH, BRANCH_MAY_CHANGE, BOOKKEEPING),
    )
    keep_checkpoints: int = option(
        2, "complete checkpoints to keep (older ones are deleted; protected ones stay)",
        roles=(RESERVED_BY_SEARCH, VARIES_PER_LAUNCH, BRANCH_MAY_CHANGE, BOOKKEEPING),
    )
    resume: str = option(
        "",
        "empty: start fresh; 'auto': resume from this run folder's newest intact checkpoint if one "
        "exists (needs --run_name); or a checkpoint folder (e.g. runs/NAME/checkpoints/step_240). A restart "
        "of the same torchrun/TorchX job always resumes from its own newest checkpoint",
        roles=(TRAIN_COMPONENT, RESERVED_BY_SWEEP, RERUN_MAY_CHANGE, BRANCH_MAY_CHANGE, STARTS_OR_PAUSES, BOOKKEEPING),
    )
    start_from: str = option(
        "",
        "start this run (a new run folder) from another run's step_N checkpoint: weights, optimizer "
        "state and data position; the freeze schedule and remedies are this run's own flags and must agree "
        "with what that run did up to the checkpoint (a schedule branch). With --resume auto, the run's own "
        "newest checkpoint wins once it has one",
        roles=(RESERVED_BY_SEARCH, VARIES_PER_LAUNCH, BRANCH_MAY_CHANGE, IGNORED_BY_PRETRAINING, STARTS_OR_PAUSES),
    )
    stop_at_epoch: float = option(
        0.0,
        "pause after this many epochs of the --epochs schedule (checkpoint saved, no final records); a "
        "later launch with --resume auto continues (0: train to --epochs). A fraction pauses inside an epoch, "
        "at step round(X * steps per epoch), with an evaluation of every split and a checkpoint there",
        roles=(RERUN_MAY_CHANGE, RESERVED_BY_SEARCH, VARIES_PER_LAUNCH, BRANCH_MAY_CHANGE, STARTS_OR_PAUSES),
    )
    overwrite: bool = option(
        False,
        "let a fresh start delete the checkpoints and summary.json an earlier run left in this run "
        "folder (without it, such a start is refused)",
        roles=(RERUN_MAY_CHANGE, BRANCH_MAY_CHANGE, STARTS_OR_PAUSES, BOOKKEEPING),
    )

    def validate(self, epochs: int) -> None:
        if self.checkpoint_every_n_steps < 0:
            raise ValueError(f"--checkpoint_every_n_steps must be >= 0 (0: per epoch only), got {self.checkpoint_every_n_steps}")
        if self.keep_checkpoints < 1:
            raise ValueError(f"--keep_checkpoints must be >= 1, got {self.keep_checkpoints}")
        if not 0 <= self.stop_at_epoch <= epochs:
            raise ValueError(f"--stop_at_epoch must be in [0, --epochs {epochs}] (0: no pause), got {self.stop_at_epoch:g}")
        if self.stop_at_epoch and not self.enabled:
            raise ValueError("--stop_at_epoch pauses a run to continue it from its checkpoint: drop --no-checkpoint")
        if self.start_from and self.resume not in ("", "auto"):
            raise ValueError(
                f"--start_from {self.start_from!r} with --resume {self.resume!r}: give one checkpoint (--resume auto "
                "lets a branch continue from its own checkpoints once it has some)"
            )


@dataclass
class MetricsConfig:
    """Where a run writes, and how often it evaluates and logs."""

    tensorboard_dir: str = option(
        "runs", "parent folder of run folders",
        roles=(TRAIN_COMPONENT, RESERVED_BY_SWEEP, RERUN_MAY_CHANGE, BRANCH_MAY_CHANGE, BOOKKEEPING),
    )
    run_name: str = option(
        "", "run folder name under --tensorboard_dir (default: derived)",
        roles=(TRAIN_COMPONENT, RESERVED_BY_SWEEP, RERUN_MAY_CHANGE, BRANCH_MAY_CHANGE, BOOKKEEPING),
    )
    eval_every_n_steps: int = option(
        0, "also evaluate every N train steps (0: per epoch only)",
        roles=(BRANCH_MAY_CHANGE, IGNORED_BY_PRETRAINING),
    )
    train_eval_rows: int = option(
        20000, "rows of a fixed train sample evaluated each time (memorisation check)",
        roles=(BRANCH_MAY_CHANGE, IGNORED_BY_PRETRAINING),
    )
    log_every_n_steps: int = option(20, "train loss/throughput logging interval", roles=(BRANCH_MAY_CHANGE, BOOKKEEPING))
    progress_bar: bool = option(True, "show a tqdm progress bar on rank 0", roles=(RERUN_MAY_CHANGE, BRANCH_MAY_CHANGE, BOOKKEEPING))

    def validate(self) -> None:
        _at_least(self, ("log_every_n_steps",), 1, "a positive integer")
        _at_least(self, ("eval_every_n_steps", "train_eval_rows"), 0, ">= 0")
