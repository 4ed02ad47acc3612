"""What a sweep checks before its first run: the TorchX launch parameters, the paths, and
each strategy's needs against the data. Every refusal names the flag and what was expected.

Example::

    cfg = scheduler_cfg(runner, "slurm", "partition=cpu")     # ValueError names -cfg
    check_j("1x2"); env_dict("NCCL_DEBUG=WARN")
    check_validation_split(plan)                              # auto needs a 'val' split
"""

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List

from torchx.runner import Runner

from dlrm_multiepoch.data.store import META, is_dataset_folder
from dlrm_multiepoch.sweep.plan import SweepPlan

if TYPE_CHECKING:
    from dlrm_multiepoch.sweep.launch import SweepLauncher
from dlrm_multiepoch.sweep.strategies import flag_value

_J = re.compile(r"^(?:(\d+):)?(\d+)x(\d+)$|^(\d+)$")


def check_scheduler(runner: Runner, scheduler: str) -> None:
    """Refuse a scheduler TorchX does not know (``-s``)."""
    known = list(runner.scheduler_backends())
    if scheduler not in known:
        raise ValueError(f"-s {scheduler!r}: not a TorchX scheduler; choose one of {', '.join(known)}")


def scheduler_cfg(runner: Runner, scheduler: str, text: str) -> Dict[str, object]:
    """``-cfg`` text parsed by the scheduler's own options; an option it does not have is refused."""
    options = runner.scheduler_run_opts(scheduler)
    names = [name for name, _ in options]
    try:
        cfg = options.cfg_from_str(text)
    except Exception as e:  # TorchX raises ValueError/TypeError with its own wording
        raise ValueError(f"-cfg {text!r}: {e}; {scheduler} options: {', '.join(names)}") from None
    given = [part.split("=", 1)[0].strip() for part in text.split(",") if "=" in part]
    unknown = [name for name in given if name not in names]
    if unknown:
        raise ValueError(f"-cfg {text!r}: {scheduler} has no option {unknown[0]!r}; its options: {', '.join(names)}")
    return cfg


def check_j(j: str) -> None:
    """``-j``: ``{nnodes}x{nproc_per_node}`` (or ``{min}:{max}x{nproc}``, or ``{nproc}``), all positive."""
    match = _J.match(j)
    numbers = [int(n) for n in match.groups() if n is not None] if match else []
    if not numbers or min(numbers) <= 0:
        raise ValueError(f"-j {j!r}: expected {{nnodes}}x{{nproc_per_node}} with positive integers, e.g. 1x2")


def env_dict(text: str) -> Dict[str, str]:
    """``--env`` ``A=1,B=2`` as a dict; an entry without ``=`` is refused (TorchX would fold it into the previous one)."""
    entries = [part for part in text.split(",") if part.strip()]
    bad = [part for part in entries if "=" not in part or not part.split("=", 1)[0].strip()]
    if bad:
        raise ValueError(f"--env {text!r}: expected NAME=VALUE pairs separated by commas, got {bad[0]!r}")
    return {k.strip(): v for k, v in (part.split("=", 1) for part in entries)}


def check_request(runner: Runner, launcher: "SweepLauncher") -> None:
    """The scheduler builds the first run's request (a dry run): its own refusals (a missing
    ``-cfg queue`` on Kubernetes, an unknown ``--h`` resource, ...) come now, naming ``-s``."""
    run = launcher.plan.runs[0]
    scheduler = launcher.options.scheduler
    try:
        runner.dryrun(launcher.app(run), scheduler, cfg=launcher.scheduler_cfg(run))
    except Exception as e:  # TorchX and the schedulers raise many types; all are a refused request
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"-s {scheduler} refuses the job of run {run.name}: {message} (see -cfg, --h, --image, -j)") from None


def check_data_path(plan: SweepPlan) -> None:
    """A ``--data_path`` that does not exist on this machine (local runs): every run would fail reading it."""
    data_path = flag_value(plan.common_flags, "data_path")
    if data_path and not os.path.exists(data_path):
        raise ValueError(f"--data_path {data_path} does not exist (from {os.getcwd()}); every run would fail reading it")


def check_validation_split(plan: SweepPlan) -> None:
    """Strategies that decide on a validation split need one: a preprocessed ``--data_path`` folder
    without a ``val`` split ignores ``--val_fraction``, so they would fail after the others trained."""
    needing = [s.name for s in plan.strategies if s.needs_val]
    data_path = flag_value(plan.common_flags, "data_path")
    if not needing or not data_path:
        return
    from dlrm_multiepoch.train.build import VAL  # torch-heavy, as planning is

    if not is_dataset_folder(Path(data_path)):
        return  # raw files: the app splits them by --val_fraction
    try:
        with open(os.path.join(data_path, META)) as f:
            splits: List[str] = list(json.load(f).get("splits", {}))
    except (OSError, ValueError, AttributeError):
        return  # the app names a damaged folder itself
    if VAL not in splits:
        raise ValueError(
            f"strateg{'y' if len(needing) == 1 else 'ies'} {', '.join(needing)} decide(s) on a validation split, "
            f"but --data_path {data_path} is a preprocessed folder with splits {splits} (it ignores --val_fraction): "
            "preprocess it again with --val_fraction (e.g. 0.1), or leave these strategies out"
        )
