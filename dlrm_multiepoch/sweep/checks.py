"""What a sweep checks before its first run, beyond each launch setting's own check
(:meth:`~dlrm_multiepoch.launch_options.LaunchOptions.check`): the scheduler's request, the
paths, and each strategy's needs against the data. Every refusal names the flag and what
was expected.

Example::

    check_request(runner, launcher)                           # the scheduler refuses -cfg, --h, ...
    check_validation_split(plan)                              # auto needs a 'val' split
"""

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, List

from torchx.runner import Runner

from dlrm_multiepoch.data.config import input_paths
from dlrm_multiepoch.data.store import META, is_dataset_folder
from dlrm_multiepoch.names import VAL
from dlrm_multiepoch.sweep.plan import SweepPlan

if TYPE_CHECKING:
    from dlrm_multiepoch.sweep.launch import SweepLauncher
from dlrm_multiepoch.sweep.strategies import flag_value


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
    for path in input_paths(data_path) if data_path else []:  # one path, or several files read as one dataset
        if not os.path.exists(path):
            raise ValueError(f"--data_path {path} does not exist (from {os.getcwd()}); every run would fail reading it")


def check_validation_split(plan: SweepPlan) -> None:
    """Strategies that decide on a validation split need one: a preprocessed ``--data_path`` folder
    without a ``val`` split ignores ``--val_fraction``, so they would fail after the others trained."""
    needing = [s.name for s in plan.strategies if s.needs_val]
    data_path = flag_value(plan.common_flags, "data_path")
    if not needing or not data_path:
        return
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
