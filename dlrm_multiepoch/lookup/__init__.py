"""Lookup fast paths: fused-KJT lookup, singleton-bag gather, dense-GEMM backward for small tables."""

from dlrm_multiepoch.lookup.comm_count import count_all_to_all
from dlrm_multiepoch.lookup.fused import FusedKJT, FusedKJTLookup
from dlrm_multiepoch.lookup.singleton import SingletonEmbeddingBagCollection, detect_singleton_features
from dlrm_multiepoch.lookup.small_table import (
    DENSE_BACKWARD_MAX_ROWS,
    SmallTableEmbeddingBagCollection,
    dense_backward_max_rows,
    dense_grad_embedding_bag,
)

__all__ = [
    "DENSE_BACKWARD_MAX_ROWS",
    "FusedKJT",
    "FusedKJTLookup",
    "SingletonEmbeddingBagCollection",
    "SmallTableEmbeddingBagCollection",
    "count_all_to_all",
    "dense_backward_max_rows",
    "dense_grad_embedding_bag",
    "detect_singleton_features",
]
