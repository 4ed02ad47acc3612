"""Split rows (random, by time; the validation split out of train), subsample them, and
bucket ages (numpy only).

Id maps and dense statistics are fitted on the train split only, without the validation
rows (:mod:`~dlrm_multiepoch.data.vocab`, :mod:`~dlrm_multiepoch.data.preprocess`), so
nothing about the test or validation split leaks into them.
"""

from typing import Optional, Sequence, Tuple, Union

import numpy as np

# Age buckets of MovieLens-1M (under 18, 18-24, 25-34, 35-44, 45-49, 50-55, 56+).
AGE_BUCKET_EDGES = (18, 25, 35, 45, 50, 56)


def check_fraction(fraction: float, flag: str = "--test_fraction") -> None:
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"{flag} must be in (0, 1), got {fraction}")


def subsample(n: int, max_rows: int, seed: int) -> np.ndarray:
    """Sorted indices of ``max_rows`` of ``n`` rows, drawn by a seeded shuffle (the
    original row order, hence time order, is kept)."""
    if max_rows <= 0:
        raise ValueError(f"--max_rows must be positive, got {max_rows}")
    if max_rows >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng([seed, 1]).permutation(n)[:max_rows])


def random_split(
    n: int, test_fraction: float, seed: Union[int, Sequence[int]], flag: str = "--test_fraction"
) -> Tuple[np.ndarray, np.ndarray]:
    """Seeded random ``(train_rows, test_rows)``, each sorted."""
    check_fraction(test_fraction, flag)
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(n * test_fraction))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def time_split(
    times: np.ndarray, test_fraction: float, what: str, flag: str = "--test_fraction"
) -> Tuple[np.ndarray, np.ndarray]:
    """Rows at or after the ``1 - test_fraction`` time quantile are test, the rest train.

    The cut is at a timestamp, so rows sharing a timestamp never straddle the split and
    every train row is strictly earlier than every test row.
    """
    check_fraction(test_fraction, flag)
    order = np.sort(times)
    cut = order[min(len(order) - 1, int(len(order) * (1.0 - test_fraction)))]
    test = times >= cut
    if test.all() or not test.any():
        raise ValueError(f"{what}: a time split with {flag} {test_fraction} leaves an empty split")
    return np.flatnonzero(~test), np.flatnonzero(test)


def validation_split(
    train_rows: np.ndarray, val_fraction: float, what: str, times: Optional[np.ndarray] = None, seed: int = 0
) -> Tuple[np.ndarray, np.ndarray]:
    """Carve the validation split out of the train split: ``(train_rows, val_rows)``, sorted.

    Called before ids and dense statistics are fitted, so they are fitted on the rows
    left for training and the validation rows look to the model like unseen test rows
    (new ids fall into the unknown row as they do on the test split). With ``times``
    the validation rows are the latest ``val_fraction`` of the train rows (every
    remaining train row is strictly earlier); without, a seeded random share.

    Args:
        train_rows: row indices of the train split.
        val_fraction: share of the train rows to hold out; 0 holds out nothing.
        what: the dataset, for error messages.
        times: timestamps of *all* rows (indexed by ``train_rows``), or None.
        seed: seed of the random carve (``--split_seed``; drawn apart from the test split's).

    Example::

        train, test = random_split(n, 0.2, seed=0)
        train, val = validation_split(train, 0.1, "bookcrossing", seed=0)
    """
    train_rows = np.asarray(train_rows)
    if val_fraction == 0:
        return train_rows, train_rows[:0]
    if times is not None:
        keep, held = time_split(np.asarray(times)[train_rows], val_fraction, what, flag="--val_fraction")
    else:
        keep, held = random_split(len(train_rows), val_fraction, [seed, 2], flag="--val_fraction")
    if len(keep) == 0 or len(held) == 0:
        raise ValueError(
            f"{what}: --val_fraction {val_fraction} of {len(train_rows)} train rows leaves an empty "
            f"{'validation' if len(held) == 0 else 'train'} split"
        )
    return train_rows[keep], train_rows[held]


def last_share(n: int, val_fraction: float, what: str) -> int:
    """How many of ``n`` time-ordered train rows :func:`validation_split` holds out (its
    latest ones, when every row has its own time), without the row arrays."""
    if val_fraction == 0:
        return 0
    check_fraction(val_fraction, "--val_fraction")
    held = n - int(n * (1.0 - val_fraction))
    if held == 0 or held == n:
        raise ValueError(
            f"{what}: --val_fraction {val_fraction} of {n} train rows leaves an empty "
            f"{'validation' if held == 0 else 'train'} split"
        )
    return held


def gap_share(n: int, n_val: int, val_gap: float, what: str) -> int:
    """How many of ``n`` time-ordered train rows the ``--val_gap`` leaves out, just before the
    ``n_val`` validation rows (a share of the ``n`` rows)."""
    n_gap = int(round(n * val_gap))
    if n_gap and n - n_val - n_gap <= 0:
        raise ValueError(f"{what}: --val_gap {val_gap} with {n_val} validation rows of {n} leaves no train rows")
    return n_gap


def nth_true(mask: np.ndarray, k: int, block: int = 1 << 22) -> int:
    """Index of the ``k``-th (0-based) True of ``mask``, or ``len(mask)`` if it has at most
    ``k``; scans in blocks, so no index array of the whole mask is made."""
    seen = 0
    for lo in range(0, len(mask), block):
        part = mask[lo : lo + block]
        count = int(np.count_nonzero(part))
        if seen + count > k:
            return lo + int(np.flatnonzero(part)[k - seen])
        seen += count
    return len(mask)


def age_bucket(age: np.ndarray) -> np.ndarray:
    """Bucket index (float, NaN for missing) of each age by :data:`AGE_BUCKET_EDGES`."""
    age = np.asarray(age, dtype=np.float64)
    bucket = np.digitize(age, AGE_BUCKET_EDGES).astype(np.float64)
    bucket[np.isnan(age)] = np.nan
    return bucket
