"""The one dataclass config the training app builds everything from, in sections, and its CLI.

Sections: ``data``, ``model``, ``optim`` (with the table remedies), ``auto`` (the automatic
schedule), ``loader``, ``pipeline``, ``freeze``, ``remedies``, ``checkpoint``, ``metrics``
(:mod:`dlrm_multiepoch.train.sections`); ``epochs`` and ``seed`` stay at the top. Each
leaf field is one ``--flag``; flag names do not depend on the sections.

``TrainConfig.validate()`` checks every flag before any data is read, each message
naming the flag and the value it expects, and parses each text flag once into the
typed value its builder reads (``cfg.freeze.schedule``, ``cfg.optim.lr_schedule``, ...);
only checks that need the data (table names in a freeze schedule, step-unit windows,
one weight per task) wait until it is loaded, and still run before the first training step.
"""

import argparse
import dataclasses
import itertools
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type

from dlrm_multiepoch.auto.config import AutoScheduleConfig
from dlrm_multiepoch.config_section import (
    BOOKKEEPING,
    BRANCH_MAY_CHANGE,
    IGNORED_BY_PRETRAINING,
    MAX_SEED,
    RESERVED_BY_SWEEP,
    TRAIN_COMPONENT,
    Option,
    add_arguments,
    flag_fields,
    flag_name,
    flag_values,
    option,
    options_of,
    roles_of,
)
from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.optim.config import OptimConfig
from dlrm_multiepoch.train.sections import (
    CheckpointConfig,
    FreezeConfig,
    LoaderConfig,
    MetricsConfig,
    PipelineConfig,
    RemedyConfig,
    check_freeze_schedule,
)

__all__ = [
    "TrainConfig", "config_fields", "flags_with", "record_paths", "build_parser", "parse_config", "check_freeze_schedule",
]  # fmt: skip

# Sections whose flags run records keep nested under the section's name (``to_dict()["data"]``),
# and sections whose flags they keep at the top (as before these were sections): the records'
# shape is what resume and --start_from compare, so old run folders keep resuming.
NESTED_SECTIONS: Dict[str, Type[Any]] = {"data": DataConfig, "model": ModelConfig, "optim": OptimConfig, "auto": AutoScheduleConfig}
FLAT_SECTIONS: Dict[str, Type[Any]] = {
    "loader": LoaderConfig, "pipeline": PipelineConfig, "freeze": FreezeConfig, "remedies": RemedyConfig,
    "checkpoint": CheckpointConfig, "metrics": MetricsConfig,
}  # fmt: skip
_SECTIONS = {**NESTED_SECTIONS, **FLAT_SECTIONS}


