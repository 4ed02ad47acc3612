"""Apply a :class:`~dlrm_multiepoch.schedule.FreezeSchedule` to a TorchRec model as training advances.

How each group is frozen, and why:

- **Tables** are frozen by cutting their embedding output from the autograd graph
  (a forward hook on the ``EmbeddingBagCollection``/``EmbeddingCollection``, sharded
  or not). ``requires_grad_(False)`` does not work on FBGEMM's sharded tables. When
  every table of a module is frozen, its whole output is detached: autograd never
  runs that module's backward, so there is no embedding backward compute, no backward
  all-to-all and no fused (in-backward) optimizer step, and the table weights and
  optimizer state stay bitwise unchanged. When only some tables of a module are
  frozen, only their columns are detached: they receive an all-zero gradient, which
  leaves SGD, Adagrad and row-wise Adagrad without weight decay (FBGEMM's CPU fused
  set) bitwise unchanged; optimizers that move on a zero gradient are rejected.
- **Tables and modules trained by the dense optimizer** (data-parallel tables,
  unsharded tables without an in-backward optimizer, ``module:GLOB`` groups) have
  their ``.grad`` set to ``None`` just before the dense optimizer steps, so Adam's
  moments, its step count and weight decay leave them untouched.
- **Gates** (:class:`~dlrm_multiepoch.gates.GradientGate`) are opened and closed.

The wrapper changes the model in place (hooks, gate flags) and has no forward of its
own, so the model itself still goes to ``TrainPipelineSparseDist`` or a plain loop.
"""

import fnmatch
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Union

import torch
from torch import nn
from torchrec.distributed.embedding import ShardedEmbeddingCollection
from torchrec.distributed.embeddingbag import ShardedEmbeddingBagCollection
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.types import LazyAwaitable
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
from torchrec.sparse.jagged_tensor import KeyedTensor

from dlrm_multiepoch.gates import GradientGate, detach_value
from dlrm_multiepoch.schedule import TABLES, FreezeSchedule, ResolvedSchedule

logger = logging.getLogger(__name__)

EMBEDDING_MODULE_TYPES = (
    EmbeddingBagCollection,
    EmbeddingCollection,
    ShardedEmbeddingBagCollection,
    ShardedEmbeddingCollection,
)
# Optimizer settings under which a zero gradient still changes weights or state.
_MOVES_ON_ZERO_GRAD = ("weight_decay", "momentum", "betas")


def _table_configs(module: nn.Module) -> list:
    if isinstance(module, EmbeddingBagCollection):
        return module.embedding_bag_configs()
    if isinstance(module, EmbeddingCollection):
        return module.embedding_configs()
    if isinstance(module, ShardedEmbeddingBagCollection):
        return module._embedding_bag_configs
    return module._embedding_configs


@dataclass
class _EmbeddingModule:
    """One embedding module, its tables and what is frozen in it right now."""

    path: str
    module: nn.Module
    table_features: Dict[str, List[str]]
    # Table params trained by a dense optimizer (no in-backward optimizer attached).
    dense_params: Dict[str, List[torch.Tensor]]
    # Table params with an in-backward (fused) optimizer: their optimizer settings.
    fused_settings: Dict[str, List[Mapping[str, Any]]]
    # Set by FreezeScheduleWrapper._apply (only at window boundaries); read by the hook.
    frozen_tables: Set[str] = field(default_factory=set)
    frozen_features: Set[str] = field(default_factory=set)
    all_frozen: bool = False


def _find_embedding_modules(model: nn.Module) -> Dict[str, _EmbeddingModule]:
    found: Dict[str, _EmbeddingModule] = {}
    for path, module in model.named_modules():
        if not isinstance(module, EMBEDDING_MODULE_TYPES):
            continue
        table_features = {c.name: list(c.feature_names) for c in _table_configs(module)}
        dense: Dict[str, List[torch.Tensor]] = {t: [] for t in table_features}
        fused: Dict[str, List[Mapping[str, Any]]] = {t: [] for t in table_features}
        for name, param in module.named_parameters():
            parts = name.split(".")
            table = parts[-2] if len(parts) >= 2 else None
            if table not in table_features:
                continue
            if hasattr(param, "_in_backward_optimizers"):
                fused[table].extend(getattr(param, "_optimizer_kwargs", [{}]))
            else:
                dense[table].append(param)
        if isinstance(module, (ShardedEmbeddingBagCollection, ShardedEmbeddingCollection)):
            optimizer = getattr(module, "fused_optimizer", None)
            for group in getattr(optimizer, "param_groups", []):
                for table in table_features:
                    if not dense[table]:
                        fused[table].append({k: v for k, v in group.items() if k != "params"})
        found[path] = _EmbeddingModule(path, module, table_features, dense, fused)
    return found


