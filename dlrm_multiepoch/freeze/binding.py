"""Bind a freeze schedule's groups to a model's tables, modules and gates; refuse what cannot be frozen.

Everything a schedule could get wrong is found here, at construction, naming the group,
table, module or setting: unknown names, table names used by two collections, module
types whose tables cannot be held still (managed-collision and other TorchRec wrappers),
and partial freezes inside a collection whose fused optimizer moves rows on a zero
gradient (weight decay, Adam-style moments, ...), read from the FBGEMM kernels that
really run, whatever the optimizer kwargs or the sharders' ``fused_params`` said.
"""

import fnmatch
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple

import torch
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from torch import nn
from torchrec.distributed.types import ShardedModule
from torchrec.modules.embedding_modules import get_embedding_names_by_table

from dlrm_multiepoch.freeze.hooks import FreezeState
from dlrm_multiepoch.gates import GradientGate
from dlrm_multiepoch.schedule import TABLES
from dlrm_multiepoch.tables import (
    MANAGED_COLLISION_KINDS,
    SUPPORTED_KINDS,
    EmbeddingModule,
    ShardedTable,
    duplicate_table_names,
    embedding_modules,
)

# Fused (FBGEMM) optimizers that leave a row and its state bitwise unchanged on a zero
# gradient, unless one of the settings checked in _fused_mover is on.
_STILL_ON_ZERO_GRAD = {
    EmbOptimType.SGD,
    EmbOptimType.EXACT_SGD,
    EmbOptimType.EXACT_ADAGRAD,
    EmbOptimType.EXACT_ROWWISE_ADAGRAD,
    EmbOptimType.ROWWISE_ADAGRAD,
}
_WEIGHT_DECAY_MODES = {0: "NONE", 1: "L2", 2: "DECOUPLE", 3: "COUNTER", 4: "COWCLIP", 5: "DECOUPLE_GLOBAL"}


def _fused_mover(optimizer: Any, settings: Mapping[str, Any]) -> Optional[str]:
    """The setting of a fused (FBGEMM) optimizer that changes rows or state on a zero gradient, if any.

    Args:
        optimizer: its ``EmbOptimType``.
        settings: a table's ``fused_params`` or a TBE's ``optimizer_args`` as a dict.
    """
    if optimizer not in _STILL_ON_ZERO_GRAD:
        return f"optimizer={getattr(optimizer, 'value', optimizer)} (its moments/momentum move on a zero gradient)"
    mode = int(settings.get("weight_decay_mode") or 0)
    if settings.get("weight_decay") and mode != 0:
        return f"weight_decay={settings['weight_decay']} (weight_decay_mode={_WEIGHT_DECAY_MODES.get(mode, mode)})"
    if (settings.get("max_norm") or 0) > 0:
        return f"max_norm={settings['max_norm']}"
    if (settings.get("counter_halflife") or -1) > 0 or settings.get("counter_based_regularization") is not None:
        return "counter-based regularization"
    return None


def _table_mover(table: ShardedTable) -> Optional[str]:
    """Checks what every rank knows (the resolved fused_params), then this rank's live kernel."""
    if table.data_parallel or table.dense_kernel:
        return None  # trained by the dense optimizer: frozen by .grad = None
    params = table.fused_params
    why = _fused_mover(params.get("optimizer"), params) if "optimizer" in params else None
    if why is None and table.tbe is not None:
        why = _fused_mover(table.tbe.optimizer, table.tbe.optimizer_args._asdict())
    return why


def _in_backward_mover(param: torch.Tensor) -> Optional[str]:
    """The same for a torch optimizer applied in backward to an unsharded table."""
    for settings in getattr(param, "_optimizer_kwargs", []):
        if settings.get("betas") is not None:
            return "betas (Adam-style moments)"
        for key in ("weight_decay", "momentum"):
            if settings.get(key):
                return f"{key}={settings[key]}"
    return None


@dataclass
class TableBinding:
    """One embedding module's tables, what trains them, and what is frozen in it now.

    Attributes:
        entry: the module (see :class:`~dlrm_multiepoch.tables.EmbeddingModule`).
        output_keys: table -> its keys in the module's output.
        dense_params: table -> its parameters trained by the dense optimizer
            (data-parallel, dense-kernel or unsharded tables without an in-backward optimizer).
        zero_grad_movers: table -> the fused setting that moves it on a zero gradient.
        state: what the forward hook detaches (set only at step boundaries).
    """

    entry: EmbeddingModule
    output_keys: Dict[str, List[str]]
    dense_params: Dict[str, List[torch.Tensor]]
    zero_grad_movers: Dict[str, str]
    state: FreezeState = field(default_factory=FreezeState)

    @property
    def path(self) -> str:
        return self.entry.path

    @property
    def tables(self) -> List[str]:
        return self.entry.table_names


