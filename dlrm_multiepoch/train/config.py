"""The one dataclass config the training app builds everything from, and its CLI.

``TrainConfig.validate()`` checks every flag before any data is read, each message
naming the flag and the value it expects; only checks that need the data (table
names in a freeze schedule, step-unit windows, one weight per task) wait until it is
loaded, and still run before the first training step.
"""

import argparse
import dataclasses
import os
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Dict, List, Optional, Sequence, Type, get_type_hints

from dlrm_multiepoch.auto.policy import AUTO, AutoScheduleConfig
from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.optim.config import OptimConfig
from dlrm_multiepoch.schedule import FreezeSchedule
from dlrm_multiepoch.table_values import TableValues

SHARDING_TYPE_NAMES = ("data_parallel", "table_wise", "column_wise", "row_wise", "table_row_wise", "table_column_wise")


@dataclass
class TrainConfig:
    """Everything a training run is built from.

    Example::

        cfg = parse_config(["--dataset", "movielens", "--epochs", "2"])
        Trainer(cfg, init_distributed()).train()
    """

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    auto: AutoScheduleConfig = field(default_factory=AutoScheduleConfig)
    epochs: int = field(default=3, metadata={"help": "passes over the train split"})
    batch_size: int = field(default=1024, metadata={"help": "global batch size (summed over ranks)"})
    eval_batch_size: int = field(default=4096, metadata={"help": "global batch size for evaluation"})
    seed: int = field(default=0, metadata={"help": "seed of model init and shuffling"})
    shuffle_block_rows: int = field(
        default=4096,
        metadata={"help": "train shuffle: rows of consecutive blocks whose order is permuted each epoch"},
    )
    shuffle_buffer_rows: int = field(
        default=1 << 18,
        metadata={"help": "train shuffle: rows each rank reads and shuffles together (its memory: this many rows)"},
    )
    prefetch_batches: int = field(
        default=2, metadata={"help": "batches a background thread prepares ahead of training (0: none)"}
    )
    sharding_types: str = field(
        default="table_wise,row_wise,column_wise",
        metadata={"help": "sharding types the planner may use (add data_parallel to allow replicated tables)"},
    )
    freeze_schedule: str = field(
        default="joint",
        metadata={
            "help": "which parameter groups train when: a preset (joint, delayed, early, frozen), e.g. "
            "'tables=frozen@[0,1) train@[1,end); module:over_arch.*=frozen; gate:feature_cross=closed@[1,2)', "
            "or 'auto': decided from the validation split (needs --val_fraction; knobs --auto_*)"
        },
    )
    pretrained_tables: str = field(
        default="",
        metadata={"help": "checkpoint folder of pre-trained tables (apps/pretrain.py) to start from; empty: fresh"},
    )
    pipeline: str = field(
        default="sparse_dist",
        metadata={
            "help": "train pipeline: sparse_dist (TorchRec's, synchronous), semi_sync (ours: next batch's lookup "
            "overlaps this batch's backward, staleness 1), torchrec_semi_sync (TorchRec's, CUDA only)"
        },
    )
    pipeline_warmup_batches: int = field(
        default=0, metadata={"help": "synchronous batches before a semi-sync pipeline starts overlapping"}
    )
    pipeline_staleness_interval: int = field(
        default=20,
        metadata={"help": "semi_sync: measure the stale-row fraction on one step in N (1: every step, exact)"},
    )
    id_dropout: str = field(
        default="",
        metadata={
            "help": "during training, look up this seeded fraction of ids as the unknown row 0, so it trains: "
            "'0.02' (every table) or '0.02,t_age=0' (per table); empty: off"
        },
    )
    tensorboard_dir: str = field(default="runs", metadata={"help": "parent folder of run folders"})
    run_name: str = field(default="", metadata={"help": "run folder name under --tensorboard_dir (default: derived)"})
    eval_every_n_steps: int = field(default=0, metadata={"help": "also evaluate every N train steps (0: per epoch only)"})
    train_eval_rows: int = field(
        default=20000, metadata={"help": "rows of a fixed train sample evaluated each time (memorisation check)"}
    )
    log_every_n_steps: int = field(default=20, metadata={"help": "train loss/throughput logging interval"})
    limit_train_batches: int = field(default=0, metadata={"help": "stop each epoch after N steps (0: no limit)"})
    progress_bar: bool = field(default=True, metadata={"help": "show a tqdm progress bar on rank 0"})
    checkpoint: bool = field(
        default=True,
        metadata={"help": "save the training state to <run folder>/checkpoints/step_N after each epoch's evaluation (and every --checkpoint_every_n_steps)"},
    )
    checkpoint_every_n_steps: int = field(
        default=0,
        metadata={
            "help": "also checkpoint every N train steps, with the data position, so a resume continues mid-epoch "
            "(0: after each epoch only)"
        },
    )
    keep_checkpoints: int = field(
        default=2, metadata={"help": "complete checkpoints to keep (older ones are deleted; protected ones stay)"}
    )
    resume: str = field(
        default="",
        metadata={
            "help": "empty: start fresh; 'auto': resume from this run folder's newest intact checkpoint if one "
            "exists (needs --run_name); or a checkpoint folder (e.g. runs/NAME/checkpoints/step_240). A restart "
            "of the same torchrun/TorchX job always resumes from its own newest checkpoint"
        },
    )
    start_from: str = field(
        default="",
        metadata={
            "help": "start this run (a new run folder) from another run's step_N checkpoint: weights, optimizer "
            "state and data position; the freeze schedule and remedies are this run's own flags and must agree "
            "with what that run did up to the checkpoint (a schedule branch). With --resume auto, the run's own "
            "newest checkpoint wins once it has one"
        },
    )
    stop_at_epoch: float = field(
        default=0.0,
        metadata={
            "help": "pause after this many epochs of the --epochs schedule (checkpoint saved, no final records); a "
            "later launch with --resume auto continues (0: train to --epochs). A fraction pauses inside an epoch, "
            "at step round(X * steps per epoch), with an evaluation of every split and a checkpoint there"
        },
    )
    overwrite: bool = field(
        default=False,
        metadata={
            "help": "let a fresh start delete the checkpoints and summary.json an earlier run left in this run "
            "folder (without it, such a start is refused)"
        },
    )
    skip_nonfinite_batches: bool = field(
        default=False,
        metadata={
            "help": "skip a batch whose loss is NaN/inf on any rank (no update; counted in the log) instead of "
            "stopping the run; costs one host sync and one all-reduce per step"
        },
    )

    def validate(self, world_size: int = 1) -> None:
        """Check every flag before any data is read; ``ValueError`` names the flag and what it expects.

        Args:
            world_size: ranks of the job; batch sizes must divide by it.
        """
        self.data.validate()
        self.model.validate()
        for name in ("epochs", "batch_size", "eval_batch_size", "log_every_n_steps", "shuffle_block_rows",
                     "shuffle_buffer_rows"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be a positive integer, got {getattr(self, name)}")
        for name in ("batch_size", "eval_batch_size"):
            if getattr(self, name) % world_size:
                raise ValueError(
                    f"--{name} {getattr(self, name)} must be a multiple of the world size {world_size} "
                    f"(each rank takes an equal share of a global batch)"
                )
        from dlrm_multiepoch.pipeline.factory import PIPELINES  # torch: the config itself imports without it

        if self.pipeline not in PIPELINES:
            raise ValueError(f"--pipeline must be one of {', '.join(PIPELINES)}; got {self.pipeline!r}")
        non_negative = ("eval_every_n_steps", "train_eval_rows", "limit_train_batches", "pipeline_warmup_batches")
        for name in non_negative + ("prefetch_batches",):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must be >= 0, got {getattr(self, name)}")
        if self.checkpoint_every_n_steps < 0:
            raise ValueError(f"--checkpoint_every_n_steps must be >= 0 (0: per epoch only), got {self.checkpoint_every_n_steps}")
        if self.keep_checkpoints < 1:
            raise ValueError(f"--keep_checkpoints must be >= 1, got {self.keep_checkpoints}")
        if self.pipeline_staleness_interval < 1:
            raise ValueError(f"--pipeline_staleness_interval must be >= 1, got {self.pipeline_staleness_interval}")
        self.optim.validate(self.epochs)
        if self.optim.grad_accum_steps > 1 and self.checkpoint and self.checkpoint_every_n_steps:
            # A step checkpoint inside an accumulation window would drop the gradients
            # accumulated so far; epoch checkpoints fall where windows close.
            raise ValueError(
                f"--checkpoint_every_n_steps {self.checkpoint_every_n_steps} with --grad_accum_steps "
                f"{self.optim.grad_accum_steps}: step checkpoints are not supported with gradient accumulation "
                "(use per-epoch checkpoints: --checkpoint_every_n_steps 0)"
            )
        self.id_dropout_values()
        self._validate_branch()
        if self.resume == "auto" and not self.run_name:
            raise ValueError("--resume auto needs --run_name: the default run name is new for every launch")
        if self.model.model == "multipath" and self.data.history_length <= 0:
            raise ValueError("--model multipath needs --history_length > 0 (its sequence path reads the item history)")
        unknown = sorted(set(self.sharding_type_list) - set(SHARDING_TYPE_NAMES))
        if unknown or not self.sharding_type_list:
            raise ValueError(
                f"--sharding_types {self.sharding_types!r}: expected a comma-separated subset of "
                f"{', '.join(SHARDING_TYPE_NAMES)}"
            )
        if self.freeze_schedule.strip() == AUTO:
            self.auto.validate()
            if self.data.val_fraction == 0:
                raise ValueError(
                    "--freeze_schedule auto decides from a validation split: set --val_fraction (e.g. 0.1)"
                )
        elif AUTO in (e.strip() for e in self.freeze_schedule.split(";")):
            raise ValueError(
                f"--freeze_schedule {self.freeze_schedule!r}: 'auto' stands alone (the policy owns the tables; "
                "--auto_gate names a gate it may close)"
            )
        else:
            check_freeze_schedule(self.freeze_schedule, self.epochs)

    def check_paths(self) -> None:
        """Raise naming the flag when a file or folder it names is missing or of the wrong kind.

        Apart from :meth:`validate`, which touches no file: a launcher (``dlrm-multiepoch
        sweep``) validates flags on a host that may not see the job's files. The trainer
        calls both before it reads any data.
        """
        self.data.check_paths()
        if self.resume not in ("", "auto") and not os.path.isdir(self.resume):
            raise ValueError(f"--resume {self.resume!r}: no such checkpoint folder (expected '', 'auto' or a folder)")
        if self.start_from and not os.path.isdir(self.start_from):
            raise ValueError(f"--start_from {self.start_from!r}: no such checkpoint folder (a run's checkpoints/step_N)")
        if self.pretrained_tables and not os.path.isdir(self.pretrained_tables):
            raise ValueError(f"--pretrained_tables {self.pretrained_tables!r}: no such folder (apps/pretrain.py writes one)")

    def _validate_branch(self) -> None:
        if not 0 <= self.stop_at_epoch <= self.epochs:
            raise ValueError(f"--stop_at_epoch must be in [0, --epochs {self.epochs}] (0: no pause), got {self.stop_at_epoch:g}")
        if self.stop_at_epoch and not self.checkpoint:
            raise ValueError("--stop_at_epoch pauses a run to continue it from its checkpoint: drop --no-checkpoint")
        if not self.start_from:
            return
        if self.resume not in ("", "auto"):
            raise ValueError(
                f"--start_from {self.start_from!r} with --resume {self.resume!r}: give one checkpoint (--resume auto "
                "lets a branch continue from its own checkpoints once it has some)"
            )
        if self.freeze_schedule.strip() == AUTO:
            raise ValueError(
                "--start_from with --freeze_schedule auto: the automatic schedule decides from its own validation "
                "history since step 0, so it cannot start from another run's checkpoint"
            )

    def id_dropout_values(self) -> TableValues[float]:
        return TableValues.parse(
            self.id_dropout, "--id_dropout", float, default=0.0, check=lambda p: 0.0 <= p < 1.0, expected="must be in [0, 1)"
        )

    @property
    def sharding_type_list(self) -> List[str]:
        return [s for s in self.sharding_types.split(",") if s]

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def check_freeze_schedule(text: str, epochs: int) -> None:
    """Check ``--freeze_schedule`` against ``--epochs`` before the data gives the steps per epoch.

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


_SECTIONS = {"data": DataConfig, "model": ModelConfig, "optim": OptimConfig, "auto": AutoScheduleConfig}


@dataclass(frozen=True)
class ConfigField:
    """One leaf field of :class:`TrainConfig` or a section: its flag, type, default and help.

    Example::

        config_fields()["epochs"]   # ConfigField(name='epochs', kind=int, default=3, help=..., section='TrainConfig')
    """

    name: str
    kind: type
    default: Any
    help: str
    section: str


def config_fields() -> Dict[str, ConfigField]:
    """Every leaf field of :class:`TrainConfig` and its sections, by flag name (one flag each)."""
    fields: Dict[str, ConfigField] = {}
    for cls in (TrainConfig, *_SECTIONS.values()):
        hints = get_type_hints(cls)
        for f in _leaf_fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            kind = _optional_base(hints[f.name])
            if f.name in fields:  # one flag per field: a repeat would silently shadow the other section's
                raise TypeError(f"--{f.name} is a field of both {fields[f.name].section} and {cls.__name__}")
            fields[f.name] = ConfigField(f.name, kind, default, f.metadata.get("help", ""), cls.__name__)
    return fields


def _leaf_fields(cls: Type[Any]) -> List[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if not (cls is TrainConfig and f.name in _SECTIONS)]


def build_parser() -> argparse.ArgumentParser:
    """One ``--flag`` per leaf field of :class:`TrainConfig` and its sections."""
    parser = argparse.ArgumentParser(
        description="Train a DLRM-style model with TorchRec (torchrun/TorchX launch).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False,  # "--epoch" must not silently mean "--epochs"
    )
    groups: Dict[str, argparse._ArgumentGroup] = {}
    for f in config_fields().values():
        group = groups.get(f.section) or groups.setdefault(f.section, parser.add_argument_group(f.section))
        if f.kind is bool:
            group.add_argument(f"--{f.name}", action=argparse.BooleanOptionalAction, default=f.default, help=f.help)
        else:
            group.add_argument(f"--{f.name}", type=f.kind, default=f.default, help=f.help)
    return parser


def _optional_base(kind: Any) -> Any:
    args = getattr(kind, "__args__", None)
    if args and type(None) in args:  # Optional[X]
        return next(a for a in args if a is not type(None))
    return kind


def parse_config(argv: Optional[Sequence[str]] = None, check_paths: bool = False) -> TrainConfig:
    """Parse CLI flags into a validated :class:`TrainConfig`; errors name the flag (argparse exit code 2).

    Args:
        argv: the flags (default: ``sys.argv[1:]``).
        check_paths: also check the files and folders the flags name (the app does;
            a launcher on another host does not).
    """
    parser = build_parser()
    ns = vars(parser.parse_args(argv))
    sections = {name: cls(**{f.name: ns[f.name] for f in _leaf_fields(cls)}) for name, cls in _SECTIONS.items()}
    cfg = TrainConfig(**sections, **{f.name: ns[f.name] for f in _leaf_fields(TrainConfig)})
    try:
        cfg.validate(world_size=int(os.environ.get("WORLD_SIZE", "1")))  # set by torchrun before the app starts
        if check_paths:
            cfg.check_paths()
    except (ValueError, OSError) as e:
        parser.error(str(e))
    return cfg
