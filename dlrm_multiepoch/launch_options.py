"""How a job is launched through TorchX: :class:`LaunchOptions`, a dataclass of
:func:`~dlrm_multiepoch.config_section.option` fields, from which come the sweep and search commands'
launch flags, the TorchX components' job parameters (their roles) and the way back to a command line
(``argv_of``; :meth:`LaunchOptions.torchx_args` for ``torchx run``). Torch-free.

Example::

    options = LaunchOptions(scheduler="slurm", j="2x8", gpu=8, env={"NCCL_DEBUG": "WARN"})
    options.check()
    options.torchx_args("dlrm_multiepoch.train", "--epochs", "3")
    # ['run', '-s', 'slurm', 'dlrm_multiepoch.train', '--j=2x8', '--gpu=8', '--env=NCCL_DEBUG=WARN',
    #  '--', '--epochs', '3']
"""

import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import torchx

from dlrm_multiepoch.config_section import (
    PREPROCESS_COMPONENT,
    SWEEP_SEARCH_COMPONENT,
    TRAIN_COMPONENT,
    argv_of,
    option,
    options_of,
    parsed,
)

if TYPE_CHECKING:
    from torchx.runner import Runner

LOCAL = "local_cwd"
# The training app, run as a module of the installed package: any working directory works (train/app.py).
TRAIN_MODULE = "dlrm_multiepoch.train"
_J = re.compile(r"^(?:(\d+):)?(\d+)x(\d+)$|^(\d+)$")
# Which components offer a setting: the sweep's and search's (they pass it to each run), a training
# job's (the train component's and torchx run's), a preprocessing job's.
_RUNS = (SWEEP_SEARCH_COMPONENT,)
_JOB = (TRAIN_COMPONENT, SWEEP_SEARCH_COMPONENT)
_ANY_JOB = (*_JOB, PREPROCESS_COMPONENT)