def _moves_on_zero_grad(settings: Mapping[str, Any]) -> Optional[str]:
    for key in _MOVES_ON_ZERO_GRAD:
        value = settings.get(key)
        if key == "betas" and value is not None:
            return "betas (Adam-style moments)"
        if key != "betas" and value:
            return f"{key}={value}"
    return None


def _detach_features(out: Any, frozen: Set[str], all_frozen: bool) -> Any:
    """Cut the frozen features' embeddings of one module output from the graph."""
    if all_frozen:
        return detach_value(out)
    if isinstance(out, KeyedTensor):
        # Detach only the frozen keys' columns; values stay bitwise equal (same data, re-concatenated).
        chunks = torch.split(out.values(), out.length_per_key(), dim=out.key_dim())
        values = torch.cat(
            [c.detach() if k in frozen else c for k, c in zip(out.keys(), chunks)], dim=out.key_dim()
        )
        return KeyedTensor(keys=out.keys(), length_per_key=out.length_per_key(), values=values, key_dim=out.key_dim())
    if isinstance(out, dict):  # EmbeddingCollection: feature -> JaggedTensor
        return type(out)((k, detach_value(v) if k in frozen else v) for k, v in out.items())
    raise TypeError(f"cannot freeze tables of an embedding module returning {type(out).__name__}")


def _register_step_pre_hook(optimizer: Any, hook: Callable[..., None]) -> Any:
    """Register ``hook`` where it runs before the dense parameters step."""
    if getattr(type(optimizer).step, "hooked", False):
        # torch optimizers and TorchRec's CombinedOptimizer run their pre-step hooks.
        return optimizer.register_step_pre_hook(hook)
    inner = getattr(optimizer, "_optimizer", None)  # KeyedOptimizerWrapper and similar
    if inner is not None:
        return _register_step_pre_hook(inner, hook)
    raise TypeError(
        f"optimizer of type {type(optimizer).__name__} runs no step pre-hooks; pass a torch.optim.Optimizer, "
        "TorchRec KeyedOptimizerWrapper or CombinedOptimizer, or call wrapper.clear_frozen_grads() before step()"
    )