def _bind_tables(entry: EmbeddingModule) -> TableBinding:
    names = entry.table_names
    output_keys = dict(zip(names, get_embedding_names_by_table(list(entry.tables))))
    dense: Dict[str, List[torch.Tensor]] = {t: [] for t in names}
    movers: Dict[str, str] = {}
    for name, param in entry.collection.named_parameters():
        parts = name.split(".")
        table = parts[-2] if len(parts) >= 2 else None
        if table not in dense:
            continue
        if hasattr(param, "_in_backward_optimizers"):
            why = _in_backward_mover(param) if not entry.sharded else None
            if why:
                movers[table] = why
        else:  # kept even when empty (a table held by another rank): every rank binds alike
            dense[table].append(param)
    for table in entry.sharded_tables():
        why = _table_mover(table)
        if why:
            movers[table.name] = why
    for table, params in _feature_processor_params(entry).items():
        dense[table] += params
    return TableBinding(entry, output_keys, dense, movers)


def _feature_processor_params(entry: EmbeddingModule) -> Dict[str, List[torch.Tensor]]:
    """Table -> the feature-processor parameters of its features (an FP-EBC's position weights).

    They only reach the loss through the table's lookup, so they freeze with the table.
    """
    processors = getattr(entry.module, "_feature_processors", None) if entry.kind == "fp_ebc" else None
    if processors is None:
        return {}
    table_of = {f: t for t, features in entry.features().items() for f in features}
    out: Dict[str, List[torch.Tensor]] = {}
    for name, param in processors.named_parameters():
        tables = {table_of[part] for part in name.split(".") if part in table_of}
        for table in tables:
            out.setdefault(table, []).append(param)
    return out


def _parent_slots(root: nn.Module, paths: Iterable[str]) -> List[Tuple[nn.Module, str, str]]:
    """``(parent, child name, path)`` of each module path, to notice a module replaced later."""
    slots = []
    for path in paths:
        if not path:
            continue  # the model itself: nothing can replace it
        parent_path, _, child = path.rpartition(".")
        slots.append((root.get_submodule(parent_path), child, path))
    return slots


@dataclass
class Binding:
    """A schedule's groups bound to one model.

    Attributes:
        tables: module path -> :class:`TableBinding`.
        table_owner: table name -> its :class:`TableBinding`.
        gates: gate name -> the gates of that name.
        module_params: ``module:GLOB`` group -> the non-table parameters it covers.
        slots: where each bound embedding module hangs in the model.
    """

    tables: Dict[str, TableBinding]
    table_owner: Dict[str, TableBinding]
    gates: Dict[str, List[GradientGate]]
    module_params: Dict[str, List[torch.Tensor]]
    slots: List[Tuple[nn.Module, str, str]]

    def tables_of(self, group: str) -> List[str]:
        if group == TABLES:
            return list(self.table_owner)
        if group.startswith("table:"):
            return [group[len("table:") :]]
        return []

    def dense_params_of(self, group: str) -> List[torch.Tensor]:
        if group.startswith("module:"):
            return self.module_params[group]
        return [p for t in self.tables_of(group) for p in self.table_owner[t].dense_params[t]]

    def frozen_tables(self, states: Mapping[str, Optional[bool]]) -> Dict[str, Set[str]]:
        """Module path -> its frozen tables under ``states`` (``table:NAME`` overrides ``tables``)."""
        default = states.get(TABLES)
        out: Dict[str, Set[str]] = {}
        for path, b in self.tables.items():
            frozen = set()
            for t in b.tables:
                state = states.get(f"table:{t}")
                if state is None:
                    state = default
                if state is False:
                    frozen.add(t)
            out[path] = frozen
        return out

    def replaced_modules(self) -> List[str]:
        """Bound embedding modules no longer in the model (e.g. sharded in place by DMP afterwards)."""
        return [
            f"{path!r} (now {type(parent._modules.get(child)).__name__})"
            for parent, child, path in self.slots
            if parent._modules.get(child) is not self.tables[path].entry.module
        ]


