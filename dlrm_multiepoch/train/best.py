"""Best-validation checkpoints: saved when an evaluation is the best so far, restored to end the run there.

Each is a complete checkpoint folder ``<run_dir>/checkpoints/best_step_<N>/`` (model and
optimizer state, written like an epoch checkpoint: ``.tmp`` first, then renamed). The
folder of the current best is kept, and so is every best that a kept epoch checkpoint
still refers to: a run resumed from that epoch checkpoint restores the best it knew.
Older ones are deleted. Epoch-checkpoint pruning never touches them (other names).

Example::

    best = BestCheckpoints("runs/auto/checkpoints")
    best.save(120, dmp, optimizer, {"val_objective": -0.5812})
    best.restore(120, dmp, optimizer)
"""

import os
import shutil
from typing import Any, Callable, Iterable, Mapping, Optional, Set

import torch.distributed as dist
from torch import nn
from torchrec.optim.keyed import KeyedOptimizer

from dlrm_multiepoch.json_io import read_json
from dlrm_multiepoch.run_files import BEST_FOLDER, best_checkpoint_name, complete_checkpoints, state_path
from dlrm_multiepoch.train.checkpoint import load_checkpoint, write_checkpoint


class BestCheckpoints:
    """Saves, restores and prunes the best-validation checkpoints of one run.

    Args:
        folder: the run's checkpoint folder (``<run_dir>/checkpoints``).
        referenced: reads the best step an epoch checkpoint's trainer state refers to
            (None if it refers to none); those bests are kept.
    """

    def __init__(self, folder: str, referenced: Callable[[Mapping[str, Any]], Optional[int]]) -> None:
        self.folder = folder
        self._referenced = referenced
        # The best the last saved (or loaded) checkpoint refers to: a run resumed from that checkpoint
        # restores it, whatever else the folder holds (a user's dcp.save checkpoints have no state file).
        self.pinned: Set[int] = set()

    def path(self, step: int) -> str:
        return os.path.join(self.folder, best_checkpoint_name(step))

    def save(self, step: int, model: nn.Module, optimizer: KeyedOptimizer, state: Mapping[str, Any]) -> str:
        """Checkpoint the weights of the best evaluation, at ``step`` (collective); prune older bests."""
        path = write_checkpoint(self.path(step), model, optimizer, {**state, "step": step, "kind": "best"})
        self.prune(keep={step})
        return path

    def check(self, step: int) -> str:
        """The complete best checkpoint of ``step``; raises if it is missing."""
        path = self.path(step)
        state_file = state_path(path)
        if not os.path.isfile(state_file):
            raise FileNotFoundError(
                f"best-validation checkpoint {path} is missing; it holds the weights of step {step}, which this "
                "run restores (at a phase change and at its end)"
            )
        saved_step = read_json(state_file).get("step")
        if saved_step != step:
            raise ValueError(f"{path} holds step {saved_step}, expected {step}")
        return path

    def restore(self, step: int, model: nn.Module, optimizer: KeyedOptimizer) -> None:
        """Load the best checkpoint of ``step`` into ``model`` and ``optimizer`` (collective)."""
        load_checkpoint(self.check(step), model, optimizer)

    def prune(self, keep: Iterable[int]) -> None:
        """Delete best folders but ``keep``, :attr:`pinned` and those a complete epoch checkpoint refers to (rank 0)."""
        if not (dist.is_initialized() and dist.get_rank() != 0) and os.path.isdir(self.folder):
            wanted: Set[int] = set(keep) | self.pinned
            for _, path in complete_checkpoints(self.folder):
                step = self._referenced(read_json(state_path(path)))
                if step is not None:
                    wanted.add(step)
            for name in os.listdir(self.folder):
                match = BEST_FOLDER.match(name)
                if match and (match.group(2) or int(match.group(1)) not in wanted):
                    shutil.rmtree(os.path.join(self.folder, name))
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()