@dataclass
class LaunchOptions:
    """How each job (a sweep's run, a search's branch, or a component's job) is launched: the options, each
    with its help (``script``, a file, replaces the module ``m`` when set), and ``scheduler_cfg``,
    ``scheduler_args`` parsed by the scheduler (:meth:`resolve`)."""

    scheduler: str = option(LOCAL, "TorchX scheduler: local_cwd runs one after another", flags=("-s", "--scheduler"),
                            roles=_RUNS)  # fmt: skip
    scheduler_args: str = option("", "scheduler options, e.g. queue=default (TorchX -cfg syntax)",
                                 flags=("-cfg", "--scheduler_args"), roles=_RUNS)  # fmt: skip
    dryrun: bool = option(False, "print each {unit}'s scheduler request, submit nothing", flags=("--dryrun",))
    m: str = option(TRAIN_MODULE, "the app's Python module, run by torchrun -m from the installed package",
                    flags=("-m", "--m"), roles=_JOB)  # fmt: skip
    script: str = option("", "your own entry point instead of the module: a script relative to the job's working "
                         "directory", roles=_JOB)  # fmt: skip
    j: str = option("1x2", "{nnodes}x{nproc_per_node} of every {unit} (on GPU hosts at most the GPUs per node)",
                    flags=("-j", "--j"), roles=_JOB)  # fmt: skip
    cpu: int = option(2, "CPUs per node", roles=_ANY_JOB)
    gpu: int = option(0, "GPUs per node", roles=_JOB)
    memMB: int = option(8192, "host memory per node, in MB", roles=_ANY_JOB)
    h: Optional[str] = option(None, "a registered named resource; overrides cpu, gpu and memMB", roles=_ANY_JOB)
    image: str = option(torchx.IMAGE, "container image (kubernetes, docker); ignored by local_cwd and slurm",
                        roles=_ANY_JOB)  # fmt: skip
    env: Dict[str, str] = option(help="environment of every {unit}, e.g. NCCL_DEBUG=WARN,LOGLEVEL=INFO", factory=dict,
                                 roles=_ANY_JOB)  # fmt: skip
    max_retries: int = option(0, "how many times the scheduler may restart a failed {unit}", roles=_ANY_JOB)
    mounts: List[str] = option(help="mounts into the containers, e.g. type=bind,src=/data,dst=/data", factory=list,
                               roles=_ANY_JOB)  # fmt: skip
    scheduler_cfg: Dict[str, object] = parsed(dict)

    def check(self) -> None:
        """Refuse a bad value, naming its flag (the scheduler's own checks need a runner: :meth:`resolve`)."""
        match = _J.match(self.j)
        numbers = [int(n) for n in match.groups() if n is not None] if match else []
        if not numbers or min(numbers) <= 0:
            raise ValueError(f"-j {self.j!r}: expected {{nnodes}}x{{nproc_per_node}} with positive integers, e.g. 1x2")
        for name, low in (("cpu", 1), ("gpu", 0), ("memMB", 1), ("max_retries", 0)):
            if getattr(self, name) < low:
                raise ValueError(f"--{name} must be >= {low}, got {getattr(self, name)}")
        for name in ("m", "image"):
            if not getattr(self, name):
                raise ValueError(f"--{name} must not be empty")
        if self.script and self.m != TRAIN_MODULE:
            raise ValueError(f"--script {self.script!r} and -m {self.m!r} name two entry points: give one")
        bad = [k for k in self.env if not k.strip() or "=" in k]
        if bad:
            raise ValueError(f"--env: {bad[0]!r} is not a variable name")
        if self.mounts:
            from torchx.specs import parse_mounts

            try:
                parse_mounts(self.mounts)
            except (KeyError, ValueError) as e:
                raise ValueError(f"--mounts {','.join(self.mounts)!r}: {str(e).strip(chr(39))}") from None

    def check_entry_point(self) -> None:
        """Refuse an entry point this machine cannot start: a missing ``--script`` (relative to the
        working directory) or a module this Python cannot import. For jobs run here (``local_cwd``)."""
        if self.script:
            if not os.path.isfile(self.script):
                raise ValueError(f"--script {self.script!r} not found from {os.getcwd()}; leave it out to run -m {self.m}")
        elif not _importable(self.m):
            raise ValueError(f"-m {self.m!r}: no such module in {sys.executable}")

    def resolve(self, runner: "Runner") -> None:
        """Check ``-s`` against TorchX's schedulers and parse ``-cfg`` with the scheduler's own options."""
        known = list(runner.scheduler_backends())
        if self.scheduler not in known:
            raise ValueError(f"-s {self.scheduler!r}: not a TorchX scheduler; choose one of {', '.join(known)}")
        options = runner.scheduler_run_opts(self.scheduler)
        names = [name for name, _ in options]
        try:
            cfg = options.cfg_from_str(self.scheduler_args)
        except Exception as e:  # TorchX raises ValueError/TypeError with its own wording
            raise ValueError(f"-cfg {self.scheduler_args!r}: {e}; {self.scheduler} options: {', '.join(names)}") from None
        given = [part.split("=", 1)[0].strip() for part in self.scheduler_args.split(",") if "=" in part]
        unknown = [name for name in given if name not in names]
        if unknown:
            raise ValueError(
                f"-cfg {self.scheduler_args!r}: {self.scheduler} has no option {unknown[0]!r}; its options: {', '.join(names)}"
            )
        self.scheduler_cfg = cfg

    def component_kwargs(self) -> Dict[str, Any]:
        """The ``dlrm_multiepoch.train`` component's job parameters (and ``torchx.components.dist.ddp``'s)."""
        kwargs = {o.name: getattr(self, o.name) for o in options_of(LaunchOptions) if TRAIN_COMPONENT in o.roles}
        kwargs["mounts"] = self.mounts or None
        # dist.ddp takes one entry point: the user's script, else the module.
        kwargs.pop("m" if self.script else "script")
        return kwargs

    def torchx_args(self, component: str, *app_args: str) -> List[str]:
        """``torchx`` arguments that launch ``component`` with these options: ``torchx run -s ... COMPONENT ...``."""
        run = ["-s", self.scheduler] + (["-cfg", self.scheduler_args] if self.scheduler_args else [])
        return ["run", *run, *(["--dryrun"] if self.dryrun else []), component, *argv_of(self, TRAIN_COMPONENT), "--", *app_args]


def split_at_dashes(args: Sequence[str]) -> Tuple[List[str], List[str]]:
    """``[a, b, "--", c]`` -> ``([a, b], [c])``: a command's own arguments and, after the first bare
    ``--``, the flags it passes to each run (the sweep and search commands, the sweep component)."""
    args = list(args)
    if "--" not in args:
        return args, []
    at = args.index("--")
    return args[:at], args[at + 1 :]


def _importable(module: str) -> bool:
    """Whether ``python -m module`` finds it here (its parent packages are imported, as ``-m`` does)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or an empty name part
        return False
