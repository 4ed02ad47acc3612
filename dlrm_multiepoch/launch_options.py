"""How a job is launched through TorchX: one dataclass, the single definition of the launcher settings.

From :class:`LaunchOptions` come the ``dlrm-multiepoch sweep``/``search`` flags
(:func:`add_launch_args`), the TorchX components' job parameters
(:func:`~dlrm_multiepoch.component_params.add_launch_params`), the checks of their values
(:meth:`LaunchOptions.check`, each refusal naming the flag) and the way back to a command
line (:meth:`LaunchOptions.to_flags` for the sweep and search commands,
:meth:`LaunchOptions.torchx_args` for ``torchx run``). Torch-free.

Example::

    options = LaunchOptions(scheduler="slurm", j="2x8", gpu=8, env={"NCCL_DEBUG": "WARN"})
    options.check()
    options.torchx_args("dlrm_multiepoch.train", "--epochs", "3")
    # ['run', '-s', 'slurm', 'dlrm_multiepoch.train', '--j', '2x8', '--gpu', '8', '--env', 'NCCL_DEBUG=WARN',
    #  '--', '--epochs', '3']
"""

import argparse
import dataclasses
import importlib.util
import os
import re
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import torchx

from dlrm_multiepoch.config_section import split_list

if TYPE_CHECKING:
    from torchx.runner import Runner

LOCAL = "local_cwd"
# The training app, run as a module of the installed package: any working directory works (train/app.py).
TRAIN_MODULE = "dlrm_multiepoch.train"
# Where a setting goes in TorchX: an option of ``torchx run`` itself, or a parameter of the component.
RUN, COMPONENT = "run", "component"
_J = re.compile(r"^(?:(\d+):)?(\d+)x(\d+)$|^(\d+)$")


def _option(default: Any, help: str, *, flags: Sequence[str] = (), to: str = COMPONENT, factory: Any = None) -> Any:
    """A launch setting: its CLI spellings (default ``--NAME``), help (``{unit}``: run, branch...) and TorchX role."""
    metadata = {"flags": tuple(flags), "help": help, "to": to}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class LaunchOptions:
    """How each job (a sweep's run, a search's branch, or a component's job) is launched.

    Args:
        scheduler: TorchX scheduler (``local_cwd``, ``slurm``, ``kubernetes``, ...).
        scheduler_args: its run options as ``-cfg`` text, e.g. ``queue=default``.
        dryrun: print each job's scheduler request instead of submitting it.
        j, m, script, cpu, gpu, memMB, h, image, env, max_retries, mounts: the
            ``dlrm_multiepoch.train`` component's job parameters; ``script`` (a file) replaces
            the module ``m`` when set.
        scheduler_cfg: ``scheduler_args`` parsed by the scheduler (:meth:`resolve`); not a flag.
    """

    scheduler: str = _option(LOCAL, "TorchX scheduler: local_cwd runs one after another", flags=("-s", "--scheduler"), to=RUN)
    scheduler_args: str = _option(
        "", "scheduler options, e.g. queue=default (TorchX -cfg syntax)", flags=("-cfg", "--scheduler_args"), to=RUN
    )
    dryrun: bool = _option(False, "print each {unit}'s scheduler request, submit nothing", to=RUN)
    j: str = _option("1x2", "{nnodes}x{nproc_per_node} of every {unit} (on GPU hosts at most the GPUs per node)", flags=("-j", "--j"))
    m: str = _option(TRAIN_MODULE, "the app's Python module, run by torchrun -m from the installed package", flags=("-m", "--m"))
    script: str = _option("", "your own entry point instead of the module: a script relative to the job's working directory")
    cpu: int = _option(2, "CPUs per node")
    gpu: int = _option(0, "GPUs per node")
    memMB: int = _option(8192, "host memory per node, in MB")
    h: Optional[str] = _option(None, "a registered named resource; overrides cpu, gpu and memMB")
    image: str = _option(torchx.IMAGE, "container image (kubernetes, docker); ignored by local_cwd and slurm")
    env: Dict[str, str] = _option(None, "environment of every {unit}, e.g. NCCL_DEBUG=WARN,LOGLEVEL=INFO", factory=dict)
    max_retries: int = _option(0, "how many times the scheduler may restart a failed {unit}")
    mounts: List[str] = _option(None, "mounts into the containers, e.g. type=bind,src=/data,dst=/data", factory=list)
    scheduler_cfg: Dict[str, object] = field(default_factory=dict, metadata={"flags": None})

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

    @staticmethod
    def from_args(args: argparse.Namespace) -> "LaunchOptions":
        """The options :func:`add_launch_args` parsed; ``--env`` and ``--mounts`` text becomes a dict and a list."""
        values = {f.name: getattr(args, f.name) for f in launch_fields()}
        values["env"], values["mounts"] = env_dict(values["env"]), split_list(values["mounts"])  # TorchX's list
        return LaunchOptions(**values)

    def component_kwargs(self) -> Dict[str, Any]:
        """The ``dlrm_multiepoch.train`` component's job parameters (and ``torchx.components.dist.ddp``'s)."""
        kwargs = {f.name: getattr(self, f.name) for f in launch_fields(COMPONENT)}
        kwargs["mounts"] = self.mounts or None
        # dist.ddp takes one entry point: the user's script, else the module.
        kwargs.pop("m" if self.script else "script")
        return kwargs

    def entry_point(self) -> str:
        """What each job runs, in words: ``-m dlrm_multiepoch.train`` or the ``--script`` path."""
        return self.script or f"-m {self.m}"

    def to_flags(self, to: Tuple[str, ...] = (RUN, COMPONENT)) -> List[str]:
        """The settings that differ from the defaults, as flags :func:`add_launch_args` parses back."""
        default = LaunchOptions()
        flags: List[str] = []
        for f in launch_fields(*to):
            value = getattr(self, f.name)
            if value == getattr(default, f.name):
                continue
            if f.type is bool:
                flags.append(f"--{f.name}")
                continue
            text = ",".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else value
            flags += [f"--{f.name}", ",".join(text) if isinstance(text, list) else str(text)]
        return flags

    def torchx_args(self, component: str, *app_args: str) -> List[str]:
        """``torchx`` arguments that launch ``component`` with these options: ``torchx run -s ... COMPONENT ...``."""
        run = ["-s", self.scheduler] + (["-cfg", self.scheduler_args] if self.scheduler_args else [])
        return ["run", *run, *(["--dryrun"] if self.dryrun else []), component, *self.to_flags((COMPONENT,)), "--", *app_args]


