"""Per-user item histories built from the train split.

Each row gets the user's last ``K`` train items, most recent first, padded with
:data:`~dlrm_multiepoch.data.dataset.HISTORY_PAD`. The target item itself never
appears: with timestamps only strictly earlier train items qualify; without them the
user's other train items in a fixed seeded order stand in for time.
"""

from typing import Iterator, Optional, Tuple

import numpy as np

from dlrm_multiepoch.data.dataset import HISTORY_PAD

_CHUNK = 65536  # rows per vectorised block: bounds memory to ~CHUNK * window ids


def build_history(
    user: np.ndarray,
    item_key: np.ndarray,
    item_id: np.ndarray,
    train_rows: np.ndarray,
    length: int,
    times: Optional[np.ndarray] = None,
    seed: int = 0,
) -> np.ndarray:
    """History ``int64 [N, length]`` for every one of the ``N`` rows.

    Args:
        user: ``[N]`` integer user keys (raw identity: unknown users stay distinct).
        item_key: ``[N]`` integer raw item keys; history excludes items equal to the target's.
        item_id: ``[N]`` encoded item ids; what the history holds.
        train_rows: rows whose items may enter histories.
        length: ``K``, the history length.
        times: ``[N]`` timestamps; a row sees only train items strictly earlier. ``None``:
            a row sees all the user's other train items, ordered by a seeded shuffle.
        seed: seed of that shuffle.

    Example::

        hist = build_history(user_codes, item_codes, item_ids, train_rows, 20, times=ts)
    """
    out = np.full((len(user), length), HISTORY_PAD, dtype=np.int64)
    for lo, block in history_blocks(user, item_key, item_id, train_rows, length, times, seed):
        out[lo : lo + len(block)] = block
    return out


def history_blocks(
    user: np.ndarray,
    item_key: np.ndarray,
    item_id: np.ndarray,
    train_rows: np.ndarray,
    length: int,
    times: Optional[np.ndarray] = None,
    seed: int = 0,
) -> Iterator[Tuple[int, np.ndarray]]:
    """:func:`build_history` block by block: ``(first_row, history of the next rows)``, in
    row order, so a caller can write histories out without holding them all."""
    n = len(user)
    if len(train_rows) == 0:
        for lo in range(0, n, _CHUNK):
            yield lo, np.full((min(n, lo + _CHUNK) - lo, length), HISTORY_PAD, dtype=np.int64)
        return
    if times is None:
        order_key = np.random.default_rng([seed, 2]).permutation(n)
    else:
        # Dense ranks make (user, time) one sortable int64.
        order_key = np.searchsorted(np.unique(times), times)
    span = np.int64(order_key.max()) + 1
    composite = user.astype(np.int64) * span + order_key
    del order_key
    sorted_rows = train_rows[np.argsort(composite[train_rows], kind="stable")]
    s_user = user[sorted_rows]
    s_key = item_key[sorted_rows]
    s_id = item_id[sorted_rows]
    s_comp = composite[sorted_rows]

    start = np.searchsorted(s_user, user, side="left")
    if times is None:
        end = np.searchsorted(s_user, user, side="right")
    else:
        end = np.searchsorted(s_comp, composite, side="left")  # strictly earlier only

    for lo in range(0, n, _CHUNK):
        out = np.full((min(n, lo + _CHUNK) - lo, length), HISTORY_PAD, dtype=np.int64)
        rows = np.arange(lo, lo + len(out))
        window = length + 1
        while rows.size:
            hist, short = _gather(rows, start, end, item_key, s_key, s_id, length, window)
            out[rows - lo] = hist
            # Rows that lost items to the target filter and have older items left: widen.
            rows = rows[short]
            window *= 2
        yield lo, out


def _gather(
    rows: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    item_key: np.ndarray,
    s_key: np.ndarray,
    s_id: np.ndarray,
    length: int,
    window: int,
) -> Tuple[np.ndarray, np.ndarray]:
    """The last ``length`` non-target items among the ``window`` train items before
    ``end`` of each row, and which rows came up short with older items left."""
    offsets = end[rows, None] - 1 - np.arange(window)[None, :]  # most recent first
    valid = offsets >= start[rows, None]
    safe = np.where(valid, offsets, 0)
    keep = valid & (s_key[safe] != item_key[rows, None])
    # Stable sort moves kept entries to the front without reordering them.
    pos = np.argsort(~keep, axis=1, kind="stable")[:, :length]
    kept = np.take_along_axis(keep, pos, axis=1)
    hist = np.where(kept, np.take_along_axis(s_id[safe], pos, axis=1), HISTORY_PAD)
    short = (kept.sum(axis=1) < length) & (end[rows] - window > start[rows])
    return hist, short
