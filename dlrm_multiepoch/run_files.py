"""The files of run and experiment folders: every name, and torch-free readers of each.

A **run folder** (``<tensorboard_dir>/<run_name>``) is what one training run writes:

- ``events.out.tfevents.*``: TensorBoard scalars;
- ``summary.json``: the config, every evaluation, the wall time once training ended
  (rewritten after every evaluation);
- ``trainer.lock``: names the live trainer that writes the folder;
- ``checkpoints/step_<S>/``: the checkpoint after ``S`` optimizer steps; its
  ``trainer_state.json``, written last, marks it complete; ``protected.json`` keeps it
  from pruning; ``step_<S>.tmp/`` is a save in progress (or an interrupted one);
- ``checkpoints/best_step_<S>/``: the automatic schedule's best-validation weights.

An **experiment folder** (a sweep's or a search's) holds run folders
``<strategy>-s<seed>`` (``<group>/<strategy>-s<seed>`` for a sweep ``--group``),
``sweep.json`` (the manifest), ``search.json`` (a search's record), and ``compare/`` and
``logs/``. Nothing here imports torch: ``sweep`` and ``compare`` plan and read runs
without it.

Example::

    summary = read_summary("runs/bx/joint-s0")
    done = [e["epoch"] for e in whole_epoch_evaluations(summary)]
    newest = complete_checkpoints(checkpoints_dir("runs/bx/joint-s0"))[-1]
"""

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from dlrm_multiepoch.file_digests import cached_file_digest, file_digest
from dlrm_multiepoch.json_io import read_json

SUMMARY_FILE = "summary.json"
LOCK_FILE = "trainer.lock"
CHECKPOINTS_DIR = "checkpoints"
STATE_FILE = "trainer_state.json"  # written last inside a checkpoint folder: it marks the folder complete
PROTECTED_FILE = "protected.json"  # a checkpoint pruning must keep (e.g. the best validation one)
TMP_SUFFIX = ".tmp"  # a folder being saved, renamed once complete
MANIFEST_FILE = "sweep.json"
SEARCH_FILE = "search.json"
EVENTS_PREFIX = "events.out.tfevents."
COMPARE_DIR = "compare"  # compare's report files in an experiment folder
LOGS_DIR = "logs"  # the local sweep's per-run logs, <experiment>/logs/<run>
OWN_FOLDERS = (COMPARE_DIR, LOGS_DIR)  # what sweep and compare write into an experiment besides run folders
FORMAT_VERSION = 2  # of trainer_state.json
# Starts the line a trainer prints when its data fail to load: every run of the same data flags would fail alike.
DATA_ERROR_MARK = "dlrm-multiepoch: the data failed to load:"
_STEP_FOLDER = re.compile(r"^step_(\d+)$")
BEST_FOLDER = re.compile(r"^best_step_(\d+)(\.tmp)?$")
_RUN_NAME = re.compile(r"^(?P<strategy>.+)-s(?P<seed>-?\d+)$")
# Other saved work a fresh start must not run over: best-validation checkpoints, and
# format 1's per-epoch folders and pointer file.
_OTHER_SAVED = re.compile(r"^(best_step_\d+|epoch_\d+|latest\.json)$")


class CheckpointError(ValueError):
    """A checkpoint folder that is incomplete, damaged or of another format; the message names the file."""


class CheckpointFormatError(CheckpointError):
    """A checkpoint folder ``path`` whose state file has another ``found`` format (another version wrote it)."""

    def __init__(self, path: str, found: Any) -> None:
        self.path, self.found = path, found
        if isinstance(found, int) and found < FORMAT_VERSION:
            super().__init__(
                f"checkpoint {path}: written by an older version of dlrm-multiepoch (format {found}, this version "
                f"reads format {FORMAT_VERSION}); resume it with the version that wrote it, or start over with "
                "--overwrite or another --run_name"
            )
        else:
            super().__init__(f"checkpoint {path}: format {found!r}, this version reads format {FORMAT_VERSION}")


# -- names and paths ----------------------------------------------------------------