def _refuse_unsupported(groups: List[str], modules: List[EmbeddingModule]) -> None:
    named = {g[len("table:") :] for g in groups if g.startswith("table:")}
    all_tables = TABLES in groups
    for m in modules:
        covered = sorted(set(m.table_names) & named) if not all_tables else m.table_names
        if not covered and not (all_tables and m.kind == "other"):
            continue
        group = "tables" if all_tables else ", ".join(f"table:{t}" for t in covered)
        if m.kind in MANAGED_COLLISION_KINDS:
            raise ValueError(
                f"freeze schedule group {group!r} covers tables {m.table_names} of {m.type_name} {m.path!r}: a "
                "managed-collision module remaps ids and evicts rows in its forward, re-initialising table rows and "
                "their optimizer state, so its tables cannot be held unchanged. Give them no freeze window (name the "
                "other tables with table:NAME instead of 'tables')"
            )
        if m.kind == "other":
            raise ValueError(
                f"freeze schedule group {group!r} covers {m.type_name} {m.path!r}, a TorchRec embedding module "
                "the freeze wrapper does not support (supported: EmbeddingBagCollection, EmbeddingCollection, "
                "FeatureProcessedEmbeddingBagCollection, sharded or not). Name the tables to freeze with table:NAME"
            )


def _bind_modules(inner: nn.Module, groups: List[str], table_params: Set[int]) -> Dict[str, List[torch.Tensor]]:
    owner: Dict[int, str] = {}
    bound: Dict[str, List[torch.Tensor]] = {}
    for group in (g for g in groups if g.startswith("module:")):
        pattern = group[len("module:") :]
        params: List[torch.Tensor] = []
        for path, module in inner.named_modules():
            if not (fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, "*." + pattern)):
                continue
            for p in module.parameters():
                if id(p) in table_params or any(p is q for q in params):
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
        bound[group] = params
    return bound


def bind(inner: nn.Module, groups: List[str]) -> Binding:
    """Bind ``groups`` to the (unwrapped) model ``inner``; raises ``ValueError`` naming what is wrong."""
    modules = embedding_modules(inner)
    table_groups = [g for g in groups if g == TABLES or g.startswith("table:")]
    if table_groups:
        _refuse_unsupported(table_groups, modules)
        duplicates = duplicate_table_names(modules)
        if duplicates:
            raise ValueError(
                "freeze schedules name tables, but these table names are used by more than one embedding module: "
                + "; ".join(f"{n!r} in {paths}" for n, paths in sorted(duplicates.items()))
                + ". Rename them so each table name is unique in the model"
            )
    supported = [m for m in modules if m.kind in SUPPORTED_KINDS]
    tables = {m.path: _bind_tables(m) for m in supported} if table_groups else {}
    owner = {t: b for b in tables.values() for t in b.tables}
    gates: Dict[str, List[GradientGate]] = {}
    for m in inner.modules():
        if isinstance(m, GradientGate):
            gates.setdefault(m.name, []).append(m)
    for group in groups:
        if group == TABLES and not owner:
            raise ValueError("freeze-schedule group 'tables' matches nothing: the model has no embedding tables")
        if group.startswith("table:") and group[len("table:") :] not in owner:
            raise ValueError(
                f"freeze-schedule group {group!r}: unknown table {group[len('table:'):]!r}; tables: {sorted(owner)}"
            )
        if group.startswith("gate:") and group[len("gate:") :] not in gates:
            raise ValueError(
                f"freeze-schedule group {group!r}: no GradientGate named {group[len('gate:'):]!r} in the model; "
                f"gates: {sorted(gates)}"
            )
    table_params = {id(p) for m in modules for p in m.module.parameters()}
    module_params = _bind_modules(inner, groups, table_params)
    slots = _parent_slots(inner, [b.path for b in tables.values()]) if not _is_sharded(inner) else []
    return Binding(tables, owner, gates, module_params, slots)


def _is_sharded(inner: nn.Module) -> bool:
    return any(isinstance(m, ShardedModule) for m in inner.modules())


def check_partial_freezes(binding: Binding, possible: Iterable[Mapping[str, Optional[bool]]]) -> None:
    """Refuse states that freeze part of a module whose fused optimizer moves rows on a zero gradient."""
    for states in possible:
        for path, frozen in binding.frozen_tables(states).items():
            b = binding.tables[path]
            if not frozen or frozen == set(b.tables):
                continue
            for t in sorted(frozen):
                if t in b.zero_grad_movers:
                    raise ValueError(
                        f"freeze schedule freezes table {t!r} but not all tables of {b.entry.type_name} {path!r} "
                        f"(frozen: {sorted(frozen)}, training: {sorted(set(b.tables) - frozen)}); its fused "
                        f"optimizer has {b.zero_grad_movers[t]}, which moves a table on a zero gradient. Freeze all "
                        "tables of the module together or put the table in its own collection"
                    )
