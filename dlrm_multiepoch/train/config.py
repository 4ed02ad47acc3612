"""The one dataclass config the training app builds everything from, and its CLI."""

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Type, get_type_hints

from dlrm_multiepoch.auto.policy import AUTO, AutoScheduleConfig
from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.schedule import FreezeSchedule


@dataclass
class OptimConfig:
    """Optimizers: fused in-backward for tables, Adam for dense weights."""

    learning_rate: float = field(default=1e-3, metadata={"help": "Adam learning rate of the dense weights"})
    embedding_optimizer: str = field(
        default="rowwise_adagrad", metadata={"help": "fused table optimizer: rowwise_adagrad, adagrad or sgd"}
    )
    embedding_learning_rate: float = field(default=0.05, metadata={"help": "learning rate of the embedding tables"})


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
        metadata={"help": "save the training state to <run folder>/checkpoints/epoch_N after each epoch's evaluation"},
    )
    keep_checkpoints: int = field(default=2, metadata={"help": "complete checkpoints to keep (older ones are deleted)"})
    resume: str = field(
        default="",
        metadata={
            "help": "empty: start fresh; 'auto': resume from this run folder's latest complete checkpoint if one "
            "exists (needs --run_name); or a checkpoint folder (e.g. runs/NAME/checkpoints/epoch_2)"
        },
    )

    def validate(self) -> None:
        for name in ("epochs", "batch_size", "eval_batch_size", "log_every_n_steps", "shuffle_block_rows",
                     "shuffle_buffer_rows"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be positive, got {getattr(self, name)}")
        from dlrm_multiepoch.pipeline.factory import PIPELINES  # torch: the config itself imports without it

        if self.pipeline not in PIPELINES:
            raise ValueError(f"--pipeline must be one of {', '.join(PIPELINES)}; got {self.pipeline!r}")
        non_negative = ("eval_every_n_steps", "train_eval_rows", "limit_train_batches", "pipeline_warmup_batches")
        for name in non_negative + ("prefetch_batches",):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must be >= 0, got {getattr(self, name)}")
        if self.keep_checkpoints < 1:
            raise ValueError(f"--keep_checkpoints must be >= 1, got {self.keep_checkpoints}")
        if self.pipeline_staleness_interval < 1:
            raise ValueError(f"--pipeline_staleness_interval must be >= 1, got {self.pipeline_staleness_interval}")
        if self.resume == "auto" and not self.run_name:
            raise ValueError("--resume auto needs --run_name: the default run name is new for every launch")
        if not 0.0 <= self.data.val_fraction < 1.0:
            raise ValueError(f"--val_fraction must be in [0, 1), got {self.data.val_fraction}")
        if self.freeze_schedule.strip() == AUTO:
            self.auto.validate()
            if self.data.val_fraction == 0:
                raise ValueError(
                    "--freeze_schedule auto decides from a validation split: set --val_fraction (e.g. 0.1)"
                )
            return
        if AUTO in (e.strip() for e in self.freeze_schedule.split(";")):
            raise ValueError(
                f"--freeze_schedule {self.freeze_schedule!r}: 'auto' stands alone (the policy owns the tables; "
                "--auto_gate names a gate it may close)"
            )
        # Syntax and window checks before any data or model is built; checks that need
        # the model (unknown tables, modules, gates) run when the trainer builds it.
        try:
            FreezeSchedule.parse(self.freeze_schedule).resolve(steps_per_epoch=1_000_000, num_epochs=self.epochs)
        except ValueError as e:
            raise ValueError(f"--freeze_schedule: {e}") from None

    @property
    def sharding_type_list(self) -> List[str]:
        return [s for s in self.sharding_types.split(",") if s]

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


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


def parse_config(argv: Optional[Sequence[str]] = None) -> TrainConfig:
    """Parse CLI flags into a validated :class:`TrainConfig`; errors name the flag."""
    parser = build_parser()
    ns = vars(parser.parse_args(argv))
    sections = {name: cls(**{f.name: ns[f.name] for f in _leaf_fields(cls)}) for name, cls in _SECTIONS.items()}
    cfg = TrainConfig(**sections, **{f.name: ns[f.name] for f in _leaf_fields(TrainConfig)})
    try:
        cfg.validate()
    except ValueError as e:
        parser.error(str(e))
    return cfg
