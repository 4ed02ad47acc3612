"""The sweep's and the search's own options: one dataclass each, the single definition of their flags.

From :class:`SweepOptions` and :class:`SearchOptions` come the ``dlrm-multiepoch sweep`` and
``search`` commands' own flags (:func:`add_option_args`), the ``dlrm_multiepoch.sweep`` and
``.search`` TorchX components' parameters and their help
(:func:`~dlrm_multiepoch.component_params.add_option_params`), the checks of their values
(``check()``, each refusal naming the flag) and the way back to the command line a component's
job runs (:func:`command_args`). How each run is launched is the same pattern
(:mod:`~dlrm_multiepoch.launch_options`). Torch-free.

Example::

    options = SearchOptions("runs/ml", seeds="0,1", eta=2)
    options.check()
    options.seed_list        # [0, 1]
    command_args(options)    # ['runs/ml', '--epochs', '3', '--seeds', '0,1', '--eta', '2', '--rung_fraction', '0.3']
"""

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Sequence, Type, TypeVar

from dlrm_multiepoch.config_section import MAX_SEED, flag_fields, parsed, split_list

O = TypeVar("O", bound="ExperimentOptions")
JOBS = ("shared", "per_segment")  # --jobs


def _option(default: Any = dataclasses.MISSING, help: str = "", *, positional: bool = False, component: bool = True,
            choices: Sequence[str] = ()) -> Any:  # fmt: skip
    """An option: its default, help, whether it is positional (``experiment_dir``), whether the command's TorchX
    component offers it (else only the command has it) and the values it may take."""
    metadata = {"help": help, "positional": positional, "component": component, "choices": tuple(choices)}
    return dataclasses.field(default=default, metadata=metadata)


@dataclass
class ExperimentOptions:
    """What the sweep and the search share: the experiment folder, the epoch budget, the seeds.

    Subclasses word the help their own way (``HELP``: option -> text); the defaults stay these.
    """

    experiment_dir: str = _option(help="", positional=True)
    epochs: int = _option(3, "")
    seeds: str = _option("0", "")
    seed_list: List[int] = parsed()  # --seeds
    HELP: ClassVar[Dict[str, str]] = {}

    def check(self) -> None:
        """Refuse a bad value, naming its flag; parse the text options into their parsed fields."""
        try:
            self.seed_list = [int(s) for s in split_list(self.seeds)]
        except ValueError:
            raise ValueError(f"--seeds expects comma-separated integers, got {self.seeds!r}") from None
        if self.epochs <= 0:
            raise ValueError(f"--epochs must be positive, got {self.epochs}")
        if not self.seed_list:
            raise ValueError("--seeds must name at least one seed")
        bad = [s for s in self.seed_list if not 0 <= s <= MAX_SEED]
        if bad:
            raise ValueError(
                f"--seeds {self.seeds!r}: {bad[0]} is not a seed (seeds are integers from 0 to {MAX_SEED})"
            )
        if len(set(self.seed_list)) < len(self.seed_list):
            raise ValueError(f"--seeds {self.seeds!r} names a seed twice (its runs would be one run)")


@dataclass
class SweepOptions(ExperimentOptions):
    """``dlrm-multiepoch sweep``'s own options (its strategies and ``--list`` are the sweep command's).

    Args:
        experiment_dir: the experiment folder.
        epochs: the epoch budget of every strategy.
        seeds: comma-separated seeds.
        windows: comma-separated epochs at which an update-window run's tables start training.
        group: a configuration of its own in the experiment (command only).
    """

    windows: str = _option("", "update-window sweep: comma-separated epochs at which the tables start training, e.g. 0,0.5,1,1.5")
    group: str = _option(
        "",
        "sweep another configuration (other --epochs or common flags) into the experiment as its own group: runs in "
        "EXPERIMENT_DIR/GROUP/, recorded in sweep.json",
        component=False,
    )
    window_list: List[float] = parsed()  # --windows
    HELP: ClassVar[Dict[str, str]] = {
        "experiment_dir": "folder of the runs (one per strategy and seed) and sweep.json",
        "epochs": "epoch budget of every strategy (presets may differ: joint-1ep runs 1, joint the budget + 1)",
        "seeds": "comma-separated seeds; each strategy runs once per seed",
    }

    def check(self) -> None:
        super().check()
        try:
            self.window_list = [float(w) for w in split_list(self.windows)]
        except ValueError:
            raise ValueError(f"--windows expects comma-separated epochs, got {self.windows!r}") from None


