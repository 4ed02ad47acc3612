"""``FreezeScheduleWrapper``: apply a freeze schedule to a TorchRec model as training advances."""

import logging
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import torch
from torch import nn
from torch.distributed.checkpoint.stateful import Stateful
from torchrec.distributed.model_parallel import DistributedModelParallel

from dlrm_multiepoch.freeze.binding import Binding, bind, check_partial_freezes
from dlrm_multiepoch.freeze.hooks import FrozenDenseParams, register_freeze_hook, register_step_hooks
from dlrm_multiepoch.freeze.scheduler import FixedSchedule, ScheduleSource, States
from dlrm_multiepoch.json_state import pack_json_state, unpack_json_state
from dlrm_multiepoch.part import FreezePart, Position, WindowLog
from dlrm_multiepoch.saved_state import StateMismatch, check_count, check_state
from dlrm_multiepoch.schedule import FreezeSchedule

logger = logging.getLogger(__name__)


def _words(group: str, trains: bool) -> str:
    if group.startswith("gate:"):
        return "open" if trains else "closed"
    return "train" if trains else "frozen"


class FreezeScheduleWrapper(FreezePart):
    """Freezes tables, modules and gates of ``model`` window by window.

    Call :meth:`step` after every optimizer step (or :meth:`set_progress`); the state
    for step ``s`` is in force during step ``s``'s forward and backward, so transitions
    land on exact step boundaries, mid-epoch included. Frozen tables keep their weights
    and fused optimizer state bitwise unchanged; frozen parameters of the dense
    optimizer get no update. What cannot be frozen that way is refused here, at
    construction (see :mod:`dlrm_multiepoch.freeze.binding`).

    The wrapper is a ``torch.distributed.checkpoint`` ``Stateful``: put it in the dict
    you save and load (one ``dcp.load`` of the dict ``dcp.save`` saved, on any sharding),
    and a resumed run continues at the saved step. As a
    :class:`~dlrm_multiepoch.part.TrainPart` it follows the loop's step count
    (``after_step``, ``after_load``) and logs ``freeze/<group>`` every window.

    Args:
        model: a TorchRec model, sharded by ``DistributedModelParallel`` (build the
            wrapper after sharding) or not, with ``EmbeddingBagCollection``,
            ``EmbeddingCollection`` or ``FeatureProcessedEmbeddingBagCollection`` modules.
        schedule: a :class:`FreezeSchedule`, its text form, or any
            :class:`~dlrm_multiepoch.freeze.ScheduleSource`.
        steps_per_epoch: optimizer steps per epoch (e.g. ``len(train_loader)``).
        num_epochs: epochs in the run (for ``end``, percent windows and validation).
        optimizer: the dense optimizer (e.g. a ``CombinedOptimizer``); required when
            the schedule can freeze parameters it trains (data-parallel, dense-kernel or
            unsharded tables, ``module:`` groups).
        start_step: the step the run starts at (see also :meth:`load_state_dict`).

    Example::

        dmp = DistributedModelParallel(model, device=device)
        freeze = FreezeScheduleWrapper(dmp, "delayed", len(loader), 2, optimizer=opt)
        pipeline = TrainPipelineSparseDist(dmp, opt, device)
        for epoch in range(2):
            it = iter(loader)
            while True:
                try:
                    pipeline.progress(it)
                except StopIteration:
                    break
                freeze.step()
        dcp.save({"model": dmp, "optimizer": opt, "freeze": freeze}, checkpoint_id=path)
    """

    def __init__(
        self,
        model: nn.Module,
        schedule: Union[FreezeSchedule, str, ScheduleSource],
        steps_per_epoch: int,
        num_epochs: float,
        optimizer: Optional[Any] = None,
        start_step: int = 0,
    ) -> None:
        self.source = (
            schedule if isinstance(schedule, ScheduleSource) else FixedSchedule(schedule, steps_per_epoch, num_epochs)
        )
        self.steps_per_epoch = steps_per_epoch
        self.total_steps = round(num_epochs * steps_per_epoch)
        self.model = model
        self.global_step = start_step
        inner = model.module if isinstance(model, DistributedModelParallel) else model
        self._binding: Binding = bind(inner, self.source.groups)
        check_partial_freezes(self._binding, self.source.possible_states())
        needs_optimizer = sorted(g for g in self.source.groups if self._binding.dense_params_of(g))
        if needs_optimizer and optimizer is None:
            raise ValueError(
                f"freeze-schedule groups {needs_optimizer} cover parameters trained by the dense optimizer "
                "(data-parallel, dense-kernel or unsharded tables, or modules); pass optimizer= so frozen steps skip them"
            )
        self._hooks = [register_freeze_hook(b.entry.module, b.state) for b in self._binding.tables.values()]
        if self._binding.slots:
            # An unsharded model sharded afterwards loses these hooks: fail its first forward, not silently.
            self._hooks.append(inner.register_forward_pre_hook(lambda *_: self.check_bound()))
        self._frozen_dense = FrozenDenseParams(optimizer)
        if optimizer is not None:
            self._hooks += register_step_hooks(optimizer, self._frozen_dense)
        self._states: States = {}
        self._apply(self.source.states(self.global_step), log_all=True)

    @property
    def schedule(self) -> Optional[FreezeSchedule]:
        """The fixed schedule, when the source is one (else None)."""
        return self.source.schedule if isinstance(self.source, FixedSchedule) else None

    # ----- applying states -----

    def _apply(self, states: States, log_all: bool = False) -> None:
        binding = self._binding
        frozen_dense: List[torch.Tensor] = []
        for path, frozen in binding.frozen_tables(states).items():
            b = binding.tables[path]
            b.state.frozen_keys = {k for t in frozen for k in b.output_keys[t]}
            b.state.all_frozen = frozen == set(b.tables)
            b.state.frozen_tables = frozen
            frozen_dense.extend(p for t in frozen for p in b.dense_params[t])
        for group, params in binding.module_params.items():
            if states.get(group) is False:
                frozen_dense.extend(params)
        for name, gates in binding.gates.items():
            for g in gates:
                g.open = states.get(f"gate:{name}") is not False
        self._frozen_dense.set(frozen_dense)
        trains = {g: s is not False for g, s in states.items()}
        before = {g: s is not False for g, s in self._states.items()}
        changed = {g: t for g, t in trains.items() if before.get(g) != t}
        if changed and (log_all or self._states):
            text = ", ".join(f"{g} {_words(g, t)}" for g, t in changed.items())
            logger.info("freeze schedule at step %d (epoch %.3f): %s", self.global_step, self.epoch, text)
        self._states = dict(states)

    def check_bound(self) -> None:
        """Raise if the model's embedding modules were replaced since the wrapper was built (sharded by
        ``DistributedModelParallel`` after it), naming them and the fix. The wrapper's first forward and
        ``SemiSyncTrainPipeline(frozen_tables=freeze.frozen_tables)`` call it."""
        replaced = self._binding.replaced_modules()
        if replaced:
            raise RuntimeError(
                f"FreezeScheduleWrapper's embedding modules {', '.join(replaced)} were replaced after it was built "
                "(DistributedModelParallel shards modules in place), so their freeze hooks are gone. Build the "
                "wrapper on the sharded model: FreezeScheduleWrapper(dmp, ...)"
            )

    def step(self) -> None:
        """Advance one optimizer step; call after each ``optimizer.step()``/``pipeline.progress()``."""
        self._move_to(self.global_step + 1, force=False)

    def set_progress(self, step: int) -> None:
        """Jump to global step ``step`` (0-based: the next step to run)."""
        self._move_to(step, force=True)

    def _move_to(self, step: int, force: bool) -> None:
        if not 0 <= step <= self.total_steps:
            raise ValueError(f"step {step} is outside the scheduled run of {self.total_steps} steps")
        self.global_step = step
        states = self.source.states(step)
        if force or states != self._states:  # a few dict entries compared per step; applied only on change
            self._apply(states)

    # ----- as a part of a training loop: the loop's step count drives it -----

    def after_step(self, step: int) -> None:
        self._move_to(step, force=False)

    def after_load(self, position: Position) -> None:
        self.set_progress(position.step)

    def after_window(self, losses: Sequence[torch.Tensor], step: int, log: WindowLog) -> None:
        log.scalars({f"freeze/{group}": state for group, state in self.states().items()}, step)

    def checkpoint_parts(self) -> Dict[str, Stateful]:
        return {"freeze": self}

    # ----- what is in force -----

    @property
    def epoch(self) -> float:
        """Progress in epochs (``1.5`` = half-way through the second epoch)."""
        return self.global_step / self.steps_per_epoch

    def states(self) -> Dict[str, int]:
        """Each schedule group's state now: 1 trains (gate open), 0 frozen (closed).

        Example::

            for group, value in freeze.states().items():
                writer.add_scalar(f"freeze/{group}", value, freeze.global_step)
        """
        return {g: int(s is not False) for g, s in self._states.items()}

    def frozen_tables(self) -> List[str]:
        """Tables frozen now."""
        return sorted(t for b in self._binding.tables.values() for t in b.state.frozen_tables)

    # ----- checkpointing (torch.distributed.checkpoint.stateful.Stateful) -----

    def state_dict(self) -> Dict[str, Any]:
        """The step reached, the schedule's text and the source's own state, packed so that ``dcp.load`` finds
        them on any sharding (:mod:`dlrm_multiepoch.json_state`)."""
        return pack_json_state(
            {"global_step": self.global_step, "schedule": self.source.describe(), "source": self.source.state_dict()}
        )

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Resume at the saved step; with ``strict`` the saved schedule must equal this one.

        Raises:
            StateMismatch: a field missing or of another type, or (``strict``) another schedule.
        """
        state = unpack_json_state("freeze schedule", state)
        check_state("freeze schedule", state, {"global_step": int, "schedule": str})
        step = check_count("freeze schedule", "global_step", state["global_step"])
        if strict and state["schedule"] != self.source.describe():
            raise StateMismatch(
                f"freeze schedule: the checkpoint was trained with freeze schedule {state['schedule']!r}, this run "
                f"has {self.source.describe()!r}; pass strict=False to switch schedules on resume"
            )
        self.source.load_state_dict(state.get("source", {}))
        self.set_progress(step)

    def remove(self) -> None:
        """Remove every hook and open every gate: the model trains as if never wrapped."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self._frozen_dense.set([])
        for b in self._binding.tables.values():
            b.state.frozen_tables = set()
        for gates in self._binding.gates.values():
            for g in gates:
                g.open = True

    def __repr__(self) -> str:
        return (
            f"FreezeScheduleWrapper(schedule={self.source.describe()!r}, step={self.global_step}/"
            f"{self.total_steps}, frozen_tables={self.frozen_tables()})"
        )
