"""The DeepFM of ``deepfm.py``, unchanged, under the training app: ``--model app_model:build``.

This file is all the app needs to train the model, and so all ``dlrm-multiepoch sweep``,
``search`` and ``compare`` need to decide its multi-epoch schedule: a builder that makes the
model for a dataset's tables, and an adapter from the app's batch to TorchRec's ``Batch`` the
model takes. From this folder (the ranks import ``app_model`` from their working directory)::

    python make_clicks.py clicks.csv                     # your data, as a file the app reads
    dlrm-multiepoch search runs/deepfm-search --epochs 2 -- --model app_model:build --dataset interactions \\
        --data_path clicks.csv --categorical_cols category --dense_cols d0,d1,d2,d3 --history_length 4 \\
        --val_fraction 0.1 --embedding_dim 8 --batch_size 256
    dlrm-multiepoch compare runs/deepfm-search

docs/YOUR_MODEL.md walks through it.
"""

import torch
from torch import nn
from torchrec.datasets.utils import Batch as TorchRecBatch

from deepfm import DeepFM
from dlrm_multiepoch import BatchAdapter, InteractionData, ModelConfig

HISTORY = "history"  # the sequence feature --history_length adds: the user's latest items, ids of the item table


def build(data: InteractionData, cfg: ModelConfig, device: torch.device) -> nn.Module:
    """DeepFM for ``data``'s tables: a pooled table per one-id feature, the history as its sequence table.

    Its tables are created on the meta device (DeepFM's default), its dense layers on the CPU;
    ``DistributedModelParallel`` shards the one and moves the other to ``device``.
    """
    if len(data.tasks) != 1:
        raise ValueError(f"--model app_model:build: DeepFM predicts one label; dataset {data.name!r} has tasks {data.tasks}")
    pooled = {f: t.num_embeddings for t in data.tables for f in t.feature_names if f != HISTORY}
    sequence = {f: t.num_embeddings for t in data.tables for f in t.feature_names if f == HISTORY}
    if not sequence:
        raise ValueError("--model app_model:build: DeepFM reads an item history; pass --history_length (e.g. 4)")
    model = DeepFM(pooled, sequence, num_dense=len(data.dense_names), dim=cfg.embedding_dim)
    task = data.tasks[0]
    # Only repackages the batch's tensors: TorchRec's pipelines still find each lookup's input in the app's batch.
    return BatchAdapter(model, lambda batch: TorchRecBatch(batch.dense_features, batch.sparse_features, batch.labels[task]))
