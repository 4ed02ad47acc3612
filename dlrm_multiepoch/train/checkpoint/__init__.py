"""Training checkpoints: save the whole training state, find an intact one to resume, load it.

A run's ``<run_dir>/checkpoints/`` holds one folder per checkpoint, named by the
optimizer steps done when it was taken (the names, and torch-free readers of these
files, are :mod:`dlrm_multiepoch.run_files`'):

- ``step_<S>/``: a ``torch.distributed.checkpoint`` of ``{"model": dmp.state_dict(),
  "optimizer": optimizer.state_dict(), <tensor parts>}`` (every rank writes its own
  table shards; dense weights once), and ``trainer_state.json``, written by rank 0
  *after* every rank's files are on disk: the data position and other JSON parts, the
  config and table sizes (to refuse a checkpoint whose shapes differ), and the size
  and sha256 of every other file in the folder (to detect truncation and damage).
  An optional ``protected.json`` keeps it from pruning.
- ``step_<S>.tmp/``: a save in progress, renamed to ``step_<S>`` once complete; a
  leftover one is an interrupted save, never resumed, removed by the next save.

Resuming takes the newest checkpoint that verifies against its recorded checksums,
falling back past damaged ones (and saying so). A fresh start refuses to run over
checkpoints or results it did not write. DCP checkpoints of several hosts need a
folder every rank can see (a shared filesystem), as TorchRec's and torchtitan's do.

Example::

    ckpt = Checkpointer(f"{run_dir}/checkpoints", dmp, optimizer, {"progress": progress}, keep=2)
    info = ckpt.find("auto")
    if info is not None:
        ckpt.load(info)
    ckpt.save(step=240, state={"config": cfg.to_dict()})

A run that continues from a checkpoint, its own (``--resume``) or another run's
(``--start_from``, less the parts it keeps its own of), does so in one
``Checkpointer.restore(StartPoint)``, as torchtitan's ``CheckpointManager.load`` does
with ``initial_load_path`` and ``exclude_from_loading``.
"""

from dlrm_multiepoch.run_files import (
    CHECKPOINTS_DIR,
    STATE_FILE,
    CheckpointError,
    CheckpointInfo,
    checkpoint_name,
    complete_checkpoints,
    saved_work,
)
from dlrm_multiepoch.train.checkpoint.checkpointer import RESUME, START_FROM, Checkpointer, StartPoint
from dlrm_multiepoch.train.checkpoint.compat import SHAPE_FIELDS, check_compatible, check_sharding, table_sharding
from dlrm_multiepoch.train.checkpoint.find import find_checkpoint, refuse_fresh_start, verify_checkpoint
from dlrm_multiepoch.train.checkpoint.load import init_optimizer_state, load_checkpoint
from dlrm_multiepoch.train.checkpoint.save import protect, prune, save_checkpoint, unprotect, write_checkpoint

__all__ = [
    "CHECKPOINTS_DIR",
    "RESUME",
    "SHAPE_FIELDS",
    "START_FROM",
    "STATE_FILE",
    "StartPoint",
    "CheckpointError",
    "CheckpointInfo",
    "Checkpointer",
    "check_compatible",
    "check_sharding",
    "checkpoint_name",
    "complete_checkpoints",
    "find_checkpoint",
    "init_optimizer_state",
    "load_checkpoint",
    "protect",
    "prune",
    "refuse_fresh_start",
    "save_checkpoint",
    "saved_work",
    "table_sharding",
    "unprotect",
    "verify_checkpoint",
    "write_checkpoint",
]
