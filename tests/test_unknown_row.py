"""The unknown row: per-table folding (--min_count), the fold report, id maps from
train+pretrain, id dropout, and the seen/unseen-id slices evaluation reports."""

import numpy as np
import pandas as pd
import pytest
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_multiepoch.data.assemble import assemble
from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.dataset import UNKNOWN_ID, TableSpec
from dlrm_multiepoch.data.id_dropout import IdDropout
from dlrm_multiepoch.models.dlrm import ModelOutput
from dlrm_multiepoch.table_values import TableValues
from dlrm_multiepoch.train.evaluate import binary_metrics, gather_outputs, merged_task_metrics, slice_metrics


def _frame():
    # user a x3, b x2, c x1 in train; d only in test; e only in pretrain; item x/y.
    frame = pd.DataFrame(
        {
            "user": ["a", "a", "a", "b", "b", "c", "a", "d", "c", "e", "e"],
            "item": ["x", "y", "x", "x", "y", "y", "x", "x", "z", "x", "y"],
        }
    )
    splits = {"train": np.arange(6), "test": np.array([6, 7, 8]), "pretrain": np.array([9, 10])}
    labels = {"like": np.array([1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1], dtype=np.float32)}
    return frame, splits, labels


def _assemble(**kwargs):
    frame, splits, labels = _frame()
    notes = []
    data = assemble("toy", frame, splits, ["user", "item"], np.zeros((len(frame), 0), np.float32), [], labels, notes=notes, **kwargs)
    return data, notes


def test_per_table_min_count_folds_and_reports():
    data, notes = _assemble(min_count="1,t_user=3")
    users = data.splits["train"].sparse["user"]
    # Only "a" (3 train rows) keeps a row in t_user; b and c fold into row 0. Items keep theirs.
    assert users.tolist() == [1, 1, 1, 0, 0, 0]
    assert data.tables[0].num_embeddings == 2 and data.tables[1].num_embeddings == 3
    report = data.encoding["t_user"]
    assert (report["min_count"], report["fit_ids"], report["folded_ids"], report["folded_fit_rows"]) == (3, 3, 2, 3)
    assert report["train_unknown_row_share"] == 0.5 and report["test_unknown_row_share"] == pytest.approx(2 / 3)
    assert any(n.startswith("table t_user: min_count 3 folds 2 of 3 ids") for n in notes), notes
    with pytest.raises(ValueError, match="--min_count: unknown table"):
        _assemble(min_count="t_usr=2")
    with pytest.raises(ValueError, match="--min_count"):
        _assemble(min_count="0")


def test_unseen_slices_and_id_maps_from_pretrain():
    data, _ = _assemble()
    test = data.splits["test"]
    # Test rows: (a, x) seen; (d, x) unseen user; (c, z) unseen item.
    assert test.slices["unseen_user"].tolist() == [False, True, False]
    assert test.slices["unseen_item"].tolist() == [False, False, True]
    assert test.slices["seen_user_item"].tolist() == [True, False, False]
    assert data.splits["pretrain"].sparse["user"].tolist() == [UNKNOWN_ID, UNKNOWN_ID]
    fitted, _ = _assemble(id_fit_splits=("train", "pretrain"))
    # "e", seen only in pre-training data, now has its own row; slices still mean "not in train".
    assert fitted.splits["pretrain"].sparse["user"].tolist() == [3, 3]  # a 3x, b 2x, e 2x, c 1x
    assert fitted.splits["test"].slices["unseen_user"].tolist() == [False, True, False]
    with pytest.raises(ValueError, match="--id_maps"):
        _assemble(id_fit_splits=("train", "validation"))


def _batch(values, keys=("user", "item")) -> Batch:
    n = len(values) // len(keys)
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=list(keys), values=torch.tensor(values, dtype=torch.int64), lengths=torch.ones(len(values), dtype=torch.int32)
    )
    return Batch(torch.zeros(n, 1), kjt, {"like": torch.zeros(n)}, torch.ones(n))


