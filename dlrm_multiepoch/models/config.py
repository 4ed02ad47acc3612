"""Model architecture config (flags of the same names)."""

import math
from dataclasses import dataclass, field
from typing import List

from dlrm_multiepoch.names import MODELS, check_name


def int_list(text: str, flag: str) -> List[int]:
    """Parse ``"64,32"`` into ``[64, 32]``; a bad entry names the flag."""
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{flag} expects comma-separated integers, got {text!r}") from None
    if not sizes or min(sizes) <= 0:
        raise ValueError(f"--{flag} expects positive layer sizes, got {text!r}")
    return sizes


@dataclass
class ModelConfig:
    """Architecture of the DLRM-style model (flags of the same names)."""

    model: str = field(
        default="dlrm",
        metadata={
            "help": "dlrm (dot interaction), dlrm_dcn (low-rank DCN-v2 cross), multipath (feature-cross + "
            "sequence + contrastive paths; needs --history_length > 0)"
        },
    )
    embedding_dim: int = field(default=16, metadata={"help": "dimension of every embedding table"})
    dense_arch_layer_sizes: str = field(
        default="64,16", metadata={"help": "dense MLP sizes; the last must equal --embedding_dim"}
    )
    over_arch_layer_sizes: str = field(
        default="64,32", metadata={"help": "hidden sizes of the over arch; a head with one logit per task is appended"}
    )
    dcn_num_layers: int = field(default=3, metadata={"help": "cross layers of dlrm_dcn"})
    dcn_low_rank_dim: int = field(default=16, metadata={"help": "low-rank dimension of dlrm_dcn cross layers"})
    # Multi-path model (--model multipath). The feature-cross path reuses the dense arch,
    # --over_arch_layer_sizes and the dcn_* sizes above.
    transformer_layers: int = field(
        default=1, metadata={"help": "multipath: transformer encoder layers of the sequence path"}
    )
    transformer_heads: int = field(
        default=2, metadata={"help": "multipath: attention heads (must divide --embedding_dim)"}
    )
    transformer_ff_dim: int = field(default=64, metadata={"help": "multipath: feed-forward width of the transformer"})
    sequence_head_layer_sizes: str = field(
        default="32", metadata={"help": "multipath: hidden sizes of the sequence path's task head"}
    )
    task_loss_weights: str = field(
        default="", metadata={"help": "multipath: comma-separated BCE weight per task, in task order (empty: 1 each)"}
    )
    pairwise_loss_weight: float = field(
        default=0.1, metadata={"help": "multipath: weight of the in-batch pairwise (BPR) ranking loss; 0 disables it"}
    )
    contrastive_loss_weight: float = field(
        default=0.1,
        metadata={"help": "multipath: weight of the next-item InfoNCE loss over the history; 0 disables it"},
    )
    contrastive_temperature: float = field(
        default=0.1, metadata={"help": "temperature of the InfoNCE losses (multipath and pre-training)"}
    )
    fused_lookup: bool = field(
        default=True,
        metadata={
            "help": "multipath: look up the candidate item and the history in ONE item-table lookup (one input "
            "and one output all-to-all, started ahead of the forward by the train pipeline); --no-fused_lookup "
            "looks them up separately, for comparison: twice the item table's all-to-alls, inside the forward, "
            "and a sharded table's in-backward optimizer then steps once per lookup"
        },
    )


    def validate(self) -> None:
        """Raise ``ValueError`` naming the flag and the expected value; needs no data."""
        check_name("--model", self.model, MODELS)
        positive = ("embedding_dim", "dcn_num_layers", "dcn_low_rank_dim", "transformer_layers")
        positive += ("transformer_heads", "transformer_ff_dim")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be a positive integer, got {getattr(self, name)}")
        dense = int_list(self.dense_arch_layer_sizes, "dense_arch_layer_sizes")
        if dense[-1] != self.embedding_dim:
            raise ValueError(
                f"--dense_arch_layer_sizes must end with --embedding_dim ({self.embedding_dim}), "
                f"got {self.dense_arch_layer_sizes!r}"
            )
        int_list(self.over_arch_layer_sizes, "over_arch_layer_sizes")
        int_list(self.sequence_head_layer_sizes, "sequence_head_layer_sizes")
        if self.model == "multipath" and self.embedding_dim % self.transformer_heads:
            raise ValueError(
                f"--transformer_heads ({self.transformer_heads}) must divide --embedding_dim ({self.embedding_dim})"
            )
        for name in ("pairwise_loss_weight", "contrastive_loss_weight"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"--{name} must be a finite number >= 0, got {value}")
        if not (math.isfinite(self.contrastive_temperature) and self.contrastive_temperature > 0):
            raise ValueError(f"--contrastive_temperature must be a finite number > 0, got {self.contrastive_temperature}")
        if self.task_loss_weights.strip():  # the count is checked against the tasks once the data is loaded
            weights = float_list(self.task_loss_weights, "task_loss_weights", len(self.task_loss_weights.split(",")))
            if not all(math.isfinite(w) for w in weights):
                raise ValueError(f"--task_loss_weights expects finite numbers, got {self.task_loss_weights!r}")


def float_list(text: str, flag: str, count: int) -> List[float]:
    """Parse ``"1,0.5"`` into ``count`` non-negative floats; empty text gives ``[1.0] * count``."""
    if not text.strip():
        return [1.0] * count
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--{flag} expects comma-separated numbers, got {text!r}") from None
    if len(values) != count or min(values) < 0:
        raise ValueError(f"--{flag} expects {count} non-negative numbers (one per task), got {text!r}")
    return values
