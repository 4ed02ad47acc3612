"""The :class:`Checkpointer`: one run's checkpoints of model, optimizer and named ``Stateful`` parts, and the
:class:`StartPoint` a run restores from."""

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.distributed.checkpoint.stateful import Stateful
from torchrec.optim.keyed import KeyedOptimizer

from dlrm_multiepoch import distributed as D
from dlrm_multiepoch.json_state import is_packed, unpack_json_state
from dlrm_multiepoch.run_files import CheckpointError, CheckpointInfo
from dlrm_multiepoch.train.checkpoint.compat import check_sharding, table_sharding
from dlrm_multiepoch.train.checkpoint.find import find_checkpoint
from dlrm_multiepoch.train.checkpoint.load import load_checkpoint
from dlrm_multiepoch.train.checkpoint.save import save_checkpoint


def holds_tensors(value: Any) -> bool:
    """Whether a (nested) state dict holds a tensor anywhere."""
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, Mapping):
        return any(holds_tensors(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(holds_tensors(v) for v in value)
    return False


RESUME = "--resume"
START_FROM = "--start_from"


@dataclass(frozen=True)
class StartPoint:
    """The checkpoint a run continues from, and the parts it keeps its own state of.

    Modelled on torchtitan's ``CheckpointManager.load``: a run with a checkpoint of its
    own resumes it whole (``--resume``; a restarted job always does); only a run without
    one starts from another run's checkpoint (torchtitan's ``initial_load_path``; here
    ``--start_from``, a branch), leaving out ``exclude_from_loading``.

    Args:
        checkpoint: the verified checkpoint.
        flag: the flag that gave it, for messages: ``--resume`` (the run's own) or ``--start_from``.
        exclude_from_loading: parts not loaded from it (a branch's freeze schedule and summary are its own).

    Example::

        start = StartPoint.choose(run.resume_from, parent, exclude_from_loading=("freeze", "metrics"))
        changes = checkpointer.restore(start)
    """

    checkpoint: CheckpointInfo
    flag: str = RESUME
    exclude_from_loading: Tuple[str, ...] = ()

    @property
    def is_branch(self) -> bool:
        """Whether the checkpoint is another run's (``--start_from``)."""
        return self.flag == START_FROM

    @staticmethod
    def choose(
        own: Optional[CheckpointInfo], initial: Optional[CheckpointInfo], exclude_from_loading: Sequence[str] = ()
    ) -> Optional["StartPoint"]:
        """The run's own checkpoint, whole, when it has one; else ``initial`` (``--start_from``) less the excluded
        parts; None: a fresh start."""
        if own is not None:
            return StartPoint(own)
        if initial is not None:
            return StartPoint(initial, START_FROM, tuple(exclude_from_loading))
        return None


class Checkpointer:
    """Saves and restores one run's training state: model, optimizer and named ``Stateful`` parts.

    A part is anything with ``state_dict()`` / ``load_state_dict()``
    (``torch.distributed.checkpoint.stateful.Stateful``): the data position, the freeze
    schedule, the metrics summary, and whatever other features register in ``parts``
    (e.g. per-row counters, LR-schedule state). A part whose state dict holds tensors
    is saved in the DCP checkpoint beside the model and optimizer, so sharded tensors
    reshard on load; any other part's state goes, as JSON, into ``trainer_state.json``
    (a state packed for DCP by :mod:`dlrm_multiepoch.json_state` in its plain form).

    Args:
        folder: the run's checkpoint folder (``<run_dir>/checkpoints``).
        model: the ``DistributedModelParallel`` model.
        optimizer: its ``CombinedOptimizer``.
        parts: name -> part; the dict is kept (not copied), so parts registered later
            are saved and loaded too.
        keep: complete checkpoints to keep, not counting protected ones.
        job_id: the elastic job's id (a restart of it resumes from its own checkpoints).
        log: rank-0 logger.

    Example::

        ckpt = Checkpointer("runs/joint/checkpoints", dmp, optimizer, {"progress": progress}, keep=2)
        ckpt.parts["falr"] = row_counters              # a Stateful holding sharded tensors
        info = ckpt.find("auto")
        if info is not None:
            ckpt.load(info)
        path = ckpt.save(step=240, state={"config": cfg.to_dict()})
    """

    def __init__(
        self,
        folder: str,
        model: nn.Module,
        optimizer: KeyedOptimizer,
        parts: Dict[str, Stateful],
        keep: int = 2,
        job_id: Optional[str] = None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.folder = folder
        self.model = model
        self.optimizer = optimizer
        self.parts = parts
        self.keep = keep
        self.job_id = job_id
        self.log = log

    def save(self, step: int, state: Mapping[str, Any]) -> str:
        """Save everything after ``step`` optimizer steps, with ``state`` (JSON-able) in the state file (collective)."""
        json_parts: Dict[str, Any] = {}
        tensor_parts: Dict[str, Any] = {}
        for name, part in self.parts.items():
            part_state = part.state_dict()
            if is_packed(part_state):  # tensor-free state packed for DCP: its plain form, as JSON
                json_parts[name] = unpack_json_state(name, part_state)
            else:
                (tensor_parts if holds_tensors(part_state) else json_parts)[name] = part_state
        full = {**state, "job_id": self.job_id, "world_size": D.world_size(), "parts": json_parts}
        return save_checkpoint(
            self.folder, step, self.model, self.optimizer, full, tensor_parts, keep=self.keep, log=self.log
        )

    def find(self, resume: str) -> Optional[CheckpointInfo]:
        """The intact checkpoint ``--resume`` asks for (see :func:`find_checkpoint`); None: start fresh."""
        return find_checkpoint(resume, self.folder, self.job_id, self.log)

    def restore(self, start: StartPoint) -> List[str]:
        """Load ``start``'s checkpoint (collective): model, optimizer and every part it does not exclude.

        Returns:
            What changed since the checkpoint that loading absorbs, for the log: tables the
            planner shards otherwise (resharded) and another world size.

        Raises:
            ValueError: a table whose sharding keeps other optimizer state (naming ``start.flag``).
            CheckpointError: as :meth:`load`.
        """
        info = start.checkpoint
        plan = getattr(self.model, "plan", None)  # a DistributedModelParallel's sharding plan
        changes = check_sharding(info, table_sharding(plan), flag=start.flag) if plan is not None else []
        self.load(info, exclude_from_loading=start.exclude_from_loading)
        saved_ranks = info.state.get("world_size", D.world_size())
        if saved_ranks != D.world_size():
            changes.append(f"world size {saved_ranks} -> {D.world_size()} (tables and optimizer state resharded)")
        return changes

    def load(self, info: CheckpointInfo, exclude_from_loading: Sequence[str] = ()) -> None:
        """Restore model, optimizer and every registered part but ``exclude_from_loading`` from ``info`` (collective).

        Each part validates its own state in ``load_state_dict``
        (:mod:`dlrm_multiepoch.saved_state`); a part that refuses it is named here with
        the checkpoint.

        Raises:
            CheckpointError: a part the checkpoint holds no state for, or whose state does
                not fit it (``checkpoint <path>: part 'progress': train progress: ...``).
        """
        parts = {name: part for name, part in self.parts.items() if name not in exclude_from_loading}
        saved_tensor_parts = set(info.state.get("tensor_parts", []))
        missing = [n for n in parts if n not in info.parts and n not in saved_tensor_parts]
        if missing:
            raise CheckpointError(
                f"checkpoint {info.path} holds no state for {missing}: it was saved by a run without them "
                f"(it has {sorted(info.parts) + sorted(saved_tensor_parts)})"
            )
        tensor_state = {n: p.state_dict() for n, p in parts.items() if n in saved_tensor_parts}
        load_checkpoint(info.path, self.model, self.optimizer, tensor_state)
        for name, part in parts.items():
            try:
                part.load_state_dict(tensor_state[name] if name in tensor_state else info.parts[name])
            except (KeyError, TypeError, ValueError) as e:  # KeyError/TypeError: a part that does not check its state
                detail = f"{type(e).__name__} {e}" if not isinstance(e, ValueError) else str(e)
                raise CheckpointError(f"checkpoint {info.path}: part {name!r}: {detail}") from e

