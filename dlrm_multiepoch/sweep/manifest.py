"""``sweep.json``, and the checks that keep each run what its flags define.

A run folder belongs to one configuration: every training-app flag of the run,
``--epochs`` included (a schedule relative to ``end``, ``delayed``'s last epoch, an LR
decay, joint's extra epoch are laid out over the whole run). A later sweep into the
same experiment must give each existing run the same flags, and its group the same
common flags, or it is **refused, naming the flag that differs**; ``--group NAME``
sweeps another configuration as a group of its own (``<experiment>/NAME/``), recorded
in the manifest so that ``compare`` keeps the groups apart. The checks read the
manifest *and* each run folder's own record (its ``summary.json`` config, else its
newest checkpoint's), so a lost or damaged manifest entry never lets a run change.
Where a run writes (``--tensorboard_dir``: a moved experiment folder) is not part of it.

Example::

    check_experiment(plan)       # before the first launch; ValueError names the flag
    update_manifest(plan, {"joint-s0": "slurm://torchx/123"})
"""

import contextlib
import fcntl
import json
import os
from dataclasses import asdict
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from dlrm_multiepoch.config_section import RERUN_MAY_CHANGE
from dlrm_multiepoch.json_io import json_safe, write_json
from dlrm_multiepoch.run_files import (
    FORMAT_VERSION,
    MANIFEST_FILE,
    CheckpointFormatError,
    flat_config,
    manifest_path,
    read_manifest,
    recorded_config,
)
from dlrm_multiepoch.sweep.plan import RunSpec, SweepPlan
from dlrm_multiepoch.sweep.strategies import flag_items
from dlrm_multiepoch.train.config import flags_with, parse_config

# Where a run writes and how a launch starts or pauses (a search's --stop_at_epoch): not what the run is.
PLACE_FLAGS = flags_with(RERUN_MAY_CHANGE)
_NOT_SET = "(not set)"


def flag_changes(before: Sequence[str], now: Sequence[str], ignore: Sequence[str] = PLACE_FLAGS) -> List[str]:
    """``--name before -> now`` for each flag whose value differs between two flag lists.

    Example::

        flag_changes(["--epochs", "2"], ["--epochs", "3"])  # ["--epochs 2 -> 3"]
    """
    a, b = dict(flag_items(before)), dict(flag_items(now))
    return [
        f"--{name} {a.get(name, _NOT_SET)} -> {b.get(name, _NOT_SET)}"
        for name in dict.fromkeys([*a, *b])
        if name not in ignore and a.get(name) != b.get(name)
    ]


def check_experiment(plan: SweepPlan, ignore: Sequence[str] = PLACE_FLAGS, instead: str = "") -> None:
    """Refuse a sweep that would change what an existing run or group of ``plan.experiment_dir`` is.

    Args:
        ignore: flags that do not define a run (where it writes, how a launch starts or pauses).
        instead: what to do instead of changing a run's flags (default: the sweep's ``--group NAME``).

    Raises:
        ValueError: other common flags than the group's earlier sweeps, another flag
            (``--epochs`` too) for an existing run (from the manifest or the run folder's
            own record), a checkpoint of an older version, or a damaged manifest; each
            names the flag or file and what to do.
    """
    manifest = read_manifest(plan.experiment_dir)
    if manifest and not isinstance(manifest.get("runs"), dict):
        raise ValueError(f"{manifest_path(plan.experiment_dir)} is not a sweep manifest (no 'runs'); move it aside")
    recorded = group_record(manifest, plan.group).get("common_flags")
    changes = flag_changes(recorded, plan.common_flags) if is_flag_list(recorded) else []
    if changes:
        where = f"group {plan.group!r} of {plan.experiment_dir}" if plan.group else plan.experiment_dir
        raise ValueError(
            f"{where} holds runs swept with other common flags: {'; '.join(changes)}. Its runs would be compared "
            f"as one configuration: give the same flags after --, or sweep this configuration as its own group "
            f"with --group NAME (runs in {os.path.join(plan.experiment_dir, 'NAME')}/), or use a new experiment folder"
        )
    for run in plan.runs:
        entry = manifest.get("runs", {}).get(run.name)
        before = entry.get("flags") if isinstance(entry, dict) else None
        changes = flag_changes(before, run.flags, ignore) if is_flag_list(before) else []
        source = MANIFEST_FILE
        if not changes:
            changes, source = _folder_changes(plan.experiment_dir, run, ignore)
        if changes:
            raise ValueError(_redefined(plan, run, changes, source, instead))


def is_flag_list(value: Any) -> bool:
    """A recorded flag list; anything else is a damaged entry, and the run folder's own record decides."""
    return isinstance(value, list) and all(isinstance(token, str) for token in value)


