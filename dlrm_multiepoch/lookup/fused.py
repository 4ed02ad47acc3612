"""Fused-KJT lookup: several feature groups, one (sharded) embedding lookup.

A model that looks up candidate features, user-sequence features, ... against the same
sharded tables pays one input and one output all-to-all per lookup. ``FusedKJTLookup``
concatenates the groups' ``KeyedJaggedTensor``s into one, runs the wrapped
``EmbeddingBagCollection`` / ``EmbeddingCollection`` once, and splits the result back
into what each separate call would have returned.
"""

from dataclasses import dataclass
from typing import Dict, List, Mapping, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.types import LazyAwaitable
from torchrec.modules.embedding_modules import get_embedding_names_by_table
from torchrec.sparse.jagged_tensor import JaggedTensor, KeyedJaggedTensor, KeyedTensor

from dlrm_multiepoch.tables import describe

GroupOutput = Union[KeyedTensor, Dict[str, JaggedTensor]]


@dataclass(frozen=True)
class _TableLayout:
    """What a lookup module serves: its features in table order and their output names."""

    pooled: bool
    is_weighted: bool
    feature_names: List[str]  # every input feature once, in table-config order
    embedding_names: Dict[str, List[str]]  # feature -> output keys ("f" or "f@table")


def _table_layout(module: nn.Module) -> _TableLayout:
    """Reads the table configs of an (optionally DMP-wrapped, optionally sharded) EBC or EC."""
    inner = module.module if isinstance(module, DistributedModelParallel) else module
    entry = describe(inner)
    if entry is None or entry.kind not in ("ebc", "ec"):
        raise TypeError(
            f"FusedKJTLookup wraps an EmbeddingBagCollection or EmbeddingCollection (sharded or not), "
            f"got {type(inner).__name__}"
        )
    configs, pooled = list(entry.tables), entry.pooled
    if pooled:
        weighted = inner.is_weighted() if callable(getattr(inner, "is_weighted", None)) else inner._is_weighted
    else:
        weighted = False
    feature_names: List[str] = []
    embedding_names: Dict[str, List[str]] = {}
    for config, names in zip(configs, get_embedding_names_by_table(configs)):
        for feature, name in zip(config.feature_names, names):
            if feature not in embedding_names:
                feature_names.append(feature)
                embedding_names[feature] = []
            embedding_names[feature].append(name)
    return _TableLayout(pooled, bool(weighted), feature_names, embedding_names)


@dataclass(frozen=True)
class FusedKJT:
    """One KJT carrying every group, plus what ``FusedKJTLookup.split`` needs to undo it."""

    features: KeyedJaggedTensor
    group_keys: Dict[str, List[str]]  # group -> its input features
    group_batch_sizes: Dict[str, int]


