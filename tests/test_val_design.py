"""The validation designs (--val_gap, --val_unseen_share) on a planted drift whose right answer is known.

The planted world: users arrive at a constant rate and are active for a limited time,
so the further a period lies from the last train row, the more of its rows have a user
unseen in train. Labels follow the user's bias plus a feature. Two scorers stand for two
schedules: ``memorise`` (each train user's mean train label: tables trained long) and
``generalise`` (the feature alone). The validation rows sit right after the train rows
and the test rows further on, so default validation ranks ``memorise`` first while test
ranks ``generalise`` first; each design must make validation rank them as test does.
Scored through the project's path: the source, preprocessing, the batch loader's weights
and the evaluation metrics.
"""

from pathlib import Path
from typing import Dict

import numpy as np
import pandas as pd
import pytest
import torch

from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.data.dataset import InteractionData, UNKNOWN_ID
from dlrm_multiepoch.data.load import load_dataset, prepare_dataset
from dlrm_multiepoch.data.loader import BatchLoader
from dlrm_multiepoch.data.val_design import parse_unseen_share, plan_validation, serving_shares, unseen_weights
from dlrm_multiepoch.train.evaluate import BinaryMetrics

ROWS, LIFETIME, ARRIVAL = 12_000, 1_500, 20  # one row per time step; a user joins every 20 steps, stays 1,500


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    joins = np.arange(-LIFETIME, ROWS, ARRIVAL)
    bias = rng.normal(0.0, 2.0, len(joins))
    t = np.arange(ROWS)
    # Each row's user: one of the users active at its time, uniformly.
    first = np.searchsorted(joins, t - LIFETIME, side="right")
    last = np.searchsorted(joins, t, side="right")
    users = first + (rng.random(ROWS) * (last - first)).astype(np.int64)
    feature = rng.normal(0.0, 1.0, ROWS)
    label = (bias[users] + 1.2 * feature + rng.normal(0.0, 0.5, ROWS) > 0).astype(int)
    path = tmp_path_factory.mktemp("planted") / "events.csv"
    frame = pd.DataFrame({"user_id": users, "item_id": rng.integers(0, 50, ROWS), "label": label, "ts": t,
                          "feature": feature})  # fmt: skip
    frame.sample(frac=1.0, random_state=0).to_csv(path, index=False)  # file order is not time order
    return path


def config(path: Path, tmp: Path, **design: object) -> DataConfig:
    return DataConfig(dataset="interactions", data_path=str(path), timestamp_col="ts", dense_cols="feature",
                      val_fraction=0.1, cache_dir=str(tmp / "cache"), **design)  # fmt: skip


def scorer_aucs(data: InteractionData, split: str) -> Dict[str, float]:
    """Validation-style AUC of the two scorers on ``split``, through the loader's batch weights."""
    train = data.splits["train"].read(0, len(data.splits["train"]))
    users, labels = train.sparse["user"], train.labels["label"]
    memory = np.full(data.table_of("user").num_embeddings, labels.mean())
    sums, counts = np.bincount(users, labels, len(memory)), np.bincount(users, minlength=len(memory))
    memory[counts > 0] = sums[counts > 0] / counts[counts > 0]
    memory[UNKNOWN_ID] = labels.mean()  # an unseen user: the train base rate
    metrics = BinaryMetrics(["memorise", "generalise"])
    for batch in BatchLoader(data, split, 512, prefetch_batches=0):
        ids = batch.sparse_features["user"].values()
        logits = torch.stack([torch.from_numpy(memory).float()[ids], batch.dense_features[:, 0]], dim=1)
        metrics.update(logits, batch.labels["label"][:, None].expand(-1, 2), batch.weights)
    return {name: m["auc"] for name, m in metrics.compute().items()}


def ranks_generalise_first(aucs: Dict[str, float]) -> bool:
    return aucs["generalise"] > aucs["memorise"]


def test_default_validation_ranks_the_planted_schedules_against_test(planted: Path, tmp_path: Path) -> None:
    data = load_dataset(config(planted, tmp_path), log=lambda line: None)
    assert not data.row_weights
    val, test = scorer_aucs(data, "val"), scorer_aucs(data, "test")
    assert ranks_generalise_first(test) and not ranks_generalise_first(val)  # the planted failure


def test_unseen_share_weighting_ranks_as_test_and_hits_the_measured_share(planted: Path, tmp_path: Path) -> None:
    lines = []
    data = load_dataset(config(planted, tmp_path, val_unseen_share="user:measured"), log=lines.append)
    assert ranks_generalise_first(scorer_aucs(data, "val")) and ranks_generalise_first(scorer_aucs(data, "test"))
    # The share serving sees, measured by hand on the train rows: of the latest test-sized window,
    # the rows whose user is absent from the rows before a further validation-sized gap.
    frame = pd.read_csv(planted).sort_values("ts")
    n_test, n_val = len(data.splits["test"]), len(data.splits["val"])
    train_users = frame["user_id"].to_numpy()[: ROWS - n_test - n_val]
    before, window = train_users[: len(train_users) - n_test - n_val], train_users[len(train_users) - n_test :]
    expected = float(np.mean(~np.isin(window, before)))
    codes = data.splits["val"].read(0, n_val).slices
    weights = np.array([data.row_weights["val"][int(c)] for c in codes])
    assert weights[codes & 1 == 1].sum() / weights.sum() == pytest.approx(expected, abs=1e-12)
    assert weights.mean() == pytest.approx(1.0, abs=1e-12) and expected > 0.8 > float(np.mean(codes & 1))
    assert any("validation rows weighted (--val_unseen_share, measured" in line for line in lines)


