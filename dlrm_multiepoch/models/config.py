"""Model architecture config (flags of the same names)."""

from dataclasses import dataclass, field
from typing import List


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

    model: str = field(default="dlrm", metadata={"help": "dlrm (dot interaction), dlrm_dcn (low-rank DCN-v2 cross)"})
    embedding_dim: int = field(default=16, metadata={"help": "dimension of every embedding table"})
    dense_arch_layer_sizes: str = field(
        default="64,16", metadata={"help": "dense MLP sizes; the last must equal --embedding_dim"}
    )
    over_arch_layer_sizes: str = field(
        default="64,32", metadata={"help": "hidden sizes of the over arch; a head with one logit per task is appended"}
    )
    dcn_num_layers: int = field(default=3, metadata={"help": "cross layers of dlrm_dcn"})
    dcn_low_rank_dim: int = field(default=16, metadata={"help": "low-rank dimension of dlrm_dcn cross layers"})
