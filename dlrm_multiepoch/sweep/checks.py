"""What a sweep checks before its first run, beyond each launch setting's own check
(:meth:`~dlrm_multiepoch.launch_options.LaunchOptions.check`): the scheduler's request, the
paths, each strategy's needs against the data, and that the data its runs trained on is
still what their paths hold. Every refusal names the flag or file and what was expected.

Example::

    check_request(runner, launcher)                           # the scheduler refuses -cfg, --h, ...
    check_validation_split(plan)                              # auto needs a 'val' split
    check_same_data(plan, "sweep it in a new experiment folder")   # no run continues on changed data
"""

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

from torchx.runner import Runner

from dlrm_multiepoch.data.fetch import default_cache_dir
from dlrm_multiepoch.data.identity import IDENTITY, changed_since
from dlrm_multiepoch.data.source_files import input_paths
from dlrm_multiepoch.data.store import META, is_dataset_folder
from dlrm_multiepoch.names import VAL
from dlrm_multiepoch.run_files import SEARCH_FILE, CheckpointError, read_manifest, read_summary, recorded_field
from dlrm_multiepoch.run_files import search_record_path
from dlrm_multiepoch.sweep.manifest import is_flag_list
from dlrm_multiepoch.sweep.plan import RunSpec, SweepPlan

if TYPE_CHECKING:
    from dlrm_multiepoch.sweep.launch import SweepLauncher
from dlrm_multiepoch.sweep.strategies import flag_value


def check_not_a_search(experiment_dir: str) -> None:
    """A sweep never trains into a schedule search's folder (``search.json``): its run folders are the search's
    branches, paused and started from each other's checkpoints by flags the search sets per launch; a sweep
    would redefine them (and be refused naming a flag it never gave)."""
    if os.path.isfile(search_record_path(experiment_dir)):
        raise ValueError(
            f"{experiment_dir} is a schedule search's folder (it holds {SEARCH_FILE}): its run folders are the "
            f"search's branches, not a sweep's runs. Sweep into another experiment folder; rerun the search with "
            f"dlrm-multiepoch search, or compare it with dlrm-multiepoch compare {experiment_dir}"
        )


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


def check_same_data(plan: SweepPlan, instead: str) -> None:
    """Refuse to launch into an experiment whose runs trained on data that has changed since (a file at the
    same path rewritten: a nightly export), naming the run, the file and what changed.

    Every run folder of the plan, and of its group in the manifest, is compared with what its
    recorded data paths hold now, by content (:func:`~dlrm_multiepoch.data.identity.changed_since`;
    read by stat, so cheap at any size). A run resumed or compared on other data would mix two
    datasets in one curve or one table. Paths this host cannot see (a cluster's) are left to the
    trainer, which refuses a resume onto other data itself.

    Args:
        instead: what to do to train on the new data (the sweep's or the search's words).
    """
    runs: List[RunSpec] = list(plan.runs)
    try:
        manifest = read_manifest(plan.experiment_dir)
    except ValueError:
        manifest = {}  # damaged: check_experiment names it
    entries = manifest.get("runs") if isinstance(manifest.get("runs"), dict) else {}
    planned = {r.name for r in runs}
    for name, entry in entries.items():
        flags = entry.get("flags") if isinstance(entry, dict) else None
        if is_flag_list(flags) and entry.get("group", "") == plan.group and name not in planned:
            runs.append(RunSpec(name, str(entry.get("strategy", "")), 0, 0, tuple(flags), group=plan.group))
    for run in runs:
        run_dir = os.path.join(plan.experiment_dir, run.name)
        if not os.path.isdir(run_dir):
            continue
        try:
            recorded, _ = recorded_field(run_dir, IDENTITY)
        except CheckpointError:
            continue  # an older format: check_experiment names it
        changes = changed_since(recorded, flag_value(run.flags, "cache_dir") or default_cache_dir())
        if changes:
            raise ValueError(
                f"run {run.name} in {plan.experiment_dir} trained on data that has changed since: "
                f"{'; '.join(changes)}. Its checkpoints and evaluations are of the data it trained on, so it neither "
                f"continues nor is compared on other data: to train on the new data, {instead}; to fine-tune one of its "
                f"checkpoints on it, start a new run with --start_from {os.path.join(run_dir, 'checkpoints', 'step_N')}"
            )


def ranks(j: str) -> Optional[int]:
    """The ranks a ``-j`` value launches (``2x4``: 8; ``4``: 4); None for an elastic range (``1:2x4``)."""
    match = re.fullmatch(r"(\d+)x(\d+)|(\d+)", j.strip())
    if match is None:
        return None
    return int(match[1]) * int(match[2]) if match[1] else int(match[3])


def check_ranks(plan: SweepPlan, j: str, recorded: Any, record: str, instead: str) -> None:
    """Refuse to launch on another number of ranks than the experiment's runs trained on (the ``-j`` its
    record keeps, else each run folder's ``world_size``): a run continued on other ranks reads its rows in
    another order (the block shuffle deals them to ranks), and would be ranked against runs of the other
    order. The same number of ranks on other nodes (``1x2``, ``2x1``) is the same training.

    Args:
        recorded: the ``-j`` the experiment's record keeps (None: none, an older record).
        record: that file, for the message.
        instead: what to do to launch on other ranks (the sweep's or the search's words).
    """
    now = ranks(j)
    if now is None:
        return
    found = []
    if isinstance(recorded, str) and ranks(recorded) not in (None, now):
        found.append((f"{record} records -j {recorded} ({_ranks(ranks(recorded))})", recorded))
    for run in plan.runs:
        try:
            size = read_summary(os.path.join(plan.experiment_dir, run.name)).get("world_size")
        except ValueError:
            continue  # damaged: named by the checks that read it
        if isinstance(size, int) and not isinstance(size, bool) and size != now:
            found.append((f"run {run.name} trained on {_ranks(size)} (its summary.json)", None))
    if found:
        what, earlier = found[0]
        again = f"Rerun with -j {earlier}" if earlier else "Rerun with -j giving that many ranks"
        raise ValueError(
            f"{what}, this launch has -j {j} ({_ranks(now)}): a run continued on other ranks reads its rows in another "
            f"order, and its curve would be ranked against those of the other. {again}, or {instead}"
        )


def _ranks(n: int) -> str:
    return f"{n} rank{'' if n == 1 else 's'}"
