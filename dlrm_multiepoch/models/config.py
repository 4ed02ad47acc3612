"""Model architecture config (flags of the same names, and the parsed values builders read)."""

import math
from dataclasses import dataclass
from typing import Tuple

from dlrm_multiepoch.config_section import (
    CHANGES_SHAPES,
    SWEEP_SEARCH_COMPONENT,
    TRAIN_COMPONENT,
    option,
    parsed,
    validated,
)
from dlrm_multiepoch.import_path import find_import_path, is_import_path, split_import_path
from dlrm_multiepoch.names import MODELS


def int_list(text: str, flag: str) -> Tuple[int, ...]:
    """Parse ``"64,32"`` into ``(64, 32)``; a bad entry names the flag."""
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--{flag} expects comma-separated integers, got {text!r}") from None
    if not sizes or min(sizes) <= 0:
        raise ValueError(f"--{flag} expects positive layer sizes, got {text!r}")
    return sizes


def float_list(text: str, flag: str) -> Tuple[float, ...]:
    """Parse ``"1,0.5"`` into finite non-negative floats; empty text gives ``()``."""
    if not text.strip():
        return ()
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--{flag} expects comma-separated numbers, got {text!r}") from None
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise ValueError(f"--{flag} expects finite non-negative numbers, got {text!r}")
    return values


@dataclass
class ModelConfig:
    """Architecture of the DLRM-style model (flags of the same names)."""

    model: str = option(
        "dlrm",
        "dlrm (dot interaction), dlrm_dcn (low-rank DCN-v2 cross), multipath (feature-cross + "
        "sequence + contrastive paths; needs --history_length > 0), or your own model's builder by import path "
        "MODULE:NAME, e.g. my_models:build (docs/YOUR_MODEL.md)",
        roles=(TRAIN_COMPONENT, SWEEP_SEARCH_COMPONENT, CHANGES_SHAPES),
    )
    embedding_dim: int = option(
        16, "dimension of every embedding table",
        roles=(TRAIN_COMPONENT, SWEEP_SEARCH_COMPONENT, CHANGES_SHAPES),
    )
    dense_arch_layer_sizes: str = option(
        "64,16", "dense MLP sizes; the last must equal --embedding_dim",
        roles=(TRAIN_COMPONENT, CHANGES_SHAPES),
    )
    over_arch_layer_sizes: str = option(
        "64,32", "hidden sizes of the over arch; a head with one logit per task is appended",
        roles=(TRAIN_COMPONENT, CHANGES_SHAPES),
    )
    dcn_num_layers: int = option(3, "cross layers of dlrm_dcn", roles=(CHANGES_SHAPES,))
    dcn_low_rank_dim: int = option(16, "low-rank dimension of dlrm_dcn cross layers", roles=(CHANGES_SHAPES,))
    # Multi-path model (--model multipath). The feature-cross path reuses the dense arch,
    # --over_arch_layer_sizes and the dcn_* sizes above.
    transformer_layers: int = option(1, "multipath: transformer encoder layers of the sequence path", roles=(CHANGES_SHAPES,))
    transformer_heads: int = option(2, "multipath: attention heads (must divide --embedding_dim)", roles=(CHANGES_SHAPES,))
    transformer_ff_dim: int = option(64, "multipath: feed-forward width of the transformer", roles=(CHANGES_SHAPES,))
    sequence_head_layer_sizes: str = option(
        "32", "multipath: hidden sizes of the sequence path's task head",
        roles=(CHANGES_SHAPES,),
    )
    task_loss_weights: str = option("", "multipath: comma-separated BCE weight per task, in task order (empty: 1 each)")
    pairwise_loss_weight: float = option(
        0.1, "multipath: weight of the in-batch pairwise (BPR) ranking loss; 0 disables it",
    )
    contrastive_loss_weight: float = option(
        0.1, "multipath: weight of the next-item InfoNCE loss over the history; 0 disables it",
    )
    contrastive_temperature: float = option(0.1, "temperature of the InfoNCE losses (multipath and pre-training)")
    fused_lookup: bool = option(
        True,
        "multipath: look up the candidate item and the history in ONE item-table lookup (one input "
        "and one output all-to-all, started ahead of the forward by the train pipeline); --no-fused_lookup "
        "looks them up separately, for comparison: twice the item table's all-to-alls, inside the forward, "
        "and a sharded table's in-backward optimizer then steps once per lookup",
    )
    # Parsed by validate() from the flags above.
    dense_arch_sizes: Tuple[int, ...] = parsed()  # --dense_arch_layer_sizes
    over_arch_sizes: Tuple[int, ...] = parsed()  # --over_arch_layer_sizes (the task head is appended)
    sequence_head_sizes: Tuple[int, ...] = parsed()  # --sequence_head_layer_sizes
    task_loss_weight_values: Tuple[float, ...] = parsed()  # --task_loss_weights; (): 1 per task

    def validate(self) -> None:
        """Raise ``ValueError`` naming the flag and the expected value; needs no data."""
        if is_import_path(self.model):
            split_import_path("--model", self.model)
        elif self.model not in MODELS:
            raise ValueError(
                f"--model must be one of {', '.join(MODELS)} or an import path MODULE:NAME of your model's builder "
                f"(docs/YOUR_MODEL.md); got {self.model!r}"
            )
        positive = ("embedding_dim", "dcn_num_layers", "dcn_low_rank_dim", "transformer_layers")
        positive += ("transformer_heads", "transformer_ff_dim")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be a positive integer, got {getattr(self, name)}")
        self.parse_flags()
        if not is_import_path(self.model):  # your builder reads the layer sizes as it likes
            check_dense_arch(self)
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

    def check_paths(self) -> None:
        """Refuse, naming ``--model``, an import path whose module no rank would find or that defines no such
        name (looked for from this process's working directory; nothing is imported)."""
        if is_import_path(self.model):
            find_import_path("--model", self.model)

    def parse_flags(self) -> None:
        """Parse the text flags into the parsed fields (``validate()`` does, first); a bad one names its flag."""
        self.dense_arch_sizes = int_list(self.dense_arch_layer_sizes, "dense_arch_layer_sizes")
        self.over_arch_sizes = int_list(self.over_arch_layer_sizes, "over_arch_layer_sizes")
        self.sequence_head_sizes = int_list(self.sequence_head_layer_sizes, "sequence_head_layer_sizes")
        # The count is checked against the tasks once the data is loaded (MultiPathLoss).
        self.task_loss_weight_values = float_list(self.task_loss_weights, "task_loss_weights")


def check_dense_arch(cfg: ModelConfig) -> None:
    """The dense arch's output joins the tables' embeddings: its last size must be ``--embedding_dim``."""
    if validated(cfg, parse_only=True).dense_arch_sizes[-1] != cfg.embedding_dim:
        raise ValueError(
            f"--dense_arch_layer_sizes must end with --embedding_dim ({cfg.embedding_dim}), got {cfg.dense_arch_layer_sizes!r}"
        )