def run_folder_name(strategy: str, seed: int) -> str:
    """A sweep's (or search branch's) run folder name: ``<strategy>-s<seed>``."""
    return f"{strategy}-s{seed}"


def parse_run_folder_name(name: str) -> Optional[Tuple[str, int]]:
    """``"joint-s0"`` -> ``("joint", 0)``; None for a name without a ``-s<seed>`` suffix."""
    match = _RUN_NAME.match(name)
    return (match["strategy"], int(match["seed"])) if match else None


def summary_path(run_dir: str) -> str:
    return os.path.join(run_dir, SUMMARY_FILE)


def lock_path(run_dir: str) -> str:
    return os.path.join(run_dir, LOCK_FILE)


def checkpoints_dir(run_dir: str) -> str:
    return os.path.join(run_dir, CHECKPOINTS_DIR)


def state_path(checkpoint: str) -> str:  # a checkpoint folder's trainer_state.json
    return os.path.join(checkpoint, STATE_FILE)


def manifest_path(experiment_dir: str) -> str:
    return os.path.join(experiment_dir, MANIFEST_FILE)


def search_record_path(experiment_dir: str) -> str:
    return os.path.join(experiment_dir, SEARCH_FILE)


def checkpoint_name(step: int) -> str:
    """Folder name of the checkpoint taken after ``step`` optimizer steps."""
    return f"step_{step}"


def best_checkpoint_name(step: int) -> str:
    """Folder name of the best-validation checkpoint of ``step``."""
    return f"best_step_{step}"


def step_of(path: str) -> Optional[int]:
    """The step in a checkpoint folder's name, or None if it is not one."""
    match = _STEP_FOLDER.match(os.path.basename(os.path.normpath(path)))
    return int(match.group(1)) if match else None


def has_event_files(run_dir: str) -> bool:
    """Whether ``run_dir`` holds TensorBoard event files (False when it does not exist)."""
    return os.path.isdir(run_dir) and any(name.startswith(EVENTS_PREFIX) for name in os.listdir(run_dir))


# -- JSON records -------------------------------------------------------------------


def read_optional_json(path: str) -> Dict[str, Any]:
    """A JSON record file's object; empty when the file does not exist, ValueError naming it when it is not
    JSON or holds no JSON object (so no reader checks the type again)."""
    if not os.path.isfile(path):
        return {}
    record = read_json(path)
    if not isinstance(record, dict):
        raise ValueError(f"{path} holds a JSON {type(record).__name__}, not an object (damaged)")
    return record


def read_summary(run_dir: str) -> Dict[str, Any]:
    """A run's ``summary.json`` (empty when there is none yet); ValueError naming it when it is not JSON."""
    return read_optional_json(summary_path(run_dir))


def summary_finished(summary: Mapping[str, Any]) -> bool:
    """Whether a summary records the end of training (the app writes the wall time when its loop ends)."""
    return "wall_time_s" in summary


