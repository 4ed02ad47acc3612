"""Calibration-free normalised entropy: NE after the best affine recalibration of the logits.

A split whose positive rate drifts from train's (a time split: later periods like less)
moves logloss and NE even when the ranking of its rows does not change. Refitting
``sigmoid(a * logit + b)`` on the split itself (Platt scaling, two parameters) and
taking the NE of that fit removes the base-rate shift (``b``) and the over/under-
confidence (``a``): what remains is how well the scores separate the labels, like AUC,
but smooth in the scores (AUC only counts order). 0 < ``cal_ne`` <= 1; 1 means no
separation (the fit with ``a = 0`` is the base rate).

The fit runs on the evaluation's per-label logit histograms (:mod:`evaluate`'s AUC
state), with each bin at its centre logit: no extra pass, no predictions kept.

Example::

    cal_ne = recalibrated_ne(neg_hist, pos_hist)   # [2**bits] counts per label
"""

import math

import numpy as np
import torch

_NEWTON_STEPS = 50


def bin_centres(bits: int, bins: np.ndarray) -> np.ndarray:
    """The float32 logit at the centre of each histogram bin (inverse of ``evaluate.score_bins``)."""
    shift = 32 - bits
    key = (bins.astype(np.int64) << shift) + (1 << (shift - 1)) - (1 << 31)
    key = np.where(key < 0, key ^ 0x7FFFFFFF, key)
    return key.astype(np.int32).view(np.float32).astype(np.float64)


def recalibrated_ne(neg: torch.Tensor, pos: torch.Tensor) -> float:
    """NE of the best ``sigmoid(a * logit + b)`` fitted to histogram counts of negatives and positives.

    Args:
        neg: counts of label-0 rows per logit bin (length ``2**bits``).
        pos: the same for label-1 rows.

    Returns:
        The fitted model's logloss over the base-rate entropy (NaN with one class or
        non-finite logits).
    """
    # Only the used bins leave torch: a histogram has 2**20 of them, a split far fewer rows.
    used_t = torch.nonzero(neg + pos).squeeze(1)
    w0, w1 = neg[used_t].double().numpy(), pos[used_t].double().numpy()
    n_neg, n_pos = float(w0.sum()), float(w1.sum())
    if not (n_neg and n_pos):
        return float("nan")
    bits = int(math.log2(len(neg)))
    used = used_t.numpy()
    z = bin_centres(bits, used)
    if not np.isfinite(z).all():
        return float("nan")
    n = n_neg + n_pos
    # Standardised scores keep Newton's 2x2 system well conditioned.
    mean = float((w0 + w1) @ z) / n
    std = math.sqrt(float((w0 + w1) @ (z - mean) ** 2) / n) or 1.0
    x = (z - mean) / std
    p = n_pos / n
    base = -(p * math.log(p) + (1 - p) * math.log(1 - p))
    theta = np.array([0.0, math.log(p / (1 - p))])  # a = 0: the base rate, whose loss is ``base``

    def loss(t: np.ndarray) -> float:
        s = t[0] * x + t[1]
        return float(w1 @ np.logaddexp(0.0, -s) + w0 @ np.logaddexp(0.0, s)) / n

    current = loss(theta)
    for _ in range(_NEWTON_STEPS):
        s = theta[0] * x + theta[1]
        q = 1.0 / (1.0 + np.exp(-s))
        r = q * (w0 + w1) - w1  # d loss / d s, per bin (times n)
        h = q * (1 - q) * (w0 + w1)
        grad = np.array([r @ x, r.sum()]) / n
        hess = np.array([[h @ (x * x), h @ x], [h @ x, h.sum()]]) / n + 1e-12 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        scale = 1.0
        while scale > 1e-6:  # backtracking: the loss is convex, a shorter step always helps eventually
            trial = theta - scale * step
            trial_loss = loss(trial)
            if trial_loss <= current:
                break
            scale /= 2
        else:
            break
        done = current - trial_loss < 1e-12
        theta, current = trial, trial_loss
        if done:
            break
    return min(current, base) / base
