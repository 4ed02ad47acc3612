"""The sweep's and the search's own options: one dataclass each of
:func:`~dlrm_multiepoch.config_section.option` fields, from which come their commands' flags, their
TorchX components' parameters (the ``SWEEP_SEARCH_COMPONENT`` role) and a component job's command
line (``argv_of``); ``check()`` refuses a bad value naming its flag. Torch-free.

Example::

    options = SearchOptions("runs/ml", seeds="0,1", eta=2)
    options.check()
    options.seed_list     # [0, 1]
    argv_of(options)      # ['runs/ml', '--seeds=0,1', '--eta=2']
"""

from dataclasses import dataclass
from typing import List

from dlrm_multiepoch.config_section import MAX_SEED, SWEEP_SEARCH_COMPONENT, option, parsed, split_list

JOBS = ("shared", "per_segment")  # --jobs
_COMPONENT = (SWEEP_SEARCH_COMPONENT,)


class ExperimentOptions:
    """What the sweep and the search share: an experiment folder, an epoch budget, seeds (each subclass
    declares them with its own help)."""

    experiment_dir: str
    epochs: int
    seeds: str
    seed_list: List[int]

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
    """``dlrm-multiepoch sweep``'s own options, each with its help (its strategies and ``--list`` are the
    sweep command's; ``--group`` is the command's alone)."""

    experiment_dir: str = option(help="folder of the runs (one per strategy and seed) and sweep.json", positional=True,
                                 roles=_COMPONENT)  # fmt: skip
    epochs: int = option(
        3, "epoch budget of every strategy (presets may differ: joint-1ep runs 1, joint the budget + 1)", roles=_COMPONENT
    )
    seeds: str = option("0", "comma-separated seeds; each strategy runs once per seed", roles=_COMPONENT)
    windows: str = option(
        "", "update-window sweep: comma-separated epochs at which the tables start training, e.g. 0,0.5,1,1.5",
        roles=_COMPONENT,
    )  # fmt: skip
    group: str = option(
        "",
        "sweep another configuration (other --epochs or common flags) into the experiment as its own group: runs in "
        "EXPERIMENT_DIR/GROUP/, recorded in sweep.json",
    )
    seed_list: List[int] = parsed()  # --seeds
    window_list: List[float] = parsed()  # --windows

    def check(self) -> None:
        super().check()
        try:
            self.window_list = [float(w) for w in split_list(self.windows)]
        except ValueError:
            raise ValueError(f"--windows expects comma-separated epochs, got {self.windows!r}") from None


@dataclass
class SearchOptions(ExperimentOptions):
    """``dlrm-multiepoch search``'s own options, each with its help (``--jobs`` is the command's alone)."""

    experiment_dir: str = option(help="folder of the branches (one run folder each), sweep.json and search.json",
                                 positional=True, roles=_COMPONENT)  # fmt: skip
    epochs: int = option(3, "epoch budget E of every schedule (joint: E + 1)", roles=_COMPONENT)
    seeds: str = option("0", "comma-separated seeds; one independent search per seed", roles=_COMPONENT)
    eta: int = option(3, "successive halving: the top 1/eta of the judged branches go on at each rung", roles=_COMPONENT)
    rung_fraction: float = option(
        0.3,
        "a branch is first judged (against its cohort: tables as young) this fraction of an epoch after the tables it "
        "deploys start; 1: after a whole epoch, with every branch",
        roles=_COMPONENT,
    )
    candidates: str = option(
        "", "comma-separated subset of the candidates, empty for all (a branch needs its parent)", roles=_COMPONENT
    )
    jobs: str = option(
        "shared",
        "-s local_cwd: 'shared' trains every branch segment in one training job (torchrun, imports, process group and "
        "data paid once); 'per_segment' launches a job per segment, as other schedulers do",
        choices=JOBS,
    )
    seed_list: List[int] = parsed()  # --seeds

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
