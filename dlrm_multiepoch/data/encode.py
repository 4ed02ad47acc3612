"""Split rows (random, by time), subsample them, and bucket ages (numpy only).

Id maps and dense statistics are fitted on the train split only
(:mod:`~dlrm_multiepoch.data.vocab`, :mod:`~dlrm_multiepoch.data.preprocess`), so
nothing about the test split leaks into them.
"""

from typing import Tuple

import numpy as np

# Age buckets of MovieLens-1M (under 18, 18-24, 25-34, 35-44, 45-49, 50-55, 56+).
AGE_BUCKET_EDGES = (18, 25, 35, 45, 50, 56)


def check_fraction(test_fraction: float) -> None:
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"--test_fraction must be in (0, 1), got {test_fraction}")


def subsample(n: int, max_rows: int, seed: int) -> np.ndarray:
    """Sorted indices of ``max_rows`` of ``n`` rows, drawn by a seeded shuffle (the
    original row order, hence time order, is kept)."""
    if max_rows <= 0:
        raise ValueError(f"--max_rows must be positive, got {max_rows}")
    if max_rows >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng([seed, 1]).permutation(n)[:max_rows])


def random_split(n: int, test_fraction: float, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """Seeded random ``(train_rows, test_rows)``, each sorted."""
    check_fraction(test_fraction)
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(n * test_fraction))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def time_split(times: np.ndarray, test_fraction: float, what: str) -> Tuple[np.ndarray, np.ndarray]:
    """Rows at or after the ``1 - test_fraction`` time quantile are test, the rest train.

    The cut is at a timestamp, so rows sharing a timestamp never straddle the split and
    every train row is strictly earlier than every test row.
    """
    check_fraction(test_fraction)
    order = np.sort(times)
    cut = order[min(len(order) - 1, int(len(order) * (1.0 - test_fraction)))]
    test = times >= cut
    if test.all() or not test.any():
        raise ValueError(f"{what}: a time split with --test_fraction {test_fraction} leaves an empty split")
    return np.flatnonzero(~test), np.flatnonzero(test)


def age_bucket(age: np.ndarray) -> np.ndarray:
    """Bucket index (float, NaN for missing) of each age by :data:`AGE_BUCKET_EDGES`."""
    age = np.asarray(age, dtype=np.float64)
    bucket = np.digitize(age, AGE_BUCKET_EDGES).astype(np.float64)
    bucket[np.isnan(age)] = np.nan
    return bucket
