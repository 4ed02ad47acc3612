"""The embedding modules of a TorchRec model and their tables, sharded or not.

One place that knows where each TorchRec embedding-module type keeps its table configs,
its shardings and its fused optimizers; the freeze wrapper, the semi-synchronous
pipeline, the fused lookup, sharding and table checkpoints all read tables through it.

Kinds (unsharded and ``DistributedModelParallel``-sharded alike):

- ``ebc``: ``EmbeddingBagCollection`` (pooled);
- ``ec``: ``EmbeddingCollection`` (sequence);
- ``fp_ebc``: ``FeatureProcessedEmbeddingBagCollection`` (an EBC behind feature processors);
- ``mc_ebc`` / ``mc_ec``: ``ManagedCollisionEmbedding(Bag)Collection`` (an EBC/EC behind an
  id remapper that evicts rows);
- ``other``: any other TorchRec embedding-module type (ITEP, towers, PEC, quantized,
  fused-optimizer collections, ...): found, so callers can refuse it by name.

Only the outermost embedding module counts: a sharded FP-EBC holds a sharded EBC, and
the model calls the outer one.

Example::

    for m in embedding_modules(dmp):
        print(m.path, m.kind, m.table_names)      # sparse.fp_ebc fp_ebc ['t1']
"""

import contextlib
import importlib
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from torch import nn
from torchrec.distributed.embedding import ShardedEmbeddingCollection
from torchrec.distributed.embedding_types import EmbeddingComputeKernel
from torchrec.distributed.embeddingbag import ShardedEmbeddingBagCollection
from torchrec.distributed.fp_embeddingbag import ShardedFeatureProcessedEmbeddingBagCollection
from torchrec.distributed.mc_embedding_modules import BaseShardedManagedCollisionEmbeddingCollection
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.types import ShardedModule, ShardingType
from torchrec.modules.embedding_configs import BaseEmbeddingConfig
from torchrec.modules.embedding_modules import (
    EmbeddingBagCollection,
    EmbeddingBagCollectionInterface,
    EmbeddingCollection,
    EmbeddingCollectionInterface,
)
from torchrec.modules.fp_embedding_modules import FeatureProcessedEmbeddingBagCollection
from torchrec.modules.mc_embedding_modules import (
    BaseManagedCollisionEmbeddingCollection,
    ManagedCollisionEmbeddingBagCollection,
)

SUPPORTED_KINDS = ("ebc", "ec", "fp_ebc")
MANAGED_COLLISION_KINDS = ("mc_ebc", "mc_ec")


def _optional_types(*names: str) -> Tuple[type, ...]:
    """TorchRec wrapper classes that hold embedding tables, where this release has them."""
    found = []
    for name in names:
        module, _, cls = name.rpartition(".")
        try:
            # torch 2.14 deprecates torch.jit.script, which some of these modules call at import
            # (TorchRec 1.9's hash_mc_evictions): a line on every launch a user can do nothing about.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="`torch.jit.script` is deprecated", category=FutureWarning)
                found.append(getattr(importlib.import_module(module), cls))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


# Wrappers whose forward transforms ids before (or outputs after) an inner EBC/EC.
_OTHER_WRAPPERS = _optional_types(
    "torchrec.modules.itep_embedding_modules.ITEPEmbeddingBagCollection",
    "torchrec.modules.itep_embedding_modules.ITEPEmbeddingCollection",
    "torchrec.modules.embedding_tower.EmbeddingTower",
    "torchrec.modules.embedding_tower.EmbeddingTowerCollection",
    "torchrec.modules.pec_embedding_modules.PECEmbeddingCollection",
    "torchrec.modules.mc_adapter.McEmbeddingCollectionAdapter",
    "torchrec.modules.mc_adapter.McEmbeddingBagCollectionAdapter",
)


