"""Validation designs: which train-period rows validate, and what each validation row weighs.

The validation split is the latest ``--val_fraction`` of the train rows on a time split
(a seeded random share otherwise), fitted into nothing (:func:`~dlrm_multiepoch.data.encode.validation_split`).
Serving differs from it in two ways a user can reproduce (numpy only; chosen in the data
section, so the sweep, ``compare``, ``auto`` and the search use them unchanged):

- **a gap** (``--val_gap G``): the latest ``G`` share of the train rows before the
  validation rows neither train nor validate, as a deployed model first serves some
  time after its last training row (time splits only);
- **the share of unseen users and items** (``--val_unseen_share``): validation rows
  are weighted so that those whose user (item) never occurs in the train split carry a
  stated share of the weight, or the share ``measured`` on the train period the way
  serving sees it: of a window as long as the test split, after a gap as long as the
  one between the train rows and the test split (validation and ``--val_gap``), the
  rows whose user (item) does not occur before that gap. On a random split, serving is
  distributed as validation is: ``measured`` weighs every row 1.

Example::

    shares = parse_unseen_share("user:0.9,item:0.05", "--val_unseen_share")
    weights = unseen_weights(val_slice_codes, {"user": 0, "item": 1}, {"user": 0.9, "item": 0.05})
"""

import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from dlrm_multiepoch.config_section import split_list
from dlrm_multiepoch.data.encode import time_split, validation_split

FLAG = "--val_unseen_share"
MEASURED = "measured"
FEATURES = ("user", "item")
_IPF_STEPS = 200  # iterative proportional fitting of the two shares; converges in a few


@dataclass(frozen=True)
class UnseenShares:
    """What ``--val_unseen_share`` asks for.

    Args:
        shares: feature (``user``, ``item``) -> share of the validation weight on rows
            whose id is unseen in train, or None: measured on the train period
            (serving's geometry). Features not named keep their share.
    """

    shares: Tuple[Tuple[str, Optional[float]], ...] = ()


def parse_unseen_share(value: str, flag: str = FLAG) -> UnseenShares:
    """``''`` -> no shares (every row weighs 1); ``measured`` (users and items); ``0.9`` (users);
    ``user:0.9,item:0.05``; ``user:measured``."""
    text = value.strip()
    if not text:
        return UnseenShares()
    if text == MEASURED:
        return UnseenShares(tuple((f, None) for f in FEATURES))
    shares: Dict[str, Optional[float]] = {}
    for part in split_list(text):
        name, sep, number = (x.strip() for x in part.rpartition(":"))
        name = name if sep else "user"
        try:
            share: Optional[float] = None if number == MEASURED else float(number)
        except ValueError:
            share = math.nan
        if name not in FEATURES or name in shares or (share is not None and not 0.0 <= share <= 1.0):
            raise ValueError(
                f"{flag} entry {part!r}: expected '{MEASURED}', a share in [0, 1] of unseen users, or "
                f"'user:S,item:S' (S a share or '{MEASURED}'; each feature once), got {value!r}"
            )
        shares[name] = share
    return UnseenShares(tuple(shares.items()))


def check_design(val_fraction: float, val_gap: float, weighting: Optional[UnseenShares]) -> None:
    """Raise naming the flag when the design's flags do not fit together."""
    if not (math.isfinite(val_gap) and 0.0 <= val_gap < 1.0):
        raise ValueError(f"--val_gap must be in [0, 1), got {val_gap}")
    if (val_gap or (weighting is not None and weighting.shares)) and val_fraction == 0:
        flag = "--val_gap" if val_gap else FLAG
        raise ValueError(f"{flag} designs the validation split: set --val_fraction too (e.g. 0.1)")
    if val_gap + val_fraction >= 1.0:
        raise ValueError(
            f"--val_gap {val_gap} + --val_fraction {val_fraction} leave no train rows (their sum must be below 1)"
        )