@dataclass
class TrainConfig:
    """Everything a training run is built from.

    Example::

        cfg = parse_config(["--dataset", "movielens", "--epochs", "2"])
        cfg.loader.batch_size, cfg.freeze.schedule        # 1024, FreezeSchedule(...)
        Trainer(cfg, init_distributed()).train()

        cfg = TrainConfig.from_flags(epochs=2, batch_size=256, data=DataConfig(dataset="movielens"))
    """

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    # Every --auto_* flag: what a branch may set (the automatic schedule is a schedule), what pre-training ignores.
    auto: AutoScheduleConfig = field(default_factory=AutoScheduleConfig, metadata={"roles": (BRANCH_MAY_CHANGE, IGNORED_BY_PRETRAINING)})
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    freeze: FreezeConfig = field(default_factory=FreezeConfig)
    remedies: RemedyConfig = field(default_factory=RemedyConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    epochs: int = option(3, "passes over the train split", roles=(TRAIN_COMPONENT, RESERVED_BY_SWEEP, BRANCH_MAY_CHANGE))
    seed: int = option(0, "seed of model init and shuffling", roles=(TRAIN_COMPONENT, RESERVED_BY_SWEEP, BOOKKEEPING))

    @classmethod
    def from_flags(cls, **values: Any) -> "TrainConfig":
        """A config from flag values by flag name (``batch_size=256``), each put into its section;
        a whole section may be given by its name (``data=DataConfig(...)``). Not validated.

        Raises:
            TypeError: a name that is neither a flag nor a section.
        """
        fields = config_fields()
        whole = {n: v for n, v in values.items() if n in _SECTIONS and isinstance(v, _SECTIONS[n])}
        flags = {n: v for n, v in values.items() if n not in whole}
        unknown = sorted(set(flags) - set(fields))
        if unknown:
            raise TypeError(f"TrainConfig.from_flags: {unknown} are not flags of the training app")
        sections = {
            name: whole[name] if name in whole else section(**{f.name: flags[flag_name(f)] for f in flag_fields(section) if flag_name(f) in flags})
            for name, section in _SECTIONS.items()
        }  # fmt: skip
        return cls(**sections, **{f.name: flags[f.name] for f in _top_fields() if f.name in flags})

    def flags(self) -> Dict[str, Any]:
        """Every flag's value by flag name, flat (``{"dataset": ..., "batch_size": ..., ...}``)."""
        return {flag: getattr(_owner(self, field.path), field.path.split(".")[-1]) for flag, field in config_fields().items()}

    def with_flags(self, **changes: Any) -> "TrainConfig":
        """A copy with the flags ``changes`` names set (``cfg.with_flags(resume="auto")``); not validated."""
        return TrainConfig.from_flags(**{**self.flags(), **changes})

    def validate(self, world_size: int = 1) -> None:
        """Check every flag before any data is read, and parse the text flags; ``ValueError`` names the flag.

        Args:
            world_size: ranks of the job; batch sizes must divide by it.
        """
        self.data.validate()
        self.model.validate()
        if self.epochs <= 0:
            raise ValueError(f"--epochs must be a positive integer, got {self.epochs}")
        if not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"--seed must be an integer from 0 to {MAX_SEED}, got {self.seed}")
        self.loader.validate(world_size)
        self.pipeline.validate()
        self.metrics.validate()
        self.checkpoint.validate(self.epochs)
        self.optim.validate(self.epochs)
        if self.optim.grad_accum_steps > 1 and self.checkpoint.enabled and self.checkpoint.checkpoint_every_n_steps:
            # A step checkpoint inside an accumulation window would drop the gradients
            # accumulated so far; epoch checkpoints fall where windows close.
            raise ValueError(
                f"--checkpoint_every_n_steps {self.checkpoint.checkpoint_every_n_steps} with --grad_accum_steps "
                f"{self.optim.grad_accum_steps}: step checkpoints are not supported with gradient accumulation "
                "(use per-epoch checkpoints: --checkpoint_every_n_steps 0)"
            )
        self.remedies.validate()
        if self.checkpoint.start_from and self.freeze.is_auto:
            raise ValueError(
                "--start_from with --freeze_schedule auto: the automatic schedule decides from its own validation "
                "history since step 0, so it cannot start from another run's checkpoint"
            )
        if self.checkpoint.resume == "auto" and not self.metrics.run_name:
            raise ValueError("--resume auto needs --run_name: the default run name is new for every launch")
        if self.model.model == "multipath" and self.data.history_length <= 0:
            raise ValueError("--model multipath needs --history_length > 0 (its sequence path reads the item history)")
        self.freeze.validate(self.epochs)
        self.auto.validate()  # the search decides on --auto_metric and --auto_task_weights whatever the schedule
        if self.freeze.is_auto:
            if self.data.val_fraction == 0:
                raise ValueError(
                    "--freeze_schedule auto decides from a validation split: set --val_fraction (e.g. 0.1)"
                )

    def check_paths(self) -> None:
        """Raise naming the flag when a file or folder it names is missing or of the wrong kind.

        Apart from :meth:`validate`, which touches no file: a launcher (``dlrm-multiepoch
        sweep``) validates flags on a host that may not see the job's files. The trainer
        calls both before it reads any data.
        """
        self.data.check_paths()
        self.model.check_paths()
        resume, start_from = self.checkpoint.resume, self.checkpoint.start_from
        if resume not in ("", "auto") and not os.path.isdir(resume):
            raise ValueError(f"--resume {resume!r}: no such checkpoint folder (expected '', 'auto' or a folder)")
        if start_from and not os.path.isdir(start_from):
            raise ValueError(f"--start_from {start_from!r}: no such checkpoint folder (a run's checkpoints/step_N)")
        tables = self.freeze.pretrained_tables
        if tables and not os.path.isdir(tables):
            raise ValueError(f"--pretrained_tables {tables!r}: no such folder (python -m dlrm_multiepoch.pretrain writes one)")

    def to_dict(self) -> Dict[str, Any]:
        """The flags as run records keep them: ``{"data": {...}, "model": {...}, "optim": {...},
        "auto": {...}, "epochs": 3, "batch_size": 1024, ...}`` (the other sections' flags at the top)."""
        out: Dict[str, Any] = {name: flag_values(getattr(self, name)) for name in NESTED_SECTIONS}
        out.update({f.name: getattr(self, f.name) for f in _top_fields()})
        for name in FLAT_SECTIONS:
            out.update(flag_values(getattr(self, name)))
        return out