class FreezeScheduleWrapper:
    """Freezes tables, modules and gates of ``model`` window by window.

    Call :meth:`step` after every optimizer step (or :meth:`set_progress`); the state
    for step ``s`` is in force during step ``s``'s forward and backward, so transitions
    land on exact step boundaries, mid-epoch included.

    Args:
        model: a TorchRec model, sharded by ``DistributedModelParallel`` or not, with
            ``EmbeddingBagCollection``/``EmbeddingCollection`` modules.
        schedule: a :class:`FreezeSchedule` or its text form.
        steps_per_epoch: optimizer steps per epoch (e.g. ``len(train_loader)``).
        num_epochs: epochs in the run (for ``end``, percent windows and validation).
        optimizer: the dense optimizer (e.g. the ``CombinedOptimizer`` of
            ``build_optimizer``); required when the schedule can freeze parameters it
            trains (data-parallel or unsharded tables, ``module:`` groups).
        start_step: the step the run starts at (see also :meth:`load_state_dict`).

    Example::

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
                writer.add_scalars("freeze", freeze.states(), freeze.global_step)
    """

    def __init__(
        self,
        model: nn.Module,
        schedule: Union[FreezeSchedule, str],
        steps_per_epoch: int,
        num_epochs: float,
        optimizer: Optional[Any] = None,
        start_step: int = 0,
    ) -> None:
        self.schedule = FreezeSchedule.parse(schedule) if isinstance(schedule, str) else schedule
        self.plan: ResolvedSchedule = self.schedule.resolve(steps_per_epoch, num_epochs)
        self.model = model
        self.global_step = start_step
        inner = model.module if isinstance(model, DistributedModelParallel) else model
        self._embeddings = _find_embedding_modules(inner)
        self._table_module = {t: e for e in self._embeddings.values() for t in e.table_features}
        self._gates: Dict[str, List[GradientGate]] = {}
        for m in inner.modules():
            if isinstance(m, GradientGate):
                self._gates.setdefault(m.name, []).append(m)
        self._module_params: Dict[str, List[torch.Tensor]] = {}
        self._bind(inner)
        self._hooks = [
            e.module.register_forward_hook(self._make_hook(e))
            for e in self._embeddings.values()
            if any(g == TABLES or g.startswith("table:") for g in self.schedule.groups)
        ]
        needs_optimizer = sorted(
            g for g in self.schedule.groups if self._dense_params_of(g)
        )
        if needs_optimizer and optimizer is None:
            raise ValueError(
                f"freeze-schedule groups {needs_optimizer} cover parameters trained by the dense optimizer "
                "(data-parallel or unsharded tables, or modules); pass optimizer= so frozen steps skip them"
            )
        if optimizer is not None:
            self._hooks.append(_register_step_pre_hook(optimizer, lambda *_: self.clear_frozen_grads()))
        self._frozen_dense: List[torch.Tensor] = []
        self._states: Dict[str, int] = {}
        # States change only where a window starts or ends: step() re-applies only there.
        self._boundaries = {b for ws in self.plan.windows.values() for w in ws for b in (w.start, w.end)}
        self._apply(log_all=True)

    # ----- binding the schedule's groups to the model -----

    def _bind(self, inner: nn.Module) -> None:
        embedding_param_ids = {id(p) for e in self._embeddings.values() for p in e.module.parameters()}
        owner: Dict[int, str] = {}
        for group in self.schedule.groups:
            if group == TABLES:
                if not self._table_module:
                    raise ValueError("freeze-schedule group 'tables' matches nothing: the model has no embedding tables")
            elif group.startswith("table:"):
                name = group[len("table:") :]
                if name not in self._table_module:
                    raise ValueError(
                        f"freeze-schedule group {group!r}: unknown table {name!r}; tables: {sorted(self._table_module)}"
                    )
            elif group.startswith("gate:"):
                name = group[len("gate:") :]
                if name not in self._gates:
                    raise ValueError(
                        f"freeze-schedule group {group!r}: no GradientGate named {name!r} in the model; "
                        f"gates: {sorted(self._gates)}"
                    )
            else:
                pattern = group[len("module:") :]
                params: List[torch.Tensor] = []
                for path, module in inner.named_modules():
                    if not (fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, "*." + pattern)):
                        continue
                    for p in module.parameters():
                        if id(p) in embedding_param_ids or any(p is q for q in params):
                            continue
                        if id(p) in owner and owner[id(p)] != group:
                            raise ValueError(
                                f"freeze-schedule groups {owner[id(p)]!r} and {group!r} both match parameters of "
                                f"module {path!r}; make the globs disjoint"
                            )
                        owner[id(p)] = group
                        params.append(p)
                if not params:
                    raise ValueError(
                        f"freeze-schedule group {group!r} matches no non-table parameters (module paths look like "
                        f"{[n for n, _ in inner.named_modules()][1:6]}); freeze tables with 'tables' or 'table:NAME'"
                    )
                self._module_params[group] = params

    def _tables_of(self, group: str) -> List[str]:
        if group == TABLES:
            return list(self._table_module)
        if group.startswith("table:"):
            return [group[len("table:") :]]
        return []

    def _dense_params_of(self, group: str) -> List[torch.Tensor]:
        if group.startswith("module:"):
            return self._module_params[group]
        return [p for t in self._tables_of(group) for p in self._table_module[t].dense_params[t]]

    # ----- the schedule over time -----

    def table_trains(self, table: str, step: Optional[int] = None) -> bool:
        """Whether ``table`` trains at ``step`` (default: now); ``table:NAME`` overrides ``tables``."""
        step = self.global_step if step is None else step
        for group in (f"table:{table}", TABLES):
            if group in self.plan.windows:
                state = self.plan.state(group, step)
                if state is not None:
                    return state
        return True

    def _apply(self, log_all: bool = False) -> None:
        step = self.global_step
        frozen_dense: List[torch.Tensor] = []
        for e in self._embeddings.values():
            e.frozen_tables = {t for t in e.table_features if not self.table_trains(t, step)}
            e.frozen_features = {f for t in e.frozen_tables for f in e.table_features[t]}
            e.all_frozen = e.frozen_tables == set(e.table_features)
            partial = e.frozen_tables and not e.all_frozen
            if partial:
                for t in e.frozen_tables:
                    for settings in e.fused_settings[t]:
                        why = _moves_on_zero_grad(settings)
                        if why:
                            raise ValueError(
                                f"freeze schedule freezes table {t!r} but not all tables of {e.path!r}; its fused "
                                f"optimizer has {why}, which moves a table on a zero gradient. Freeze all tables "
                                "of the module together or put the table in its own collection"
                            )
            frozen_dense.extend(p for t in e.frozen_tables for p in e.dense_params[t])
        for group, params in self._module_params.items():
            if not self.plan.trains(group, step):
                frozen_dense.extend(params)
        for name, gates in self._gates.items():
            group = f"gate:{name}"
            if group in self.plan.windows:
                for g in gates:
                    g.open = self.plan.trains(group, step)
        self._frozen_dense = frozen_dense
        new_states = {g: int(self.plan.trains(g, step)) for g in self.schedule.groups}
        changed = {g: s for g, s in new_states.items() if self._states.get(g) != s}
        if changed and (log_all or self._states):
            words = lambda g, s: ("open" if s else "closed") if g.startswith("gate:") else ("train" if s else "frozen")
            text = ", ".join(f"{g} {words(g, s)}" for g, s in changed.items())
            logger.info("freeze schedule at step %d (epoch %.3f): %s", step, self.epoch, text)
        self._states = new_states

    def step(self) -> None:
        """Advance one optimizer step; call after each ``optimizer.step()``/``pipeline.progress()``."""
        step = self.global_step + 1
        if step > self.plan.total_steps:
            raise ValueError(f"step {step} is outside the scheduled run of {self.plan.total_steps} steps")
        self.global_step = step
        if step in self._boundaries:  # O(1) on every other step: no per-step walk of tables or params
            self._apply()

    def set_progress(self, step: int) -> None:
        """Jump to global step ``step`` (0-based: the next step to run)."""
        if not 0 <= step <= self.plan.total_steps:
            raise ValueError(f"step {step} is outside the scheduled run of {self.plan.total_steps} steps")
        self.global_step = step
        self._apply()

    @property
    def epoch(self) -> float:
        """Progress in epochs (``1.5`` = half-way through the second epoch)."""
        return self.global_step / self.plan.steps_per_epoch

    def states(self) -> Dict[str, int]:
        """Each schedule group's state now: 1 trains (gate open), 0 frozen (closed).

        Example::

            for group, value in freeze.states().items():
                writer.add_scalar(f"freeze/{group}", value, freeze.global_step)
        """
        return dict(self._states)

    def frozen_tables(self) -> List[str]:
        """Tables frozen now."""
        return sorted(t for e in self._embeddings.values() for t in e.frozen_tables)

    def clear_frozen_grads(self) -> None:
        """Set ``.grad = None`` on frozen dense-trained parameters (runs before the optimizer step)."""
        for p in self._frozen_dense:
            p.grad = None

    # ----- checkpointing -----

    def state_dict(self) -> Dict[str, Any]:
        return {"global_step": self.global_step, "schedule": str(self.schedule)}

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Resume at the saved step; with ``strict`` the saved schedule must equal this one."""
        if strict and state["schedule"] != str(self.schedule):
            raise ValueError(
                f"checkpoint was trained with freeze schedule {state['schedule']!r}, this run has "
                f"{str(self.schedule)!r}; pass strict=False to switch schedules on resume"
            )
        self.set_progress(int(state["global_step"]))

    def remove(self) -> None:
        """Remove every hook and open every gate: the model trains as if never wrapped."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self._frozen_dense = []
        for gates in self._gates.values():
            for g in gates:
                g.open = True

    # ----- the forward hook -----

    def _make_hook(self, entry: _EmbeddingModule) -> Callable[..., Any]:
        def hook(module: nn.Module, inputs: Any, output: Any) -> Any:
            if not entry.frozen_tables:
                return output
            # Capture the state now: a sharded output is only waited on later.
            frozen, all_frozen = entry.frozen_features, entry.all_frozen
            if isinstance(output, LazyAwaitable):
                output.callbacks.append(lambda out: _detach_features(out, frozen, all_frozen))
                return output
            return _detach_features(output, frozen, all_frozen)

        return hook

    def __repr__(self) -> str:
        return (
            f"FreezeScheduleWrapper(schedule={str(self.schedule)!r}, step={self.global_step}/"
            f"{self.plan.total_steps}, frozen_tables={self.frozen_tables()})"
        )
