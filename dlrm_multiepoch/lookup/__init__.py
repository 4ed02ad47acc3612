"""Lookup fast paths: fused-KJT lookup, singleton-bag gather, dense-GEMM backward for small tables."""

from dlrm_multiepoch.lookup.comm_count import count_all_to_all
from dlrm_multiepoch.lookup.fused import FusedKJT, FusedKJTLookup

__all__ = [
    "FusedKJT",
    "FusedKJTLookup",
    "count_all_to_all",
]
