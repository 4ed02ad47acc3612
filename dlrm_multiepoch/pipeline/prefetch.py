"""Which sharded modules may look up early, and the forward that hands a module its prefetched lookup."""

from typing import Any, List, Optional

from torch import nn
from torchrec.distributed.train_pipeline.runtime_forwards import EmbeddingPipelinedForward
from torchrec.sparse.jagged_tensor import JaggedTensor, KeyedTensor

from dlrm_multiepoch.tables import MANAGED_COLLISION_KINDS, describe


def late_lookup_reason(module: nn.Module) -> Optional[str]:
    """Why a sharded module's lookup must wait for the previous batch's update, or None.

    Decided from the sharding plan (the same on every rank), so all ranks issue their
    collectives in the same order.
    """
    entry = describe(module)
    if entry is None or entry.kind == "other":
        return f"{type(module).__name__} is not an EmbeddingBagCollection/EmbeddingCollection/FP-EBC"
    if entry.kind in MANAGED_COLLISION_KINDS:
        return "its id remapper may evict rows, re-initialising them, during the lookup"
    processors = getattr(module, "_feature_processors", None) if entry.kind == "fp_ebc" else None
    if processors is not None and any(p.requires_grad for p in processors.parameters()):
        return (
            "its feature processors' parameters: the dense optimizer updates them in place after an early lookup "
            "saved them for backward"
        )
    tables = entry.sharded_tables()
    replicated = [t.name for t in tables if t.data_parallel]
    if replicated:
        return (
            f"data-parallel tables {replicated}: the dense optimizer updates them in place after an early lookup "
            "saved them for backward"
        )
    dense = [t.name for t in tables if t.dense_kernel]
    if dense:
        return (
            f"dense-kernel tables {dense}: the dense optimizer updates them in place after an early lookup saved "
            "them for backward"
        )
    return None


def _output_tensors(out: Any) -> list:
    if isinstance(out, KeyedTensor):
        return [out.values()]
    if isinstance(out, dict):
        return [jt.values() for jt in out.values() if isinstance(jt, JaggedTensor)]
    return []


class PrefetchedLookupForward(EmbeddingPipelinedForward):
    """Replaces a sharded module's forward: returns the lookup the pipeline already started.

    Unlike TorchRec's ``EmbeddingPipelinedForward`` the embeddings stay attached to
    the graph, so one ``loss.backward()`` runs the output-dist backward and the fused
    table update as in ``TrainPipelineSparseDist``; and nothing here touches CUDA
    streams on CPU. A gradient hook marks the module in ``context.got_grad``: no
    gradient (a frozen table whose output was detached downstream) means no update.
    """

    def __call__(self, *input: Any, **kwargs: Any) -> Any:
        requests = self._context.embedding_a2a_requests
        if self._name not in requests:
            raise AssertionError(
                f"no prefetched lookup for {self._name!r} in batch {self._context.index}: the module was called "
                f"twice in one forward, or outside SemiSyncTrainPipeline.progress; available: {sorted(requests)}"
            )
        awaitable = requests.pop(self._name)
        context, name = self._context, self._name

        def watch(out: Any) -> Any:
            for tensor in _output_tensors(out):
                if tensor.requires_grad:
                    tensor.register_hook(lambda grad: context.got_grad.add(name))
            return out

        # Managed-collision modules return (embeddings, remapped ids).
        (awaitable[0] if isinstance(awaitable, tuple) else awaitable).callbacks.append(watch)
        return awaitable


def overlap_line(staleness: int, early: List[str], late: List[str]) -> str:
    """Which modules' lookups overlap the previous batch's backward, and which run after its update."""
    if not staleness:
        return f"staleness=0: every lookup ({', '.join(early + late) or 'none'}) runs after the previous update"
    if not late:
        return f"every lookup overlaps the previous backward ({', '.join(early) or 'no sharded module'})"
    return (
        f"lookups that overlap the previous backward: {', '.join(early) or 'none'}; after each update "
        f"(TrainPipelineSparseDist's order): {', '.join(late)}"
    )
