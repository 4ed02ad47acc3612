"""Streaming, rank-summed metrics against the exact metrics of all predictions gathered."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torchmetrics.functional.classification import binary_auroc

from dlrm_multiepoch.testing.ranks import run_on_ranks
from dlrm_multiepoch.train.evaluate import BinaryMetrics, score_bins


def pairwise_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    # Probability that a random positive outscores a random negative (ties count half), in float64.
    pos, neg = scores[labels == 1], scores[labels == 0]
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return (greater + 0.5 * ties) / (len(pos) * len(neg))


def exact(logits: np.ndarray, labels: np.ndarray) -> dict:
    """What evaluation computed before, from all rows gathered: torchmetrics' exact AUC
    (returned in float32) and float64 logloss; plus the exact AUC in float64."""
    x, y = torch.tensor(logits, dtype=torch.float64), torch.tensor(labels, dtype=torch.float64)
    logloss = F.binary_cross_entropy_with_logits(x, y).item()
    p = y.mean().item()
    entropy = -(p * math.log(p) + (1 - p) * math.log(1 - p))
    return {
        "auc": pairwise_auc(logits, labels),
        "auc_torchmetrics": binary_auroc(x, y.long()).item(),
        "logloss": logloss,
        "ne": logloss / entropy,
        "positive_rate": p,
    }


def sample(n: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    labels = (rng.random((n, 2)) < [0.3, 0.1]).astype(np.float32)
    logits = (rng.standard_normal((n, 2)) + 1.5 * labels).astype(np.float32)
    logits[:40] = np.round(logits[:40])  # exact ties count half, as in the exact AUC
    return logits, labels


def check_close(got: dict, want: dict, bound_limit: float) -> None:
    for name in ("logloss", "ne", "positive_rate"):
        assert abs(got[name] - want[name]) < 1e-12, name
    # Pairs of one bin count as ties: the error is at most the reported bound.
    assert abs(got["auc"] - want["auc"]) <= got["auc_error_bound"] + 1e-12
    assert got["auc_error_bound"] < bound_limit
    assert abs(got["auc"] - want["auc_torchmetrics"]) <= got["auc_error_bound"] + 1e-6  # float32 there


def test_single_process_matches_exact_metrics_and_slices() -> None:
    logits, labels = sample(3000, 0)
    weights = np.ones(3000, np.float32)
    weights[-7:] = 0  # padding rows count nowhere
    slices = np.arange(3000) % 3
    metrics = BinaryMetrics(["like", "love"], slices=["a", "b", "c"])
    for lo in range(0, 3000, 512):
        hi = lo + 512
        metrics.update(
            torch.from_numpy(logits[lo:hi]), torch.from_numpy(labels[lo:hi]), torch.from_numpy(weights[lo:hi]),
            torch.from_numpy(slices[lo:hi]),
        )
    everything, *per_slice = metrics.compute_all()
    real = weights > 0
    for t, task in enumerate(["like", "love"]):
        check_close(everything[task], exact(logits[real, t], labels[real, t]), 1e-4)
        assert everything[task]["rows"] == 2993
        for s, got in enumerate(per_slice):
            rows = real & (slices == s)
            check_close(got[task], exact(logits[rows, t], labels[rows, t]), 1e-3)


def test_auc_is_exact_when_scores_fall_in_distinct_bins() -> None:
    order = torch.randperm(997, generator=torch.Generator().manual_seed(0))
    logits = torch.linspace(-6, 6, 997, dtype=torch.float32)[order]
    labels = (torch.rand(997, generator=torch.Generator().manual_seed(1)) < torch.sigmoid(logits)).float()
    assert len(torch.unique(score_bins(logits))) == 997
    metrics = BinaryMetrics(["t"])
    metrics.update(logits[:, None], labels[:, None], torch.ones(997))
    got = metrics.compute()["t"]
    assert got["auc_error_bound"] == 0.0
    assert abs(got["auc"] - pairwise_auc(logits.numpy(), labels.numpy())) < 1e-12


def test_score_bins_are_monotone() -> None:
    x = torch.tensor([-float("inf"), -1e30, -2.0, -1.0, -1e-30, -0.0, 0.0, 1e-30, 1.0, 2.0, 1e30, float("inf")])
    bins = score_bins(x)
    assert (bins[1:] >= bins[:-1]).all() and bins.min() >= 0 and bins.max() < 2**20


def _two_ranks(rank: int, world_size: int) -> None:
    logits, labels = sample(2000, 1)
    weights = np.ones(2000, np.float32)
    weights[1000 + 990 :] = 0  # rank 1 padded its last 10 rows
    mine = slice(rank * 1000, (rank + 1) * 1000)
    metrics = BinaryMetrics(["like", "love"])
    for lo in range(mine.start, mine.stop, 256):
        hi = min(lo + 256, mine.stop)
        batch = [torch.from_numpy(a[lo:hi]) for a in (logits, labels, weights)]
        metrics.update(*batch)
    got = metrics.compute()
    real = weights > 0
    for t, task in enumerate(["like", "love"]):
        check_close(got[task], exact(logits[real, t], labels[real, t]), 1e-4)
        assert got[task]["rows"] == 1990


def test_metrics_over_two_ranks_equal_gathered_metrics() -> None:
    run_on_ranks(_two_ranks, 2)


def platt_ne(logits: np.ndarray, labels: np.ndarray) -> float:
    """Reference: NE of sigmoid(a * logit + b) fitted to every row by L-BFGS in float64."""
    x, y = torch.tensor(logits, dtype=torch.float64), torch.tensor(labels, dtype=torch.float64)
    theta = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS(
        [theta], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-15, line_search_fn="strong_wolfe"
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(theta[0] * x + theta[1], y)
        loss.backward()
        return loss

    opt.step(closure)
    plain = exact(logits, labels)
    return closure().item() * plain["ne"] / plain["logloss"]  # over the base-rate entropy


def test_cal_ne_equals_a_platt_fit_and_ignores_affine_miscalibration() -> None:
    logits, labels = sample(5000, 2)
    want = platt_ne(logits[:, 0], labels[:, 0])
    seen = []
    for scale, shift in [(1.0, 0.0), (3.0, -2.0), (0.25, 1.5)]:  # over/under-confident, base rate shifted
        metrics = BinaryMetrics(["like"])
        scores = torch.from_numpy(scale * logits[:, :1] + np.float32(shift))
        metrics.update(scores, torch.from_numpy(labels[:, :1]), torch.ones(5000))
        got = metrics.compute()["like"]
        # Bin centres stand for the logits (0.05% apart): the fit matches to 1e-5 of NE.
        assert abs(got["cal_ne"] - want) < 1e-5
        seen.append(got)
    assert len({round(m["ne"], 3) for m in seen}) == 3  # plain NE moves with the miscalibration
    assert all(m["cal_ne"] <= m["ne"] + 1e-12 for m in seen)  # the identity is one of the fits


def test_cal_ne_is_undefined_with_one_class_and_one_for_uninformative_scores() -> None:
    metrics = BinaryMetrics(["t"])
    metrics.update(torch.randn(100, 1), torch.zeros(100, 1), torch.ones(100))
    assert math.isnan(metrics.compute()["t"]["cal_ne"])
    flat = BinaryMetrics(["t"])
    flat.update(torch.full((100, 1), 0.3), (torch.arange(100) % 4 == 0).float()[:, None], torch.ones(100))
    assert flat.compute()["t"]["cal_ne"] == pytest.approx(1.0, abs=1e-12)


def test_evaluation_computes_every_metric_of_the_table_and_the_logger_shows_each() -> None:
    """The one metric table (``metrics.py``) names what evaluation returns, TensorBoard gets and the console shows."""
    from dlrm_multiepoch.metrics import METRICS
    from dlrm_multiepoch.train.metrics_logger import format_metrics, metric_scalars

    logits, labels = sample(500, 1)
    metrics = BinaryMetrics(["like", "love"])
    metrics.update(torch.from_numpy(logits), torch.from_numpy(labels), torch.ones(500))
    results = {"val": metrics.compute()}
    assert set(METRICS) <= set(results["val"]["like"])
    assert set(metric_scalars(results)) == {f"val/{t}/{m}" for t in ("like", "love") for m in METRICS}
    line = format_metrics("eval:", results).splitlines()[1]
    assert line.split(": ", 1)[1] == "  ".join(f"{m} {results['val']['like'][m]:.4f}" for m in METRICS)
    assert format_metrics("eval:", {"val": {"like": {"auc": float("nan")}}}).endswith("like: auc n/a")