def whole_epoch_evaluations(summary: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The evaluations a summary records after a whole epoch (epoch 1, 2, ...), in order.

    Mid-epoch evaluations (``--eval_every_n_steps``, the automatic schedule's) and
    damaged entries are left out.
    """
    evaluations = summary.get("evaluations", [])
    return [
        e for e in (evaluations if isinstance(evaluations, list) else [])
        if isinstance(e, dict) and isinstance(e.get("epoch"), (int, float)) and not isinstance(e["epoch"], bool)
        and float(e["epoch"]).is_integer() and e["epoch"] > 0
    ]  # fmt: skip


def read_manifest(experiment_dir: str) -> Dict[str, Any]:
    """``sweep.json`` of an experiment folder (empty when there is none); invalid JSON raises ValueError."""
    return read_optional_json(manifest_path(experiment_dir))


# -- checkpoints --------------------------------------------------------------------


def step_folders(folder: str) -> List[Tuple[int, str]]:
    """``(step, path)`` of every ``step_<S>`` folder in ``folder`` (complete or not), oldest first."""
    if not os.path.isdir(folder):
        return []
    found = []
    for name in os.listdir(folder):
        match = _STEP_FOLDER.match(name)
        if match and os.path.isdir(os.path.join(folder, name)):
            found.append((int(match.group(1)), os.path.join(folder, name)))
    return sorted(found)


def complete_checkpoints(folder: str) -> List[Tuple[int, str]]:
    """``(step, path)`` of every folder whose save finished (it has a state file), oldest first.

    Finished is not intact: :func:`~dlrm_multiepoch.train.checkpoint.find.verify_checkpoint`
    also checks every file against the sizes and checksums recorded at save time.
    """
    return [(s, p) for s, p in step_folders(folder) if os.path.isfile(state_path(p))]


def checkpoint_progress(checkpoint: str) -> Dict[str, Any]:
    """The training progress a checkpoint's state file records (``epoch``, ``batch_in_epoch``, ``step``);
    empty when the file is damaged (a reader then falls back to another checkpoint)."""
    try:
        progress = read_optional_json(state_path(checkpoint)).get("parts", {}).get("progress", {})
    except (ValueError, AttributeError):
        return {}
    return progress if isinstance(progress, dict) else {}


def epoch_end(checkpoint: str) -> Optional[int]:
    """The epochs a checkpoint saved at an epoch's end holds (None: saved inside an epoch, or damaged)."""
    progress = checkpoint_progress(checkpoint)
    epoch = progress.get("epoch")
    return epoch if isinstance(epoch, int) and progress.get("batch_in_epoch") == 0 else None


def saved_work(folder: str) -> List[str]:
    """Paths in ``folder`` that hold training state: checkpoints (step, best-validation, older format).

    Interrupted saves (``*.tmp``) are not listed: they never resume, and saving removes them.
    """
    if not os.path.isdir(folder):
        return []
    names = sorted(n for n in os.listdir(folder) if _STEP_FOLDER.match(n) or _OTHER_SAVED.match(n))
    return [os.path.join(folder, n) for n in names]


def is_protected(path: str) -> bool:
    return os.path.isfile(os.path.join(path, PROTECTED_FILE))


def read_checkpoint_state(path: str) -> Dict[str, Any]:
    """A checkpoint folder's ``trainer_state.json``, checked to be complete and of this version's format.

    Its files are not checked against their checksums (that is collective and reads
    every file: :func:`~dlrm_multiepoch.train.checkpoint.find.verify_checkpoint`).

    Raises:
        CheckpointError: no state file (an interrupted save) or one that is not JSON, naming it.
        CheckpointFormatError: another format (an older version wrote it).
    """
    file = state_path(path)
    if not os.path.isfile(file):
        raise CheckpointError(
            f"checkpoint {path}: incomplete (no {STATE_FILE}, which a save writes last: the save was interrupted)"
        )
    try:
        state = read_json(file)
    except ValueError as e:
        raise CheckpointError(f"checkpoint {path}: {e}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path}: {STATE_FILE} holds no JSON object (damaged)")
    found = state.get("format")
    if found != FORMAT_VERSION:
        raise CheckpointFormatError(path, found)
    return state


def checkpoint_files_problem(
    path: str, files: Mapping[str, Any], names: Optional[Sequence[str]] = None, digest: Callable[[str], str] = file_digest
) -> Optional[str]:
    """The first file of a checkpoint that differs from what its save recorded (``files``: name -> ``bytes``,
    ``sha256``), as one line naming it; None when every one of ``names`` (default: all) matches."""
    for name in sorted(files) if names is None else names:
        expected, file = files[name], os.path.join(path, name)
        if not isinstance(expected, Mapping) or not isinstance(expected.get("bytes"), int):
            return f"checkpoint {path}: {STATE_FILE} records no size for file {name} (damaged)"
        if not os.path.isfile(file):
            return f"checkpoint {path}: file {name} is missing"
        size = os.path.getsize(file)
        if size != expected["bytes"]:
            return f"checkpoint {path}: file {name} has {size} bytes, the save wrote {expected['bytes']} (truncated?)"
        if digest(file) != expected.get("sha256"):
            return f"checkpoint {path}: file {name} has another sha256 than the save recorded (damaged)"
    return None


def checkpoint_problem(path: str, cache_dir: Optional[str] = None) -> Optional[str]:
    """Why the checkpoint folder ``path`` is not intact (missing, incomplete, of another format, a file missing,
    truncated or of other content), as one line naming it; None when it is. Torch-free, one process: what the
    search and ``compare`` check before they name a checkpoint deployed (each file's digest remembered under
    ``cache_dir`` by its stat, :mod:`~dlrm_multiepoch.file_digests`).
    """
    if not os.path.isdir(path):
        return f"checkpoint {path} is missing (deleted?)"
    try:
        files = read_checkpoint_state(path).get("files", {})
    except CheckpointError as e:
        return str(e)
    if not isinstance(files, Mapping):
        return f"checkpoint {path}: {STATE_FILE} records no files (damaged)"
    return checkpoint_files_problem(path, files, digest=lambda file: cached_file_digest(file, cache_dir))


@dataclass
class CheckpointInfo:
    """A complete, verified checkpoint folder and its ``trainer_state.json``.

    Args:
        path: the checkpoint folder.
        state: the saved state file: ``step``, ``job_id``, ``world_size``, ``config``,
            ``tables``, ``parts`` (the JSON state of each checkpointed part, e.g.
            ``progress``, ``freeze``, ``metrics``), ``tensor_parts`` (names of the parts
            saved in the DCP checkpoint) and ``files`` (size and sha256 of each file).
    """

    path: str
    state: Dict[str, Any]

    @property
    def step(self) -> int:
        """Optimizer steps completed when it was saved."""
        return int(self.state["step"])

    @property
    def parts(self) -> Dict[str, Any]:
        return self.state.get("parts", {})


def newest_checkpoint(run_dir: str) -> Optional[CheckpointInfo]:
    """A run's newest complete checkpoint (not verified); None when it has none.

    Raises:
        CheckpointError: its state file is damaged or of another format (naming it).
    """
    saved = complete_checkpoints(checkpoints_dir(run_dir))
    return CheckpointInfo(saved[-1][1], read_checkpoint_state(saved[-1][1])) if saved else None


def flat_config(config: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """A recorded (nested) config as ``{"data.dataset": ..., "epochs": ...}``: dotted paths to its leaves."""
    out: Dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            out |= flat_config(value, f"{prefix}{key}.")
        else:
            out[prefix + key] = value
    return out


def path_matches(path: str, patterns: Sequence[str]) -> bool:
    """Whether the dotted config ``path`` is one of ``patterns``, a pattern ending in "." covering a whole section.

    Example::

        path_matches("auto.auto_patience", ("epochs", "auto."))   # True
    """
    return any(path == p or (p.endswith(".") and path.startswith(p)) for p in patterns)


def recorded_field(run_dir: str, name: str) -> Tuple[Optional[Dict[str, Any]], str]:
    """An object a run folder recorded under ``name`` (``config``, ``data_identity``), and the file it came from.

    ``summary.json``'s, else (no summary, a damaged one, or none there) its newest complete
    checkpoint's; ``(None, "")`` when neither holds one.

    Raises:
        CheckpointFormatError: the newest checkpoint is of an older format (naming it).
    """
    try:
        value = read_summary(run_dir).get(name)
    except (ValueError, AttributeError):
        value = None  # damaged summary: the checkpoint speaks for the run
    source = summary_path(run_dir)
    try:
        newest = newest_checkpoint(run_dir)
    except CheckpointError as e:
        if isinstance(e, CheckpointFormatError):
            raise
        newest = None  # damaged, not old: the trainer falls back to an older checkpoint, naming it
    if not isinstance(value, Mapping) and newest is not None:
        value, source = newest.state.get(name), state_path(newest.path)
    return (dict(value), source) if isinstance(value, Mapping) else (None, "")


def recorded_config(run_dir: str) -> Tuple[Optional[Dict[str, Any]], str]:
    """The training config a run folder recorded, and the file it came from (:func:`recorded_field`)."""
    return recorded_field(run_dir, "config")