def plan_validation(
    train_rows: np.ndarray,
    val_fraction: float,
    val_gap: float,
    what: str,
    times: Optional[np.ndarray] = None,
    seed: int = 0,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(train, val, gap)`` row indices, sorted: the validation rows out of the train split
    (:func:`~dlrm_multiepoch.data.encode.validation_split`), then the gap: the latest
    ``val_gap`` share of the train split's rows among those left, which neither train nor
    validate (so every train row is earlier than every gap row, every gap row than every
    validation row).

    Example::

        train, val, gap = plan_validation(train, 0.1, 0.1, "movielens", times=times)
    """
    train, val = validation_split(train_rows, val_fraction, what, times=times, seed=seed)
    if not val_gap:
        return train, val, train[:0]
    if times is None:
        raise ValueError(f"{what}: --val_gap needs a time split (timestamps); this split is random")
    share = min(val_gap * len(train_rows) / len(train), 1.0)  # of the rows left, the gap's share
    keep, gap = time_split(np.asarray(times)[train], share, what, "--val_gap")
    return train[keep], val, train[gap]


def unseen_weights(
    codes: np.ndarray, bits: Dict[str, int], targets: Dict[str, float], flag: str = FLAG
) -> Dict[int, float]:
    """Weight per slice code so that rows with bit ``bits[f]`` set carry ``targets[f]`` of the
    total weight, for every ``f`` at once (iterative proportional fitting), as close to
    equal weights as that allows; weights average 1 over ``codes``.

    Args:
        codes: the validation rows' slice codes.
        bits: feature -> its ``unseen_<feature>`` bit.
        targets: feature -> share of the weight on its unseen rows.
    """
    values, counts = np.unique(np.asarray(codes, dtype=np.int64), return_counts=True)
    weights = np.ones(len(values))
    for f, share in targets.items():
        has = (values >> bits[f]) & 1 == 1
        if (share > 0 and not counts[has].any()) or (share < 1 and not counts[~has].any()):
            held = "no" if not counts[has].any() else "only"
            raise ValueError(
                f"{flag}: {share:g} of the validation weight on rows of an unseen {f}, but the validation split has "
                f"{held} such rows; state another share"
            )
    for _ in range(_IPF_STEPS):
        for f, share in targets.items():
            has = (values >> bits[f]) & 1 == 1
            mass = counts * weights
            now = mass[has].sum() / mass.sum()
            weights[has] *= share / now if now > 0 else 0.0
            weights[~has] *= (1 - share) / (1 - now) if now < 1 else 0.0
    mass = counts * weights
    got = {f: mass[(values >> bits[f]) & 1 == 1].sum() / mass.sum() for f in targets}
    if any(abs(got[f] - share) > 1e-6 for f, share in targets.items()):  # e.g. unseen items only with unseen users
        raise ValueError(
            f"{flag}: no weighting of the validation rows meets the shares {targets} together; state others"
        )
    weights *= counts.sum() / mass.sum()
    return {int(v): float(w) for v, w in zip(values, weights)}


def unseen_codes(
    raw: Dict[str, np.ndarray], known: Dict[str, np.ndarray], bits: Dict[str, int], rows: int, dtype=np.int64
) -> np.ndarray:
    """Slice codes of ``rows`` rows: bit ``bits[f]`` set where feature ``f``'s raw id code is
    missing (-1) or not ``known[f]`` (never in the train split).

    Example::

        codes = unseen_codes({"user": raw_users}, in_train, {"user": 0}, len(raw_users), np.uint8)
    """
    codes = np.zeros(rows, dtype)
    for f, bit in bits.items():
        g, seen = raw[f], known[f]
        unseen = (g < 0) | (~seen[np.maximum(g, 0)] if len(seen) else True)
        codes |= unseen.astype(dtype) << bit
    return codes


def serving_shares(
    times: np.ndarray, ids: Dict[str, np.ndarray], window: int, gap: int, what: str
) -> Dict[str, float]:
    """Per feature, the share of rows of the latest ``window`` train rows (in time order) whose
    id (-1: missing) does not occur in the train rows before a further ``gap`` rows: what
    serving sees, ``window`` rows starting ``gap`` rows after the last train row.

    Args:
        times: the train rows' times.
        ids: feature -> the train rows' raw ids.
        window: rows of the served period (the test split).
        gap: rows between the train rows and it (validation and ``--val_gap``).
    """
    order = np.argsort(times, kind="stable")
    before = len(order) - window - gap
    if before <= 0:
        raise ValueError(
            f"{FLAG} {MEASURED}: {what} has {len(order)} train rows, too few to measure a {window}-row period "
            f"{gap} rows after earlier rows; state the share (e.g. {FLAG} 0.8)"
        )
    shares = {}
    for f, values in ids.items():
        seen = np.unique(values[order[:before]])
        served = values[order[len(order) - window :]]
        shares[f] = float(np.mean((served < 0) | ~np.isin(served, seen[seen >= 0])))
    return shares


def val_row_weights(
    weighting: Optional[UnseenShares],
    split_codes: np.ndarray,
    names: Sequence[str],
    ids: Callable[[str], np.ndarray],
    in_train: Dict[str, np.ndarray],
    slices: List[str],
    times: Optional[np.ndarray],
    gap_rows: int,
    what: str,
    notes: List[str],
) -> Dict[str, Dict[str, float]]:
    """``meta.json``'s ``row_weights`` (split -> slice code -> weight; empty: every row weighs 1).

    Args:
        weighting: the parsed ``--val_unseen_share``.
        split_codes: every scanned row's split code (index into ``names``, -1 not kept).
        names: the split names.
        ids: feature -> every scanned row's raw id code (-1 missing).
        in_train: feature -> which raw id codes occur in the train split.
        slices: the dataset's slice names (``unseen_user``, ``unseen_item``): the code bits.
        times: every scanned row's time (None: a random split).
        gap_rows: rows of the ``--val_gap``.
        what: the dataset, for messages.
        notes: the dataset's log lines; one is added.
    """
    if weighting is None or not weighting.shares:
        return {}
    features = [f for f in FEATURES if f"unseen_{f}" in slices]
    if not features:
        raise ValueError(f"{FLAG}: {what} has no user or item ids to tell unseen rows by")
    bits = {f: slices.index(f"unseen_{f}") for f in features}
    val, train = split_codes == names.index("val"), split_codes == names.index("train")
    asked = {f: s for f, s in weighting.shares if f in features or s is not None}
    unknown = set(asked) - set(features)
    if unknown:
        raise ValueError(f"{FLAG}: {what} has no {sorted(unknown)} ids to tell unseen rows by")
    measure = [f for f, s in asked.items() if s is None]
    raw, train_ids = {}, {}
    for f in features:
        column = ids(f)  # a whole scratch column: read once, for the validation and the train rows
        raw[f] = column[val]
        if f in measure and times is not None:
            train_ids[f] = column[train]
        del column  # before the next read: one whole column in memory at a time
    codes = unseen_codes(raw, in_train, bits, int(val.sum()))
    now = {f: float(np.mean((codes >> bits[f]) & 1)) for f in features}
    targets, how = {f: s for f, s in asked.items() if s is not None}, "stated"
    if measure and times is None:
        targets.update({f: now[f] for f in measure})
        how = "measured: a random split serves rows distributed as validation's"
    elif measure:
        window, gap = int((split_codes == names.index("test")).sum()), int(val.sum()) + gap_rows
        targets.update(serving_shares(times[train], {f: train_ids[f] for f in measure}, window, gap, what))
        how = f"measured on the train period: its latest {window} rows against the rows before a further {gap}"
    weights = unseen_weights(codes, bits, targets)
    shares = ", ".join(f"unseen {f}s {now[f]:.1%} of the rows -> {targets[f]:.1%} of the weight" for f in targets)
    notes.append(f"{what}: validation rows weighted ({FLAG}, {how}): {shares}")
    return {"val": {str(code): w for code, w in weights.items()}}