def config_fields() -> Dict[str, Option]:
    """Every flag of :class:`TrainConfig` and its sections, by flag name (one field each).

    Raises:
        TypeError: two fields with one flag name (the second would silently shadow the first).
    """
    fields: Dict[str, Option] = {}
    for cls, prefix, leaves, roles in _owners():
        for f in options_of(cls, prefix, leaves, roles):
            if f.name in fields:
                raise TypeError(f"--{f.name} is a field of both {fields[f.name].section} and {cls.__name__}")
            fields[f.name] = f
    return fields


def flags_with(*roles: str) -> Tuple[str, ...]:
    """The flags that have one of ``roles`` (``config_section.ROLES``), in the order of the app's ``--help``.

    Example::

        flags_with(RESERVED_BY_SWEEP)   # ("epochs", "seed", "resume", "tensorboard_dir", "run_name")
    """
    return tuple(name for name, f in config_fields().items() if f.roles & set(roles))


def record_paths(role: str) -> Tuple[str, ...]:
    """The fields that have ``role``, as dotted paths into ``TrainConfig.to_dict()`` (``"optim.reinit"``,
    ``"run_name"``), in the order of the app's ``--help``; a section that has it as one path ending in
    "." (``"auto."``: every flag of the section, ``run_files.path_matches``).

    Example::

        record_paths(BRANCH_MAY_CHANGE)[:4]   # ("epochs", "optim.reinit", "auto.", "eval_batch_size")
    """
    paths: List[str] = []
    for cls, prefix, leaves, section_roles in _owners():
        if role in section_roles:
            paths.append(prefix)
            continue
        nested = prefix if prefix[:-1] in NESTED_SECTIONS else ""
        paths += [nested + flag_name(f) for f in leaves if role in roles_of(f)]
    return tuple(paths)


def _owners() -> List[Tuple[type, str, List[dataclasses.Field], frozenset]]:
    """``(class, path prefix, flag fields, the section's roles)`` of the config's top and of each section."""
    sections = {f.name: roles_of(f) for f in dataclasses.fields(TrainConfig) if f.name in _SECTIONS}
    return [
        (TrainConfig, "", _top_fields(), frozenset()),
        *((cls, f"{name}.", flag_fields(cls), sections.get(name, frozenset())) for name, cls in _SECTIONS.items()),
    ]


def _owner(cfg: TrainConfig, path: str) -> Any:
    """The section (or the config itself) holding the field at dotted ``path``."""
    return getattr(cfg, path.split(".")[0]) if "." in path else cfg


def _top_fields() -> List[dataclasses.Field]:
    """The flags of :class:`TrainConfig` itself (``--epochs``, ``--seed``)."""
    return [f for f in dataclasses.fields(TrainConfig) if f.name not in _SECTIONS]


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    """One ``--flag`` per leaf field of :class:`TrainConfig` and its sections, grouped by section.

    Args:
        prog: the program name usage lines show (``python -m dlrm_multiepoch.train``; default: the script's).
    """
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Train a DLRM-style model with TorchRec (torchrun/TorchX launch).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False,  # "--epoch" must not silently mean "--epochs"
    )
    for section, options in itertools.groupby(config_fields().values(), key=lambda o: o.section):
        add_arguments(parser.add_argument_group(section), options)
    return parser


def parse_config(
    argv: Optional[Sequence[str]] = None, check_paths: bool = False, prog: Optional[str] = None
) -> TrainConfig:
    """Parse CLI flags into a validated :class:`TrainConfig`; errors name the flag (argparse exit code 2).

    Args:
        argv: the flags (default: ``sys.argv[1:]``).
        check_paths: also check the files and folders the flags name (the app does;
            a launcher on another host does not).
        prog: the program name in usage and error lines (see :func:`build_parser`).
    """
    parser = build_parser(prog)
    cfg = TrainConfig.from_flags(**vars(parser.parse_args(argv)))
    try:
        cfg.validate(world_size=int(os.environ.get("WORLD_SIZE", "1")))  # set by torchrun before the app starts
        if check_paths:
            cfg.check_paths()
    except (ValueError, OSError) as e:
        parser.error(str(e))
    return cfg
