"""Names inside a run's checkpoint folder, and what a checkpoint's state file holds."""

import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

CHECKPOINTS_DIR = "checkpoints"
STATE_FILE = "trainer_state.json"  # written last inside a checkpoint folder: it marks the folder complete
PROTECTED_FILE = "protected.json"  # a checkpoint pruning must keep (e.g. the best validation one)
FORMAT_VERSION = 2
TMP_SUFFIX = ".tmp"
_FOLDER = re.compile(r"^step_(\d+)$")
# Other saved work a fresh start must not run over: best-validation checkpoints (the auto
# schedule's), and format 1's per-epoch folders and pointer file.
_OTHER_SAVED = re.compile(r"^(best_step_\d+|epoch_\d+|latest\.json)$")


def checkpoint_name(step: int) -> str:
    """Folder name of the checkpoint taken after ``step`` optimizer steps."""
    return f"step_{step}"


def step_of(path: str) -> Optional[int]:
    """The step in a checkpoint folder's name, or None if it is not one."""
    match = _FOLDER.match(os.path.basename(os.path.normpath(path)))
    return int(match.group(1)) if match else None


def step_folders(folder: str) -> List[Tuple[int, str]]:
    """``(step, path)`` of every ``step_<S>`` folder in ``folder`` (complete or not), oldest first."""
    if not os.path.isdir(folder):
        return []
    found = []
    for name in os.listdir(folder):
        match = _FOLDER.match(name)
        if match and os.path.isdir(os.path.join(folder, name)):
            found.append((int(match.group(1)), os.path.join(folder, name)))
    return sorted(found)


def complete_checkpoints(folder: str) -> List[Tuple[int, str]]:
    """``(step, path)`` of every folder whose save finished (it has a state file), oldest first.

    Finished is not intact: :func:`~dlrm_multiepoch.train.checkpoint.find.verify_checkpoint`
    also checks every file against the sizes and checksums recorded at save time.
    """
    return [(s, p) for s, p in step_folders(folder) if os.path.isfile(os.path.join(p, STATE_FILE))]


def saved_work(folder: str) -> List[str]:
    """Paths in ``folder`` that hold training state: checkpoints (step, best-validation, older format).

    Interrupted saves (``*.tmp``) are not listed: they never resume, and saving removes them.
    """
    if not os.path.isdir(folder):
        return []
    names = sorted(n for n in os.listdir(folder) if _FOLDER.match(n) or _OTHER_SAVED.match(n))
    return [os.path.join(folder, n) for n in names]


def is_protected(path: str) -> bool:
    return os.path.isfile(os.path.join(path, PROTECTED_FILE))


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