class FusedKJTLookup(nn.Module):
    """Runs several groups of sparse features through one embedding lookup.

    The groups are concatenated into one ``KeyedJaggedTensor`` in the wrapped module's
    feature order (features no group carries get empty bags, which TorchRec needs since
    every lookup must carry all of a module's features), looked up once, and split back.
    A sharded module thus issues one input and one output all-to-all per step instead of
    one pair per group. Groups with different batch sizes are padded with empty bags to
    the largest one and the padding rows are dropped from the outputs, so each group gets
    exactly its own batch back; gradients reach the same rows as with separate calls.

    Each group's output has the type a separate call would return: a ``KeyedTensor`` for
    an ``EmbeddingBagCollection`` (keys in the module's table order), a
    ``Dict[str, JaggedTensor]`` for an ``EmbeddingCollection``. Features shared by several
    tables appear under TorchRec's ``"feature@table"`` names, as in a direct call.

    Under ``TrainPipelineSparseDist`` a KJT built inside the model cannot have its input
    all-to-all started ahead of the forward (the pipeline only does that for KJTs taken
    straight from the batch). To keep it pipelined, let the data loader emit the groups
    already fused into the batch KJT (as ``MultiPathSparseArch`` does with the candidate
    item and the history) and call the collection on it directly.

    Args:
        module: an ``EmbeddingBagCollection`` or ``EmbeddingCollection``, unsharded,
            sharded by ``DistributedModelParallel``, or the DMP itself.
        fused: ``False`` runs one lookup per group instead (each group padded with empty
            bags for the other features), the stock behaviour, for comparison.

    Example::

        lookup = FusedKJTLookup(model.sparse_arch.embedding_bag_collection)
        out = lookup({"candidate": batch.candidate_kjt, "history": batch.history_kjt})
        out["candidate"].to_dict()["item"]  # (B, D) pooled candidate item embedding
    """

    def __init__(self, module: nn.Module, fused: bool = True) -> None:
        super().__init__()
        self.module = module
        self.fused = fused
        self._layout = _table_layout(module)

    def forward(self, groups: Mapping[str, KeyedJaggedTensor]) -> Dict[str, GroupOutput]:
        """Looks up every group; returns ``{group: output}`` in the order of ``groups``."""
        if self.fused:
            fused = self.combine(groups)
            return self.split(self.module(fused.features), fused)
        out: Dict[str, GroupOutput] = {}
        for name, kjt in groups.items():
            one = self.combine({name: kjt})
            out.update(self.split(self.module(one.features), one))
        return out

    def combine(self, groups: Mapping[str, KeyedJaggedTensor]) -> FusedKJT:
        """Concatenates the groups into one KJT in the module's feature order.

        Exposed on its own so that the concatenation can run in a data-loading stage
        (e.g. a pipeline's batch transform) and only ``module`` + ``split`` in the model.
        """
        layout = self._layout
        if len(groups) == 0:
            raise ValueError("FusedKJTLookup needs at least one feature group, got none")
        owner: Dict[str, str] = {}
        batch_sizes: Dict[str, int] = {}
        for name, kjt in groups.items():
            if kjt.variable_stride_per_key():
                raise ValueError(
                    f"group {name!r}: variable batch per feature (stride_per_key_per_rank) is not "
                    f"supported; give each group one batch size"
                )
            for key in kjt.keys():
                if key not in layout.embedding_names:
                    raise ValueError(
                        f"group {name!r}: feature {key!r} is not served by any table of the wrapped "
                        f"module (its features: {layout.feature_names})"
                    )
                if key in owner:
                    raise ValueError(f"feature {key!r} appears in groups {owner[key]!r} and {name!r}")
                owner[key] = name
            if layout.is_weighted and kjt.weights_or_none() is None and len(kjt.keys()) > 0:
                raise ValueError(f"group {name!r} has no weights but the wrapped module is weighted")
            batch_sizes[name] = kjt.stride()
        batch = max(batch_sizes.values())

        first = next(iter(groups.values()))
        keys: List[str] = []
        values: List[torch.Tensor] = []
        lengths: List[torch.Tensor] = []
        weights: List[torch.Tensor] = []
        for name, kjt in groups.items():
            if len(kjt.keys()) == 0:
                continue
            keys.extend(kjt.keys())
            values.append(kjt.values())
            group_lengths = kjt.lengths().view(len(kjt.keys()), batch_sizes[name])
            # Empty bags at the end of each feature: values stay where they are.
            lengths.append(F.pad(group_lengths, (0, batch - batch_sizes[name])).flatten())
            if layout.is_weighted:
                weights.append(kjt.weights())
        missing = [f for f in layout.feature_names if f not in owner]
        if missing:
            keys.extend(missing)
            lengths.append(torch.zeros(len(missing) * batch, dtype=first.lengths().dtype, device=first.device()))
        features = KeyedJaggedTensor(
            keys=keys,
            values=torch.cat(values) if values else first.values().new_empty(0),
            weights=(torch.cat(weights) if weights else first.values().new_empty(0, dtype=torch.float))
            if layout.is_weighted
            else None,
            lengths=torch.cat(lengths),
            stride=batch,
        )
        # Always present features in the module's order: a sharded module fixes its input
        # permutation at the first call, so a different key order later would be misread.
        if keys != layout.feature_names:
            index = {k: i for i, k in enumerate(keys)}
            features = features.permute([index[f] for f in layout.feature_names])
        return FusedKJT(
            features=features,
            group_keys={name: list(kjt.keys()) for name, kjt in groups.items()},
            group_batch_sizes=batch_sizes,
        )

    def split(self, output: Union[KeyedTensor, Dict[str, JaggedTensor]], fused: FusedKJT) -> Dict[str, GroupOutput]:
        """Splits the module's output for ``fused.features`` into per-group outputs."""
        if isinstance(output, LazyAwaitable):  # what a sharded module returns
            output = output.wait()
        if self._layout.pooled:
            assert isinstance(output, KeyedTensor)
            # One split of the whole output shared by all groups, then a cat per group: the
            # backward is one cat of the column grads, not a full-size zero tensor per key.
            pieces = dict(zip(output.keys(), output.values().split(output.length_per_key(), dim=1)))
            return {
                name: self._split_pooled(pieces, keys, fused.group_batch_sizes[name])
                for name, keys in fused.group_keys.items()
            }
        assert isinstance(output, dict)
        return {
            name: self._split_sequence(output, keys, fused.group_batch_sizes[name])
            for name, keys in fused.group_keys.items()
        }

    def _output_names(self, keys: Sequence[str]) -> List[str]:
        wanted = set(keys)
        return [n for f in self._layout.feature_names if f in wanted for n in self._layout.embedding_names[f]]

    def _split_pooled(self, pieces: Dict[str, torch.Tensor], keys: Sequence[str], batch: int) -> KeyedTensor:
        names = self._output_names(keys)
        columns = [pieces[n] for n in names]
        if not columns:
            group_values = next(iter(pieces.values())).new_zeros(batch, 0)
        else:
            group_values = columns[0] if len(columns) == 1 else torch.cat(columns, dim=1)
        return KeyedTensor(keys=names, length_per_key=[c.shape[1] for c in columns], values=group_values[:batch])

    def _split_sequence(
        self, output: Dict[str, JaggedTensor], keys: Sequence[str], batch: int
    ) -> Dict[str, JaggedTensor]:
        result: Dict[str, JaggedTensor] = {}
        for name in self._output_names(keys):
            jt = output[name]
            if jt.lengths().numel() == batch:
                result[name] = jt
            else:  # the padding bags are empty: only the lengths need trimming
                result[name] = JaggedTensor(
                    values=jt.values(), lengths=jt.lengths()[:batch], weights=jt.weights_or_none()
                )
        return result