def _redefined(plan: SweepPlan, run: RunSpec, changes: List[str], source: str, instead: str = "") -> str:
    why = ""
    if any(c.startswith("--epochs ") for c in changes):
        why = " (a schedule is laid out over the whole --epochs budget, so a run never continues under another one)"
    instead = instead or "sweep the new configuration as its own group with --group NAME, or use a new experiment folder"
    return (
        f"run {run.name} in {plan.experiment_dir} was trained with other flags ({source}): {'; '.join(changes)}{why}. "
        f"Keep its flags, or {instead}"
    )


def _folder_changes(experiment_dir: str, run: RunSpec, ignore: Sequence[str] = PLACE_FLAGS) -> Tuple[List[str], str]:
    """How ``run``'s flags differ from the config its folder recorded, and which file recorded it."""
    run_dir = os.path.join(experiment_dir, run.name)
    if not os.path.isdir(run_dir):
        return [], ""
    try:
        config, source = recorded_config(run_dir)
    except CheckpointFormatError as e:
        raise ValueError(
            f"run {run.name}: its checkpoint {e.path} was written by an older version of dlrm-multiepoch (checkpoint "
            f"format {e.found!r}; this version reads format {FORMAT_VERSION}). Finish the run with the version that "
            "wrote it, or move its run folder aside to train it again with this one"
        ) from None
    if config is None:
        return [], ""
    return _config_changes(config, _config_of(run), ignore), os.path.relpath(source, experiment_dir)


def _config_of(run: RunSpec) -> Dict[str, Any]:
    return json.loads(json.dumps(json_safe(parse_config(list(run.flags)).to_dict())))


def _config_changes(
    recorded: Mapping[str, Any], now: Mapping[str, Any], ignore: Sequence[str] = PLACE_FLAGS
) -> List[str]:
    """``--field before -> now`` for every config field both record with different values."""
    a, b = flat_config(recorded), flat_config(now)
    return [
        f"--{key.split('.')[-1]} {a[key]} -> {b[key]}"
        for key in a
        if key in b and key.split(".")[-1] not in ignore and a[key] != b[key]
    ]


def group_record(manifest: Mapping[str, Any], group: str) -> Dict[str, Any]:
    """What the manifest recorded for a group (budget, common flags, ``-j``); the top level is the default group's."""
    if not group:
        return {k: manifest[k] for k in ("budget", "common_flags", "j") if k in manifest}
    record = manifest.get("groups", {}).get(group) if isinstance(manifest.get("groups"), dict) else None
    return dict(record) if isinstance(record, dict) else {}


def recorded_handle(manifest: Mapping[str, Any], run: str) -> Optional[str]:
    """The job handle the manifest recorded for ``run`` (None: none, or a damaged entry)."""
    entry = manifest.get("runs", {}).get(run) if isinstance(manifest.get("runs"), dict) else None
    handle = entry.get("handle") if isinstance(entry, dict) else None
    return handle if isinstance(handle, str) else None


@contextlib.contextmanager
def record_lock(experiment_dir: str, record: str = MANIFEST_FILE) -> Iterator[None]:
    """Serialize read-modify-write of an experiment's record file (``sweep.json``, ``search.json``) between the
    sweeps and searches sharing the folder."""
    os.makedirs(experiment_dir, exist_ok=True)
    with open(os.path.join(experiment_dir, f".{record}.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def update_manifest(plan: SweepPlan, handles: Optional[Dict[str, str]] = None, j: str = "") -> Dict[str, Any]:
    """Merge ``plan`` (and job handles, run name -> handle, and the ``-j`` its runs launch with) into the
    experiment's manifest and write it.

    Earlier sweeps' runs and groups stay; a run's recorded handle stays until a new one replaces it.
    """
    with record_lock(plan.experiment_dir):
        manifest = read_manifest(plan.experiment_dir) or {"runs": {}}
        for run in plan.runs:
            entry = {**asdict(run), "flags": list(run.flags)}
            handle = recorded_handle(manifest, run.name)
            if handle:
                entry["handle"] = handle
            manifest["runs"][run.name] = entry
        for name, handle in (handles or {}).items():
            manifest["runs"][name]["handle"] = handle
        record = {"budget": plan.budget, "common_flags": list(plan.common_flags), **({"j": j} if j else {})}
        if plan.group:
            manifest.setdefault("groups", {})[plan.group] = record
        else:
            manifest.update(record)
        manifest["strategies"] = {
            **manifest.get("strategies", {}),
            **{s.name: {"flags": list(s.flags), "help": s.help, "window": s.window} for s in plan.strategies},
        }
        write_json(manifest_path(plan.experiment_dir), manifest)
    return manifest
