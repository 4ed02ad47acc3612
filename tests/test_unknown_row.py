"""The unknown row: per-table folding (--min_count), the fold report, id maps from
train+pretrain, id dropout, and the seen/unseen-id slices evaluation reports."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torchmetrics.functional.classification import binary_auroc
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.data.dataset import UNKNOWN_ID, TableSpec
from dlrm_multiepoch.data.id_dropout import IdDropout
from dlrm_multiepoch.data.loader import BatchLoader
from dlrm_multiepoch.data.preprocess import preprocess
from dlrm_multiepoch.data.recipe import Recipe, SplitPlan, Standardize, frame_chunk
from dlrm_multiepoch.data.store import open_dataset
from dlrm_multiepoch.models.dlrm import ModelOutput
from dlrm_multiepoch.table_values import TableValues
from dlrm_multiepoch.train.evaluate import ALL_ROWS, evaluate_slices


def _prepare(tmp: Path, min_count="1", id_fit_splits=("train",), chunks: int = 1):
    """A toy dataset through the real preprocessing path.

    User a x3, b x2, c x1 in train; d only in test; e only in pretrain; items x/y/z.
    """
    frame = pd.DataFrame(
        {
            "user": ["a", "a", "a", "b", "b", "c", "a", "d", "c", "e", "e", None],
            "item": ["x", "y", "x", "x", "y", "y", "x", "x", "z", "x", "y", "x"],
        }
    )
    codes = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 1], np.int8)  # train, test, pretrain

    def plan(load, bad):
        return SplitPlan(codes, ["train", "test", "pretrain"])

    cfg = DataConfig(min_count=min_count)
    recipe = Recipe(
        "toy", ["user", "item"], Standardize([]), ["like"], lambda n: {"like": n["like"].astype(np.float32)}, plan,
        min_count=cfg.min_counts(["user", "item"]), id_fit_splits=id_fit_splits,
    )  # fmt: skip
    like = np.array([1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 1], np.float32)
    parts = np.array_split(np.arange(len(frame)), chunks)
    pieces = [frame_chunk(frame.iloc[p], ["user", "item"], {"like": like[p]}) for p in parts]
    out = tmp / f"toy{len(list(tmp.iterdir()))}"
    notes = preprocess(recipe, pieces, out, log=lambda s: None)
    data, _ = open_dataset(out)
    return data, notes


def _ids(data, split, feature):
    return data.splits[split].read(0, len(data.splits[split])).sparse[feature].tolist()


def test_per_table_min_count_folds_and_reports(tmp_path: Path):
    data, notes = _prepare(tmp_path, min_count="1,t_user=3")
    # Only "a" (3 train rows) keeps a row in t_user; b and c fold into row 0. Items keep theirs.
    assert _ids(data, "train", "user") == [1, 1, 1, 0, 0, 0]
    assert [t.num_embeddings for t in data.tables] == [2, 3]
    report = data.encoding["t_user"]
    assert (report["min_count"], report["fit_ids"], report["folded_ids"], report["folded_fit_rows"]) == (3, 3, 2, 3)
    assert report["train_unknown_row_share"] == 0.5 and report["test_unknown_row_share"] == 0.75
    assert any(n.startswith("table t_user: min_count 3 folds 2 of 3 ids") for n in notes), notes
    assert data.encoding["t_item"]["folded_ids"] == 0
    with pytest.raises(ValueError, match="--min_count: unknown table"):
        DataConfig(min_count="t_usr=2").min_counts(["user"])
    with pytest.raises(ValueError, match="--min_count"):
        DataConfig(min_count="0").min_counts(["user"])
    DataConfig(min_count="1,t_user=3").validate()  # the per-table form passes the config check
    with pytest.raises(ValueError, match="--min_count"):
        DataConfig(min_count="0").validate()


def test_unseen_slices_and_id_maps_from_pretrain(tmp_path: Path):
    data, _ = _prepare(tmp_path, chunks=3)
    assert data.slices == ["unseen_user", "unseen_item"]
    test = data.splits["test"].read(0, 4)
    # Test rows: (a, x) seen; (d, x) unseen user; (c, z) unseen item; (missing, x) no user id.
    assert test.slices.tolist() == [0, 1, 2, 1]
    assert _ids(data, "pretrain", "user") == [0, 0]
    fitted, _ = _prepare(tmp_path, id_fit_splits=("train", "pretrain"))
    # "e", seen only in pre-training data, now has its own row (a 3x, b 2x, e 2x, c 1x);
    # the slices still mean "not in the train split".
    assert _ids(fitted, "pretrain", "user") == [3, 3]
    assert fitted.splits["test"].read(0, 4).slices.tolist() == [0, 1, 2, 1]
    with pytest.raises(ValueError, match="--id_maps: toy has no \\['validation'\\] split"):
        _prepare(tmp_path, id_fit_splits=("train", "validation"))
    # The loader carries the codes into batches: 4 rows over 3 ranks, padding has code 0.
    batches = [next(iter(BatchLoader(data, "test", 6, r, 3, prefetch_batches=0))) for r in range(3)]
    assert sorted(c for b in batches for c in b.slices[b.weights == 1].tolist()) == [0, 1, 1, 2]
    assert sum(int((b.weights == 0).sum()) for b in batches) == 2
    assert all((b.slices[b.weights == 0] == 0).all() for b in batches)


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


def test_slice_metrics_follow_each_batch_through_a_read_ahead_pipeline():
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(5):
        n = 64
        batch = _batch(list(range(1, n + 1)) * 2)
        batch.slices = torch.from_numpy(rng.integers(0, 4, n))
        batch.labels = {"like": torch.from_numpy((rng.random(n) < 0.5).astype(np.float32))}
        batches.append(batch)
    logits = {id(b): torch.randn(64, 1, generator=torch.Generator().manual_seed(i)) for i, b in enumerate(batches)}

    def progress(it):  # reads two batches ahead, like TorchRec's pipelines, and returns outputs in order
        while len(queue) < 3:
            nxt = next(it, None)
            if nxt is None:
                break
            queue.append(nxt)
        if not queue:
            raise StopIteration
        b = queue.pop(0)
        return ModelOutput(torch.tensor(0.0), {}, logits[id(b)], b.labels["like"][:, None], b.weights)

    queue = []
    got = evaluate_slices(progress, batches, ["like"], slices=["unseen_user", "unseen_item"])
    codes = torch.cat([b.slices for b in batches])
    all_logits = torch.cat([logits[id(b)] for b in batches])[:, 0]
    labels = torch.cat([b.labels["like"] for b in batches])
    for name, rows in (("unseen_user", codes & 1 == 1), ("unseen_item", codes & 2 == 2), ("seen", codes == 0)):
        logloss = F.binary_cross_entropy_with_logits(all_logits[rows].double(), labels[rows].double()).item()
        auc = binary_auroc(all_logits[rows], labels[rows].long()).item()
        assert got[name]["like"]["rows"] == float(rows.sum())
        assert got[name]["like"]["logloss"] == pytest.approx(logloss)
        assert abs(got[name]["like"]["auc"] - auc) <= got[name]["like"]["auc_error_bound"] + 1e-6
    assert got[ALL_ROWS]["like"]["rows"] == 320


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--id_dropout", "1.0"], "--id_dropout: '1.0' must be in [0, 1)"),
        (["--min_count", "t_user=0"], "--min_count: 't_user=0' must be >= 1"),
        (["--id_maps", "everything"], "--id_maps must be one of"),
        (["--table_lr", "t_user=-0.1"], "--table_lr: 't_user=-0.1' must be a finite number >= 0"),
        (["--embedding_learning_rate", "-1"], "--embedding_learning_rate must be a finite number > 0"),
        (["--grad_accum_steps", "0"], "--grad_accum_steps must be >= 1"),
        (["--grad_accum_lr_rule", "sqrt"], "--grad_accum_lr_rule must be one of"),
        (["--falr", "log", "--falr_ref", "most"], "--falr_ref must be 'max' or a positive integer"),
        (["--falr_ref", "most"], "--falr_ref must be 'max' or a positive integer"),  # with FALR off too
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
