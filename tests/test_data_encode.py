"""Id maps, splits and dense normalisation."""

import numpy as np
import pandas as pd
import pytest

from dlrm_multiepoch.data.dataset import UNKNOWN_ID
from dlrm_multiepoch.data.encode import (
    IdMap,
    age_bucket,
    random_split,
    standardize,
    subsample,
    time_split,
    validation_split,
)


def test_id_map_frequency_order_unknown_row_and_ties() -> None:
    train = pd.Series(["b", "a", "c", "a", "b", "a", None, "d"])
    m = IdMap.fit(train)
    # a x3 -> 1, b x2 -> 2, then c and d (1 each) by first appearance.
    assert list(m.values) == ["a", "b", "c", "d"]
    assert m.num_embeddings == 5
    ids = m.transform(pd.Series(["a", "d", "zz", None, "c"]))
    np.testing.assert_array_equal(ids, [1, 4, UNKNOWN_ID, UNKNOWN_ID, 3])
    assert ids.dtype == np.int64


def test_id_map_min_count_folds_rare_ids() -> None:
    train = pd.Series([5, 5, 5, 7, 7, 9, 11])
    m = IdMap.fit(train, min_count=2)
    np.testing.assert_array_equal(m.transform(train), [1, 1, 1, 2, 2, 0, 0])
    assert m.num_embeddings == 3  # max id + 1


def test_id_map_keeps_string_ids_distinct_from_numbers() -> None:
    # ISBN-like strings must not collapse ("0123" vs "123").
    m = IdMap.fit(pd.Series(["0123", "123", "0123"]))
    np.testing.assert_array_equal(m.transform(pd.Series(["123", "0123", 123])), [2, 1, UNKNOWN_ID])


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
    z, missing = standardize(values, train_rows=np.array([0, 1, 2]))
    np.testing.assert_array_equal(missing, [0, 0, 1, 0])
    np.testing.assert_allclose(z, [-1.0, 1.0, 0.0, 98.0], rtol=0, atol=1e-6)
    assert z.dtype == np.float32


def test_age_bucket_edges() -> None:
    b = age_bucket(np.array([1, 17, 18, 24, 25, 55, 56, 90, np.nan]))
    np.testing.assert_array_equal(b[:-1], [0, 0, 1, 1, 2, 5, 6, 6])
    assert np.isnan(b[-1])