def test_a_gap_before_validation_ranks_as_test(planted: Path, tmp_path: Path) -> None:
    plain = load_dataset(config(planted, tmp_path), log=lambda line: None)
    data = load_dataset(config(planted, tmp_path, val_gap=0.1), log=lambda line: None)
    assert ranks_generalise_first(scorer_aucs(data, "val")) and ranks_generalise_first(scorer_aucs(data, "test"))
    # The validation and test rows are the same; the gap's rows (a tenth of the train split) train no more.
    assert len(data.splits["val"]) == len(plain.splits["val"]) and len(data.splits["test"]) == len(plain.splits["test"])
    assert len(plain.splits["train"]) - len(data.splits["train"]) == round(0.1 * (ROWS - len(plain.splits["test"])))


def test_a_preprocessed_folder_keeps_its_design(planted: Path, tmp_path: Path) -> None:
    cfg = config(planted, tmp_path, val_unseen_share="0.9")
    folder = prepare_dataset(cfg, str(tmp_path / "prepped"), log=lambda line: None)
    lines = []
    data = load_dataset(DataConfig(dataset="interactions", data_path=str(folder)), log=lines.append)
    codes = data.splits["val"].read(0, len(data.splits["val"])).slices
    weights = np.array([data.row_weights["val"][int(c)] for c in codes])
    assert weights[codes & 1 == 1].sum() / weights.sum() == pytest.approx(0.9, abs=1e-12)
    assert any("preprocessed with --val_unseen_share '0.9'" in line for line in lines)


def test_the_cache_key_holds_a_design_only_when_set() -> None:
    plain = DataConfig(dataset="movielens").cache_options()
    assert "val_gap" not in plain and "val_unseen_share" not in plain  # no cached dataset is rebuilt for them
    assert DataConfig(dataset="movielens", val_fraction=0.1, val_gap=0.1).cache_options()["val_gap"] == 0.1
    weighted = DataConfig(dataset="movielens", val_unseen_share="measured")
    assert weighted.cache_options()["val_unseen_share"] == "measured"


def test_plan_validation_orders_train_gap_and_validation_rows_in_time() -> None:
    times = np.random.default_rng(1).permutation(1000).astype(float)
    train, val, gap = plan_validation(np.arange(1000), 0.1, 0.2, "t", times=times)
    assert (len(train), len(gap), len(val)) == (700, 200, 100)
    assert times[train].max() < times[gap].min() and times[gap].max() < times[val].min()
    with pytest.raises(ValueError, match="--val_gap needs a time split"):
        plan_validation(np.arange(1000), 0.1, 0.2, "t")


def test_weights_meet_two_shares_at_once_and_refuse_what_they_cannot_meet() -> None:
    codes = np.array([0] * 50 + [1] * 30 + [2] * 15 + [3] * 5)  # bit 0: unseen user, bit 1: unseen item
    weights = unseen_weights(codes, {"user": 0, "item": 1}, {"user": 0.9, "item": 0.05})
    w = np.array([weights[c] for c in codes])
    assert w[codes & 1 == 1].sum() / w.sum() == pytest.approx(0.9, abs=1e-9)
    assert w[codes & 2 == 2].sum() / w.sum() == pytest.approx(0.05, abs=1e-9) and w.mean() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="--val_unseen_share: no weighting .* meets the shares"):
        unseen_weights(np.array([0, 1, 3]), {"user": 0, "item": 1}, {"user": 0.0, "item": 0.5})
    with pytest.raises(ValueError, match="--val_unseen_share: 0.5 .* has no such rows"):
        unseen_weights(np.zeros(10, np.int64), {"user": 0}, {"user": 0.5})
    assert serving_shares(np.arange(6.0), {"user": np.array([1, 2, 3, 1, 4, -1])}, 2, 1, "t") == {"user": 1.0}
    with pytest.raises(ValueError, match="too few to measure"):
        serving_shares(np.arange(3.0), {"user": np.arange(3)}, 2, 1, "t")


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"val_unseen_share": "users:0.9"}, "--val_unseen_share entry 'users:0.9'"),
        ({"val_unseen_share": "1.5"}, "--val_unseen_share entry '1.5'"),
        ({"val_unseen_share": "user:0.1,user:0.2"}, "each feature once"),
        ({"val_gap": 0.1, "val_fraction": 0.0}, "--val_gap designs the validation split: set --val_fraction"),
        ({"val_unseen_share": "measured", "val_fraction": 0.0}, "--val_unseen_share designs the validation split"),
        ({"val_gap": 0.95}, r"--val_gap 0.95 \+ --val_fraction 0.1 leave no train rows"),
        ({"val_gap": -0.1}, r"--val_gap must be in \[0, 1\)"),
    ],
)
def test_bad_designs_are_refused_naming_the_flag(flags: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DataConfig(dataset="movielens", **{"val_fraction": 0.1, **flags}).validate()
    assert parse_unseen_share("measured").shares == (("user", None), ("item", None))