def _kind(module: nn.Module) -> Optional[str]:
    if isinstance(module, (FeatureProcessedEmbeddingBagCollection, ShardedFeatureProcessedEmbeddingBagCollection)):
        return "fp_ebc"
    if isinstance(module, BaseManagedCollisionEmbeddingCollection):
        return "mc_ebc" if isinstance(module, ManagedCollisionEmbeddingBagCollection) else "mc_ec"
    if isinstance(module, BaseShardedManagedCollisionEmbeddingCollection):
        return "mc_ebc" if module.bagged else "mc_ec"
    # Quantized and fused-optimizer collections implement the interfaces, not these classes.
    if isinstance(module, (EmbeddingBagCollection, ShardedEmbeddingBagCollection)):
        return "ebc"
    if isinstance(module, (EmbeddingCollection, ShardedEmbeddingCollection)):
        return "ec"
    if isinstance(module, (EmbeddingBagCollectionInterface, EmbeddingCollectionInterface, ShardedModule)):
        return "other"
    if _OTHER_WRAPPERS and isinstance(module, _OTHER_WRAPPERS):
        return "other"
    return None


def _collection(module: nn.Module, kind: str) -> nn.Module:
    """The EBC/EC (sharded or not) that owns the table weights."""
    if kind == "fp_ebc":
        return module._embedding_bag_collection
    if kind in MANAGED_COLLISION_KINDS:
        return module._embedding_module
    return module


def table_configs(collection: nn.Module) -> List[BaseEmbeddingConfig]:
    """Table configs of an EBC/EC; unsharded ones expose a method, sharded ones an attribute."""
    for attr in ("embedding_bag_configs", "embedding_configs"):
        configs = getattr(collection, attr, None) or getattr(collection, "_" + attr, None)
        if configs is not None:
            return list(configs() if callable(configs) else configs)
    return []


@dataclass(frozen=True)
class ShardedTable:
    """How one table of a sharded module is sharded and trained (the same on every rank).

    Attributes:
        name: the table.
        sharding_type: ``table_wise``, ``row_wise``, ``column_wise``, ``data_parallel``, ...
        compute_kernel: ``fused`` (FBGEMM kernel with an in-backward optimizer), ``dense``
            (trained by the dense optimizer), ...
        fused_params: the fused optimizer's settings as the sharder resolved them.
        tbe: the FBGEMM table-batched kernel holding this rank's shard of a fused table
            (its ``optimizer``/``optimizer_args`` are the effective settings), else None.
    """

    name: str
    sharding_type: str
    compute_kernel: str
    fused_params: Dict[str, Any]
    tbe: Any = None

    @property
    def data_parallel(self) -> bool:
        return self.sharding_type == ShardingType.DATA_PARALLEL.value

    @property
    def dense_kernel(self) -> bool:
        return self.compute_kernel == EmbeddingComputeKernel.DENSE.value


@dataclass(frozen=True)
class EmbeddingModule:
    """One outermost embedding module of a model.

    Attributes:
        path: dotted path in the model (inside ``DistributedModelParallel``).
        module: the module the model calls (whose forward hooks fire).
        kind: one of ``ebc``, ``ec``, ``fp_ebc``, ``mc_ebc``, ``mc_ec``, ``other``.
        collection: the EBC/EC that owns the weights (``module`` itself for ebc/ec).
        tables: table configs (empty for ``other`` kinds whose tables are not known).
    """

    path: str
    module: nn.Module
    kind: str
    collection: nn.Module
    tables: Tuple[BaseEmbeddingConfig, ...]

    @property
    def type_name(self) -> str:
        return type(self.module).__name__

    @property
    def table_names(self) -> List[str]:
        return [t.name for t in self.tables]

    @property
    def pooled(self) -> bool:
        return self.kind in ("ebc", "fp_ebc", "mc_ebc")

    @property
    def sharded(self) -> bool:
        return isinstance(self.module, ShardedModule)

    def features(self) -> Dict[str, List[str]]:
        """Table name -> the input features it looks up."""
        return {t.name: list(t.feature_names) for t in self.tables}

    def shardings(self) -> List[Tuple[str, Any]]:
        """``(sharding type, EmbeddingSharding)`` of the collection, in input-dist order (sharded only)."""
        c = self.collection
        if isinstance(c, ShardedEmbeddingBagCollection):
            return list(zip(c._sharding_types, c._embedding_shardings))
        if isinstance(c, ShardedEmbeddingCollection):
            return list(c._sharding_type_to_sharding.items())
        return []

    def sharded_tables(self) -> List[ShardedTable]:
        """One :class:`ShardedTable` per table of a sharded module (empty if unsharded)."""
        tbes: Dict[str, Any] = {}
        for lookup in getattr(self.collection, "_lookups", []):
            for emb in getattr(getattr(lookup, "module", lookup), "_emb_modules", []):  # DP lookups are DDP-wrapped
                tbe = getattr(emb, "_emb_module", None)
                if hasattr(tbe, "optimizer_args"):
                    tbes.update({t.name: tbe for t in emb._config.embedding_tables})
        out: Dict[str, ShardedTable] = {}
        for sharding_type, sharding in self.shardings():
            for table in sharding.embedding_tables():
                if table.name in out:  # a column-wise table lists each of its shards
                    continue
                out[table.name] = ShardedTable(
                    name=table.name,
                    sharding_type=sharding_type,
                    compute_kernel=getattr(table.compute_kernel, "value", str(table.compute_kernel)),
                    fused_params=dict(table.fused_params or {}),
                    tbe=tbes.get(table.name),
                )
        return list(out.values())

    def weights(self) -> Dict[str, Any]:
        """Table name -> weight (``ShardedTensor`` for sharded tables) from the collection's state_dict."""
        prefix = "embedding_bags" if isinstance(
            self.collection, (EmbeddingBagCollection, ShardedEmbeddingBagCollection)
        ) else "embeddings"
        state = self.collection.state_dict()
        return {n: state[f"{prefix}.{n}.weight"] for n in self.table_names if f"{prefix}.{n}.weight" in state}


