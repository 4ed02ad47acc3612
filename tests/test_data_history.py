"""build_history against a per-row brute-force reference, plus its invariants."""

from typing import Optional

import numpy as np
import pytest

from dlrm_multiepoch.data.dataset import HISTORY_PAD
from dlrm_multiepoch.data.history import build_history


def reference_history(user, item_key, item_id, train_rows, k, times: Optional[np.ndarray], seed: int) -> np.ndarray:
    """One row at a time: the user's train items strictly earlier (or all, in seeded
    order), most recent first, skipping the target item, first k."""
    n = len(user)
    order = np.random.default_rng([seed, 2]).permutation(n) if times is None else times
    out = np.full((n, k), HISTORY_PAD, dtype=np.int64)
    train = set(train_rows.tolist())
    for i in range(n):
        rows = [r for r in range(n) if r in train and user[r] == user[i]]
        if times is not None:
            rows = [r for r in rows if times[r] < times[i]]
        rows.sort(key=lambda r: (order[r], r), reverse=True)
        items = [item_id[r] for r in rows if item_key[r] != item_key[i]][:k]
        out[i, : len(items)] = items
    return out


def random_interactions(n: int, users: int, items: int, seed: int):
    rng = np.random.default_rng(seed)
    user = rng.integers(0, users, n)
    item_key = rng.integers(0, items, n)
    item_id = item_key * 7 + 3  # any encoding, distinct from the key
    times = rng.integers(0, n // 3, n).astype(np.float64)  # many ties
    train_rows = np.sort(rng.choice(n, size=int(0.7 * n), replace=False))
    return user, item_key, item_id, times, train_rows


@pytest.mark.parametrize("timed", [True, False])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_matches_reference(timed: bool, k: int) -> None:
    user, item_key, item_id, times, train_rows = random_interactions(400, 12, 25, seed=k)
    t = times if timed else None
    got = build_history(user, item_key, item_id, train_rows, k, times=t, seed=5)
    np.testing.assert_array_equal(got, reference_history(user, item_key, item_id, train_rows, k, t, seed=5))


def test_never_target_and_strictly_earlier() -> None:
    user, item_key, item_id, times, train_rows = random_interactions(3000, 40, 60, seed=1)
    hist = build_history(user, item_key, item_id, train_rows, 6, times=times)
    earliest = {}  # (user, item id) -> earliest train time
    for r in train_rows:
        key = (user[r], item_id[r])
        earliest[key] = min(earliest.get(key, np.inf), times[r])
    checked = 0
    for i in range(len(user)):
        for h in hist[i][hist[i] != HISTORY_PAD]:
            assert h != item_id[i]
            assert earliest[(user[i], h)] < times[i]
            checked += 1
    assert checked > 1000
    # Padding only at the end of a row.
    pad = hist == HISTORY_PAD
    assert not (pad[:, :-1] & ~pad[:, 1:]).any()


def test_widens_window_past_repeated_target() -> None:
    # One user; the target item repeats in the 5 most recent train rows, so a window of
    # k + 1 = 3 finds nothing and must widen to reach the older items.
    user = np.zeros(9, dtype=np.int64)
    item_key = np.array([10, 11, 12, 13, 7, 7, 7, 7, 7])
    times = np.arange(9, dtype=np.float64)
    train_rows = np.arange(8)  # row 8 (item 7, latest) is a test row
    hist = build_history(user, item_key, item_key, train_rows, 2, times=times)
    np.testing.assert_array_equal(hist[8], [13, 12])
    np.testing.assert_array_equal(hist[4], [13, 12])
    np.testing.assert_array_equal(hist[0], [HISTORY_PAD, HISTORY_PAD])


def test_no_train_rows_gives_all_padding() -> None:
    hist = build_history(np.zeros(4, np.int64), np.arange(4), np.arange(4), np.array([], np.int64), 3)
    assert (hist == HISTORY_PAD).all() and hist.shape == (4, 3)
