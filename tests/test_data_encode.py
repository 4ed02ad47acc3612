"""Id maps, splits and dense normalisation."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dlrm_multiepoch.data.recipe as recipe_module
from dlrm_multiepoch.data.dataset import UNKNOWN_ID
from dlrm_multiepoch.data.encode import age_bucket, random_split, subsample, time_split, validation_split
from dlrm_multiepoch.data.preprocess import preprocess
from dlrm_multiepoch.data.recipe import Recipe, SplitPlan, Standardize, frame_chunk
from dlrm_multiepoch.data.store import open_dataset
from dlrm_multiepoch.data.vocab import read_vocab


def encode(train: list, test: list = (), min_count: int = 1, chunks: int = 1, tmp: Path = None) -> np.ndarray:
    """Ids of ``train + test`` values through the real preprocessing path, train fitted."""
    values = list(train) + list(test)
    frame = pd.DataFrame({"x": pd.Series(values, dtype=object)})

    def plan(load, bad):
        return SplitPlan(np.array([0] * len(train) + [1] * len(test), np.int8), ["train", "test"])

    recipe = Recipe("toy", ["x"], Standardize([]), ["y"], lambda n: {"y": np.zeros(len(n["y"]), np.float32)}, plan,
                    min_count=min_count)
    parts = np.array_split(np.arange(len(values)), chunks)
    pieces = [frame_chunk(frame.iloc[p], ["x"], {"y": np.zeros(len(p))}) for p in parts]
    out = tmp / f"toy{len(list(tmp.iterdir()))}"
    preprocess(recipe, pieces, out, log=lambda s: None)
    data, _ = open_dataset(out)
    return np.concatenate([data.splits[s].read(0, len(data.splits[s])).sparse["x"] for s in ("train", "test")])


def test_id_map_frequency_order_unknown_row_and_ties(tmp_path: Path) -> None:
    train = ["b", "a", "c", "a", "b", "a", None, "d"]
    # a x3 -> 1, b x2 -> 2, then c and d (1 each) by first appearance; None and unseen -> 0.
    for chunks in (1, 3):
        ids = encode(train, ["a", "d", "zz", None, "c"], chunks=chunks, tmp=tmp_path)
        np.testing.assert_array_equal(ids, [2, 1, 3, 1, 2, 1, UNKNOWN_ID, 4, 1, 4, UNKNOWN_ID, UNKNOWN_ID, 3])
    (vocab,) = (p for p in tmp_path.glob("toy0/vocab/*.parquet"))
    assert read_vocab(vocab).column("value").to_pylist() == ["a", "b", "c", "d"]


def test_id_map_min_count_folds_rare_ids(tmp_path: Path) -> None:
    train = [5, 5, 5, 7, 7, 9, 11]
    np.testing.assert_array_equal(encode(train, min_count=2, tmp=tmp_path), [1, 1, 1, 2, 2, 0, 0])


def test_id_map_keeps_string_ids_distinct(tmp_path: Path) -> None:
    # ISBN-like strings must not collapse ("0123" vs "123").
    np.testing.assert_array_equal(encode(["0123", "123", "0123"], ["123", "0123"], tmp=tmp_path), [1, 2, 1, 2, 1])


def test_float_ids_nan_is_missing_and_signed_zero_is_one_id(tmp_path: Path) -> None:
    np.testing.assert_array_equal(encode([1.5, float("nan"), 0.0, -0.0, 1.5], tmp=tmp_path), [1, 0, 2, 2, 1])


def test_random_split_partitions_rows_and_is_seeded() -> None:
    train, test = random_split(1001, 0.2, seed=3)
    assert len(test) == 200 and len(train) == 801
    np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(1001))
    again = random_split(1001, 0.2, seed=3)
    np.testing.assert_array_equal(again[1], test)
    assert not np.array_equal(random_split(1001, 0.2, seed=4)[1], test)


def test_time_split_is_strict_at_ties() -> None:
    times = np.array([5, 1, 3, 3, 3, 9, 7, 3, 2, 8], dtype=np.float64)
    train, test = time_split(times, 0.5, "t")
    assert times[train].max() < times[test].min()
    np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(10))
    # The cut is the time of sorted row 5 (time 3); every row at time 3 goes to test.
    np.testing.assert_array_equal(test, [0, 2, 3, 4, 5, 6, 7, 9])


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1])
def test_bad_test_fraction_names_flag(fraction: float) -> None:
    with pytest.raises(ValueError, match="--test_fraction"):
        random_split(10, fraction, 0)


def test_validation_split_random_is_seeded_and_apart_from_the_test_draw() -> None:
    train, test = random_split(1000, 0.2, seed=3)
    rest, val = validation_split(train, 0.25, "t", seed=3)
    assert len(val) == 200 and len(rest) == 600
    np.testing.assert_array_equal(np.sort(np.concatenate([rest, val])), train)
    np.testing.assert_array_equal(validation_split(train, 0.25, "t", seed=3)[1], val)
    # Not the test draw's permutation reused on the train rows.
    assert not np.array_equal(val, train[random_split(len(train), 0.25, 3)[1]])
    same, none = validation_split(train, 0.0, "t")
    np.testing.assert_array_equal(same, train) and len(none) == 0


def test_validation_split_by_time_holds_out_the_latest_train_rows() -> None:
    times = np.array([5, 1, 3, 3, 3, 9, 7, 3, 2, 8, 4, 6], dtype=np.float64)
    train, test = time_split(times, 0.25, "t")  # test: times 8, 9 and 7
    rest, val = validation_split(train, 0.3, "t", times=times)
    assert times[rest].max() < times[val].min() and times[val].max() < times[test].min()
    np.testing.assert_array_equal(np.sort(np.concatenate([rest, val])), train)
    np.testing.assert_array_equal(val, [0, 10, 11])  # times 5, 4, 6: the cut is at time 4
    with pytest.raises(ValueError, match="--val_fraction 1.0 must|--val_fraction must be in"):
        validation_split(train, 1.0, "t", times=times)
    with pytest.raises(ValueError, match="--val_fraction 0.01 of 9 train rows leaves an empty validation split"):
        validation_split(train, 0.01, "t")


def test_time_split_single_timestamp_raises() -> None:
    with pytest.raises(ValueError, match="empty split"):
        time_split(np.ones(10), 0.2, "movielens")


def test_subsample_keeps_order_and_count() -> None:
    rows = subsample(100, 30, seed=1)
    assert len(rows) == 30 and (np.diff(rows) > 0).all()
    np.testing.assert_array_equal(subsample(10, 30, seed=1), np.arange(10))
    with pytest.raises(ValueError, match="--max_rows"):
        subsample(10, 0, seed=1)


def test_standardize_uses_train_stats_only() -> None:
    values = np.array([1.0, 3.0, np.nan, 100.0])
    codes = np.array([0, 0, 0, 1], np.int8)  # the last row is not train
    transform = Standardize(["v"])
    transform.fit(lambda: iter([({"v": values}, codes)]), train=0)
    dense = transform.apply({"v": values}, 4)
    np.testing.assert_array_equal(dense[:, 1], [0, 0, 1, 0])
    np.testing.assert_allclose(dense[:, 0], [-1.0, 1.0, 0.0, 98.0], rtol=0, atol=1e-6)
    assert dense.dtype == np.float32 and transform.names == ["v", "v_missing"]


def test_standardize_equals_numpy_bitwise_and_ignores_blocking(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    values = rng.lognormal(3, 2, 5000)
    values[rng.random(5000) < 0.1] = np.nan
    codes = (rng.random(5000) < 0.2).astype(np.int8)  # 0 = train
    train = values[codes == 0]
    train = train[~np.isnan(train)]
    stats = []
    for block in (1 << 22, 999):  # one block: numpy's own pairwise sums; many: exactly combined
        monkeypatch.setattr(recipe_module, "STAT_BLOCK", block)
        transform = Standardize(["v"])
        transform.fit(lambda: iter([({"v": values[i : i + 700]}, codes[i : i + 700]) for i in range(0, 5000, 700)]), 0)
        stats.append(transform.stats["v"])
    assert stats[0] == (float(train.mean()), float(train.std()))
    assert stats[1][0] == pytest.approx(stats[0][0], rel=1e-15) and stats[1][1] == pytest.approx(stats[0][1], rel=1e-15)


def test_age_bucket_edges() -> None:
    b = age_bucket(np.array([1, 17, 18, 24, 25, 55, 56, 90, np.nan]))
    np.testing.assert_array_equal(b[:-1], [0, 0, 1, 1, 2, 5, 6, 6])
    assert np.isnan(b[-1])


def test_count_based_cuts_equal_validation_split() -> None:
    from dlrm_multiepoch.data.encode import last_share, nth_true

    rng = np.random.default_rng(0)
    for n in (7, 10, 101, 5000):
        for fraction in (0.0, 0.1, 0.25, 0.5):
            rows = np.arange(n)
            try:
                _, val = validation_split(rows, fraction, "x", times=rows)
            except ValueError as e:
                with pytest.raises(ValueError, match=str(e).split(":")[1].strip()[:20]):
                    last_share(n, fraction, "x")
                continue
            assert last_share(n, fraction, "x") == len(val)
        mask = rng.random(n) < 0.7
        for k in (0, 1, int(mask.sum()) - 1, int(mask.sum())):
            want = np.flatnonzero(mask)[k] if k < mask.sum() else n
            assert nth_true(mask, k, block=3) == want