def launch_fields(*to: str) -> List[dataclasses.Field]:
    """The settings that are flags, in order; only those going ``to`` TorchX's run or component when given."""
    return [f for f in dataclasses.fields(LaunchOptions) if f.metadata["flags"] is not None and (not to or f.metadata["to"] in to)]


def add_launch_args(parser: argparse.ArgumentParser, unit: str, title: str) -> None:
    """One flag per :class:`LaunchOptions` setting, for every ``unit`` (run, branch) of a command."""
    group = parser.add_argument_group(f"launch ({title})")
    defaults = LaunchOptions()
    for f in launch_fields():
        default = getattr(defaults, f.name)
        help = f.metadata["help"].replace("{unit}", unit)
        spellings = f.metadata["flags"] or (f"--{f.name}",)
        if f.type is bool:
            group.add_argument(*spellings, dest=f.name, action="store_true", help=help)
        elif isinstance(default, (dict, list)):  # text on the command line, parsed by LaunchOptions.from_args
            group.add_argument(*spellings, dest=f.name, default="", help=help)
        else:
            kind = int if f.type is int else str
            group.add_argument(*spellings, dest=f.name, type=kind, default=default, help=help)


def split_at_dashes(args: Sequence[str]) -> Tuple[List[str], List[str]]:
    """``[a, b, "--", c]`` -> ``([a, b], [c])``: a command's own arguments and, after the first bare
    ``--``, the flags it passes to each run (the sweep and search commands, the sweep component)."""
    args = list(args)
    if "--" not in args:
        return args, []
    at = args.index("--")
    return args[:at], args[at + 1 :]


def env_dict(text: str) -> Dict[str, str]:
    """``--env`` ``A=1,B=2`` as a dict; an entry without ``=`` is refused (TorchX would fold it into the previous one)."""
    entries = [part for part in text.split(",") if part.strip()]
    bad = [part for part in entries if "=" not in part or not part.split("=", 1)[0].strip()]
    if bad:
        raise ValueError(f"--env {text!r}: expected NAME=VALUE pairs separated by commas, got {bad[0]!r}")
    return {k.strip(): v for k, v in (part.split("=", 1) for part in entries)}


def _importable(module: str) -> bool:
    """Whether ``python -m module`` finds it here (its parent packages are imported, as ``-m`` does)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or an empty name part
        return False
