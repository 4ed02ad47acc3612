"""Criteo's columns as TorchRec names them: 13 integer (dense) features, 26 categoricals, one label.

Both Criteo readers share them: the TSV parser (:mod:`~dlrm_multiepoch.data.criteo`) and
the reader of TorchRec's preprocessed day files (:mod:`~dlrm_multiepoch.data.torchrec_criteo`).
"""

INT_FEATURE_COUNT = 13
CAT_FEATURE_COUNT = 26
# TorchRec's names (torchrec.datasets.criteo.DEFAULT_INT_NAMES / DEFAULT_CAT_NAMES).
DENSE_FEATURES = [f"int_{i}" for i in range(INT_FEATURE_COUNT)]
SPARSE_FEATURES = [f"cat_{i}" for i in range(CAT_FEATURE_COUNT)]
TASK = "label"