def test_id_dropout_is_seeded_per_batch_and_feature():
    batch = _batch(list(range(1, 2001)) + list(range(1, 2001)))
    dropout = IdDropout.for_tables([TableSpec("t_user", 3000, ["user"]), TableSpec("t_item", 3000, ["item"])], {"t_user": 0.25}, seed=1)
    out = dropout(batch, epoch=0, index=3)
    user, item = out.sparse_features["user"].values(), out.sparse_features["item"].values()
    assert torch.equal(item, batch.sparse_features["item"].values())  # rate 0: untouched
    dropped = user == UNKNOWN_ID
    assert 0.2 < dropped.float().mean() < 0.3
    assert torch.equal(user[~dropped], batch.sparse_features["user"].values()[~dropped])
    assert torch.equal(dropout(batch, epoch=0, index=3).sparse_features.values(), out.sparse_features.values())
    assert not torch.equal(dropout(batch, epoch=0, index=4).sparse_features.values(), out.sparse_features.values())
    assert torch.equal(out.sparse_features.lengths(), batch.sparse_features.lengths())
    with pytest.raises(ValueError, match="--id_dropout: unknown table"):
        IdDropout.for_tables([TableSpec("t_user", 3, ["user"])], {"t_usr": 0.1})


def test_slice_metrics_follow_row_index_through_padding_and_order():
    logits = torch.tensor([[0.1], [0.9], [0.3], [0.7], [5.0]])
    labels = torch.tensor([[0.0], [1.0], [1.0], [0.0], [1.0]])
    weights = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0])  # the last row is padding
    rows = torch.tensor([3, 0, 2, 1, -1])  # outputs are not in split order
    out = ModelOutput(torch.tensor(0.0), {}, logits, labels, weights)
    merged = gather_outputs([out], [rows])
    assert merged["row_index"].tolist() == [3, 0, 2, 1]
    slices = {"odd": np.array([False, True, False, True]), "none": np.zeros(4, bool), "all": np.ones(4, bool)}
    got = slice_metrics(merged, slices, ["like"])
    assert set(got) == {"odd"}  # empty and whole-split slices are not reported
    # Split rows 1 and 3 are outputs 3 and 0: logits 0.7, 0.1, labels 0, 0 -> AUC undefined; compare to reference.
    ref = binary_metrics(torch.tensor([0.1, 0.7]), torch.tensor([0.0, 0.0]))
    assert got["odd"]["like"]["rows"] == 2 and got["odd"]["like"]["logloss"] == pytest.approx(ref["logloss"])
    assert merged_task_metrics(merged, ["like"])["like"]["rows"] == 4


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--id_dropout", "1.0"], "--id_dropout: '1.0' must be in [0, 1)"),
        (["--min_count", "t_user=0"], "--min_count: 't_user=0' must be >= 1"),
        (["--id_maps", "everything"], "--id_maps must be one of"),
        (["--table_lr", "t_user=-0.1"], "--table_lr: 't_user=-0.1' must be >= 0"),
        (["--embedding_learning_rate", "-1"], "--embedding_learning_rate must be >= 0"),
        (["--grad_accum_steps", "0"], "--grad_accum_steps must be >= 1"),
        (["--grad_accum_lr_rule", "sqrt"], "--grad_accum_lr_rule must be one of"),
        (["--falr", "log", "--falr_ref", "most"], "--falr_ref must be 'max' or a positive integer"),
        (["--reinit", "tables@"], "--reinit: entry 'tables@' must be GROUP@EPOCHS"),
        (["--table_lr_warmup", "2x"], "--table_lr_warmup: bad window bound"),
    ],
)
def test_bad_remedy_flags_fail_naming_the_flag(argv, message, capsys):
    from dlrm_multiepoch.train.config import parse_config

    with pytest.raises(SystemExit):
        parse_config(argv)
    assert message in capsys.readouterr().err


def test_table_values_parse_and_errors():
    v = TableValues.parse("0.1, t_a=0.5 ,t_b=0", "--x", float)
    assert (v.default, v.overrides, v.get("t_c")) == (0.1, {"t_a": 0.5, "t_b": 0.0}, 0.1)
    for bad, match in (("t_a=x", "not a valid"), ("=1", "names no table"), ("1,2", "two default"), ("t_a=1,t_a=2", "twice")):
        with pytest.raises(ValueError, match=match):
            TableValues.parse(bad, "--x", float)