def describe(module: nn.Module, path: str = "") -> Optional[EmbeddingModule]:
    """The :class:`EmbeddingModule` for ``module``, or None if it is no embedding module."""
    kind = _kind(module)
    if kind is None:
        return None
    collection = module if kind == "other" else _collection(module, kind)
    return EmbeddingModule(path, module, kind, collection, tuple(table_configs(collection)))


def embedding_modules(model: nn.Module) -> List[EmbeddingModule]:
    """Every outermost embedding module of ``model`` (a ``DistributedModelParallel`` is unwrapped)."""
    if isinstance(model, DistributedModelParallel):
        model = model.module
    found: List[EmbeddingModule] = []
    for path, module in model.named_modules():
        if any(not f.path or path.startswith(f.path + ".") for f in found):
            continue  # inside an embedding module already found
        entry = describe(module, path)
        if entry is not None:
            found.append(entry)
    return found


def duplicate_table_names(modules: Sequence[EmbeddingModule]) -> Dict[str, List[str]]:
    """Table names that more than one module uses -> those modules' paths."""
    owners: Dict[str, List[str]] = {}
    for m in modules:
        for name in m.table_names:
            owners.setdefault(name, []).append(m.path)
    return {name: paths for name, paths in owners.items() if len(paths) > 1}


def table_names(model: nn.Module) -> List[str]:
    """Names of every table in ``model``, in module order."""
    return [name for m in embedding_modules(model) for name in m.table_names]


def check_sharded(model: nn.Module, part: str) -> None:
    """Refuse ``model`` if a TorchRec embedding module in it is not sharded yet, naming ``part`` and the fix.

    Parts that work on fused table kernels or DDP (table LR, FALR, re-initialisation,
    gradient accumulation) would do nothing on modules ``DistributedModelParallel`` has
    not sharded: built on the model before sharding, they must say so, not stay silent.

    Example::

        check_sharded(dmp, "TableLRScheduler")       # passes; with the unsharded model: ValueError
    """
    unsharded = [m for m in embedding_modules(model) if not m.sharded]
    if unsharded:
        names = ", ".join(f"{m.type_name} {m.path!r}" for m in unsharded)
        raise ValueError(
            f"{part} needs the model sharded by DistributedModelParallel, but {names} is not: build it after "
            f"`model = DistributedModelParallel(model, ...)` and pass that model"
        )


@contextlib.contextmanager
def quiet_sharded_tensors() -> Iterator[None]:
    """Silence, inside the block, torch's deprecation of ``ShardedTensor`` (TorchRec's sharded tables are
    ``ShardedTensor``s; every access to one, and DCP reading them, warns): a note for TorchRec, not for a user.

    Example::

        with quiet_sharded_tensors():
            dcp.load({"model": dmp.state_dict()}, checkpoint_id=path)
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Please use DTensor instead", category=FutureWarning)
        yield
