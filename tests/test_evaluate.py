import math

import numpy as np
import torch

from dlrm_multiepoch.models.dlrm import ModelOutput
from dlrm_multiepoch.train.evaluate import binary_metrics, gather_outputs, task_metrics
from tests.multiprocess import run_on_ranks


def _reference_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    # Probability that a random positive outscores a random negative (ties count half).
    pos, neg = scores[labels == 1], scores[labels == 0]
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return (greater + 0.5 * ties) / (len(pos) * len(neg))


def test_binary_metrics_match_reference_formulas():
    rng = np.random.default_rng(0)
    labels = (rng.random(500) < 0.3).astype(np.float64)
    logits = rng.standard_normal(500) + labels
    logits[:50] = np.round(logits[:50])  # some ties
    m = binary_metrics(torch.tensor(logits), torch.tensor(labels))
    p = 1 / (1 + np.exp(-logits))
    logloss = -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))
    base_rate = labels.mean()
    entropy = -(base_rate * math.log(base_rate) + (1 - base_rate) * math.log(1 - base_rate))
    assert abs(m["auc"] - _reference_auc(logits, labels)) < 1e-6
    assert abs(m["logloss"] - logloss) < 1e-9
    assert abs(m["ne"] - logloss / entropy) < 1e-9
    assert m["rows"] == 500


def _output(logits, labels, weights) -> ModelOutput:
    return ModelOutput(torch.tensor(0.0), {}, torch.tensor(logits)[:, None], torch.tensor(labels)[:, None], torch.tensor(weights))


def test_gather_drops_padding_rows():
    merged = gather_outputs([_output([0.5, 0.25], [1.0, 0.0], [1.0, 1.0]), _output([0.75, 9.0], [1.0, 1.0], [1.0, 0.0])])
    assert merged["logits"].flatten().tolist() == [0.5, 0.25, 0.75]
    assert merged["labels"].flatten().tolist() == [1.0, 0.0, 1.0]


def _gather_on_two_ranks(rank: int, world_size: int) -> None:
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((2, 6)).astype(np.float32)
    labels = (rng.random((2, 6)) < 0.5).astype(np.float32)
    weights = np.ones((2, 6), np.float32)
    weights[1, 4:] = 0  # rank 1 padded its last two rows
    mine = [_output(logits[rank], labels[rank], weights[rank])]
    got = task_metrics(mine, ["t"])["t"]
    keep = weights.flatten() > 0
    want = binary_metrics(torch.tensor(logits.flatten()[keep]), torch.tensor(labels.flatten()[keep]))
    assert got == want


def test_metrics_over_two_ranks_equal_single_process_metrics():
    run_on_ranks(_gather_on_two_ranks, 2)