@dataclass
class SearchOptions(ExperimentOptions):
    """``dlrm-multiepoch search``'s own options.

    Args:
        experiment_dir: the experiment folder.
        epochs: the epoch budget E of every schedule.
        seeds: comma-separated seeds, one search each.
        eta: the successive-halving factor (>= 2).
        rung_fraction: where in (0, 1] of an epoch a branch is first judged.
        candidates: comma-separated subset of the candidates (empty: all).
        jobs: ``shared`` or ``per_segment`` training jobs on ``local_cwd`` (command only).
    """

    eta: int = _option(3, "successive halving: the top 1/eta of the judged branches go on at each rung")
    rung_fraction: float = _option(
        0.3,
        "a branch is first judged (against its cohort: tables as young) this fraction of an epoch after the tables it "
        "deploys start; 1: after a whole epoch, with every branch",
    )
    candidates: str = _option("", "comma-separated subset of the candidates, empty for all (a branch needs its parent)")
    jobs: str = _option(
        "shared",
        "-s local_cwd: 'shared' trains every branch segment in one training job (torchrun, imports, process group and "
        "data paid once); 'per_segment' launches a job per segment, as other schedulers do",
        component=False,
        choices=JOBS,
    )
    HELP: ClassVar[Dict[str, str]] = {
        "experiment_dir": "folder of the branches (one run folder each), sweep.json and search.json",
        "epochs": "epoch budget E of every schedule (joint: E + 1)",
        "seeds": "comma-separated seeds; one independent search per seed",
    }

    def check(self) -> None:
        super().check()
        if self.eta < 2:
            raise ValueError(f"--eta must be at least 2, got {self.eta}")
        if not 0 < self.rung_fraction <= 1:  # NaN too
            raise ValueError(f"--rung_fraction must be in (0, 1], got {self.rung_fraction:g}")
        if self.jobs not in JOBS:
            raise ValueError(f"--jobs must be one of {', '.join(JOBS)}, got {self.jobs!r}")

    def candidate_names(self) -> List[str]:
        """``--candidates`` as a list (empty: every candidate)."""
        return split_list(self.candidates)


def option_fields(cls: Type[ExperimentOptions], component: bool = False) -> List[dataclasses.Field]:
    """The options of ``cls``, in order (``component``: only those its TorchX component offers)."""
    return [f for f in flag_fields(cls) if not component or f.metadata["component"]]


def option_help(cls: Type[ExperimentOptions], f: dataclasses.Field) -> str:
    """The help of option ``f`` as ``cls`` words it."""
    return cls.HELP.get(f.name, f.metadata["help"])


def add_option_args(parser: argparse.ArgumentParser, cls: Type[ExperimentOptions]) -> None:
    """One argument per option of ``cls``: positional ones by name, the others as ``--NAME`` with their default."""
    for f in option_fields(cls):
        if f.metadata["positional"]:
            parser.add_argument(f.name, help=option_help(cls, f))
            continue
        choices = f.metadata["choices"] or None
        parser.add_argument(f"--{f.name}", type=f.type, default=f.default, choices=choices, help=option_help(cls, f))


def from_args(cls: Type[O], args: argparse.Namespace) -> O:
    """The options :func:`add_option_args` parsed into ``args``, not yet checked."""
    return cls(**{f.name: getattr(args, f.name) for f in option_fields(cls)})


def command_args(options: ExperimentOptions) -> List[str]:
    """The options a TorchX component offers, as the command's arguments: the positional ones, then each
    flag and its value (an empty text left out, to the command's default)."""
    args: List[str] = []
    for f in option_fields(type(options), component=True):
        value = getattr(options, f.name)
        if f.metadata["positional"]:
            args.append(value)
        elif value != "":
            args += [f"--{f.name}", str(value)]
    return args
