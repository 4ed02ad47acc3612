"""What a user's own loop meets besides the happy path: state DCP loads on any sharding, the output protocol
and its metrics, the mistakes refused when a part is built, and the documented edge of skipping inside an
accumulation window. In-process (a 1-rank group where a ``DistributedModelParallel`` is needed)."""

import re
from typing import Any, NamedTuple

import pytest
import torch
from torch import nn
from torch.distributed.checkpoint import _version
from torch.distributed.checkpoint._nested_dict import flatten_state_dict
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper

from dlrm_multiepoch import (
    AutoFreezeSchedule, BinaryMetrics, FALRConfig, FreezeScheduleWrapper, FrequencyAdaptiveLR, GradientAccumulation,
    IdDropout, MetricsLogger, ReinitSchedule, SemiSyncTrainPipeline, SkipNonFiniteBatches, TableLRScheduler,
    TableReinit, TrainParts, TrainProgress,
)  # fmt: skip
from dlrm_multiepoch.json_state import pack_json_state, unpack_json_state
from dlrm_multiepoch.pipeline.prefetch import overlap_line
from dlrm_multiepoch.saved_state import StateMismatch
from dlrm_multiepoch.testing.ranks import single_rank_group
from tests.dropin_models import dense_optimizer
from tests.doc_blocks import import_example
from tests.sharding_helpers import snapshot


def _keys(state: Any, old_layout: bool) -> list:
    _version._derived_version = "2_3" if old_layout else None
    try:
        return sorted(flatten_state_dict(state)[0])
    finally:
        _version._derived_version = None


def _ebc_model() -> nn.Module:
    tables = [EmbeddingBagConfig(name=n, embedding_dim=4, num_embeddings=10, feature_names=[n]) for n in ("u", "i")]
    return nn.ModuleDict({"ebc": EmbeddingBagCollection(tables), "head": nn.Linear(8, 1)})


def test_every_parts_state_flattens_to_the_same_keys_under_both_dcp_layouts(tmp_path) -> None:
    """DCP's planner re-reads a rank's state in torch 2.3's layout when the rank holds no shard of some table;
    a part's state must give the same keys both ways (a tensor-free mapping would collapse into one key)."""
    model = _ebc_model()
    optimizer = KeyedOptimizerWrapper(dict(model.named_parameters()), lambda p: torch.optim.SGD(p, lr=0.1))
    auto = AutoFreezeSchedule(model, 4, 2, ["click"], optimizer=optimizer)
    auto.step()
    auto.observe({"click": {"cal_ne": 0.9, "auc": 0.6, "logloss": 0.6}})  # a decision: a list of mappings
    parts = {
        "freeze": FreezeScheduleWrapper(model, "tables=frozen@[0,1) train@[1,end)", 4, 2, optimizer=optimizer),
        "auto": auto,
        "progress": TrainProgress(step=3, skipped_nonfinite=1),
        "metrics": MetricsLogger(str(tmp_path), enabled=False),
        "table_lr": TableLRScheduler(nn.Linear(2, 2), None, 4, 2),
        "accumulation": GradientAccumulation(nn.Linear(2, 2), optimizer, steps=2),
    }
    parts["metrics"].evaluation({"epoch": 1, "step": 4, "val": {"click": {"auc": float("nan")}}})
    for name, part in parts.items():
        state = {name: part.state_dict()}
        assert _keys(state, old_layout=True) == _keys(state, old_layout=False), name
        part.load_state_dict(part.state_dict())  # and it loads back what it saved
    assert parts["auto"].decisions[0].to_dict() == auto.decisions[0].to_dict()
    assert unpack_json_state("p", pack_json_state({"a": [1, {"b": None}]})) == {"a": [1, {"b": None}]}
    bad = pack_json_state({}) | {"version": torch.tensor(7)}
    with pytest.raises(StateMismatch, match="p: the saved state has version 7, this library reads version 1"):
        unpack_json_state("p", bad)


def test_binary_metrics_take_one_tasks_1d_tensors_or_name_the_shape_expected() -> None:
    g = torch.Generator().manual_seed(0)
    logits, labels = torch.randn(50, generator=g), (torch.rand(50, generator=g) < 0.4).float()
    one, two = BinaryMetrics(["click"]), BinaryMetrics(["click"])
    one.update(logits, labels)  # [B], weights default to 1
    two.update(logits[:, None], labels[:, None], torch.ones(50))
    assert one.compute() == two.compute()
    with pytest.raises(ValueError, match=re.escape("BinaryMetrics(['like', 'love']).update: logits of shape [50]; expected [B, 2]")):
        BinaryMetrics(["like", "love"]).update(logits, labels)
    with pytest.raises(ValueError, match=re.escape("labels of shape [49]; expected the logits' shape [50]")):
        BinaryMetrics(["click"]).update(logits, labels[:49])
    with pytest.raises(ValueError, match=re.escape("weights of shape [50, 1]; expected [50] (one per row, 0 for padding)")):
        BinaryMetrics(["click"]).update(logits, labels, torch.ones(50, 1))


class _TupleBatch(NamedTuple):
    sparse_features: KeyedJaggedTensor
    labels: torch.Tensor


class _ObjectBatch:
    def __init__(self, sparse_features: KeyedJaggedTensor) -> None:
        self.sparse_features, self.labels = sparse_features, torch.zeros(3)


def test_id_dropout_takes_any_batch_a_spare_row_per_feature_and_checks_them_against_the_model() -> None:
    kjt = KeyedJaggedTensor(
        keys=["u", "i"], values=torch.arange(1, 7), lengths=torch.ones(6, dtype=torch.int64), weights=torch.rand(6)
    )
    dropout = IdDropout({"u": 0.99, "i": 0.99}, seed=1, unknown_id={"u": 9})  # "i" keeps row 0
    for batch in (_TupleBatch(kjt, torch.zeros(3)), _ObjectBatch(kjt)):
        out = dropout(batch, epoch=0, index=0).sparse_features
        assert out.values().tolist() == [9, 9, 9, 0, 0, 0] and torch.equal(out.weights(), kjt.weights())
        assert batch.sparse_features is kjt  # the input batch is left as it was
    IdDropout({"u": 0.1}, unknown_id=9, model=_ebc_model())
    with pytest.raises(ValueError, match=re.escape("IdDropout: no table of the model serves feature(s) ['x']; features: ['i', 'u']")):
        IdDropout({"x": 0.1}, model=_ebc_model())
    message = (
        "IdDropout: unknown_id 10 of feature 'u' is not a row of its table (rows 0..9): give the table a spare row no "
        "id uses (num_embeddings=11) and pass unknown_id={'u': 10}"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        IdDropout({"u": 0.1}, unknown_id=10, model=_ebc_model())


def test_parts_built_on_the_model_before_sharding_say_so() -> None:
    model = _ebc_model()
    optimizer = KeyedOptimizerWrapper(dict(model.named_parameters()), lambda p: torch.optim.SGD(p, lr=0.1))
    fix = r"needs the model sharded by DistributedModelParallel, but EmbeddingBagCollection 'ebc' is not: build it after"
    for name, build in [
        ("TableLRScheduler", lambda: TableLRScheduler(model, None, 4, 2)),
        ("FrequencyAdaptiveLR", lambda: FrequencyAdaptiveLR(model, FALRConfig("log"))),
        ("TableReinit", lambda: TableReinit(model, optimizer, ReinitSchedule.parse("tables@1", 2))),
        ("GradientAccumulation", lambda: GradientAccumulation(model, optimizer, steps=2)),
    ]:
        with pytest.raises(ValueError, match=f"^{name} {fix}"):
            build()


def _sharded(static_graph: bool = False):
    """The example's DeepFM on this 1-rank group, and its optimizer."""
    deepfm, example = import_example()
    model, dense = example.build(0, 1, torch.device("cpu"))
    if static_graph:  # TorchRec's default DDP wrapper
        torch.manual_seed(0)
        model = DistributedModelParallel(deepfm.DeepFM(deepfm.POOLED, deepfm.SEQUENCE), device=torch.device("cpu"))
        dense = dense_optimizer(model)
    return model, CombinedOptimizer([model.fused_optimizer, dense]), deepfm


def _check_refusals_on_a_sharded_model() -> None:
    model, optimizer, _ = _sharded(static_graph=True)
    with pytest.raises(ValueError, match=re.escape("data_parallel_wrapper=DefaultDataParallelWrapper(static_graph=False)")):
        GradientAccumulation(model, optimizer, steps=2)
    GradientAccumulation(model, optimizer, steps=1)  # no window, nothing skipped: allowed

    deepfm, example = import_example()
    unsharded = deepfm.DeepFM(deepfm.POOLED, deepfm.SEQUENCE)
    sgd = torch.optim.SGD(unsharded.parameters(), lr=0.1)
    freeze = FreezeScheduleWrapper(unsharded, "delayed", 4, 2, optimizer=sgd)  # built before DMP: its hooks go with the modules
    model = example.shard(unsharded, 1, torch.device("cpu"))
    with pytest.raises(RuntimeError, match=r"modules 'ebc' \(now ShardedEmbeddingBagCollection\).* FreezeScheduleWrapper\(dmp"):
        SemiSyncTrainPipeline(model, CombinedOptimizer([model.fused_optimizer]), torch.device("cpu"), frozen_tables=freeze.frozen_tables)


def _check_a_skipped_closing_micro_batch() -> None:
    """docs/DROPIN.md: a window whose closing micro-batch is skipped takes no dense step; its earlier table updates stay."""
    model, optimizer, deepfm = _sharded()
    train, _ = deepfm.splits(256, 64)
    batches = list(deepfm.Loader(train, 64, 0, 1))[:2]
    batches[1].dense_features[0, 0] = float("nan")
    accumulation = GradientAccumulation(model, optimizer, steps=2)
    parts = TrainParts([SkipNonFiniteBatches(model), accumulation])  # the DMP itself: its training module is hooked
    pipeline = TrainPipelineSparseDist(model, parts.wrap_optimizer(optimizer), torch.device("cpu"))
    start, it = snapshot(model, optimizer), iter(batches)
    for step in range(2):
        with parts.step_context(step, last_of_epoch=False):
            pipeline.progress(it)
    end = snapshot(model, optimizer)
    assert end.keys() == start.keys()  # no optimizer state created (Adam never stepped)
    moved = {k.split(".")[1] for k in start if not torch.equal(start[k], end[k])}
    assert moved == {"ebc", "ec"}, moved  # tables only: no dense weight, no Adam state
    assert parts.parts[0].skipped == 1 and accumulation.optimizer_steps == 1


def _check_the_deprecated_accumulation_optimizer_steps_as_the_parts_one() -> None:
    """0.2.x: ``accumulation.optimizer`` (warning) gives the pipeline what ``parts.wrap_optimizer`` gives: the same
    model and optimizer state, bitwise, after two accumulation windows."""
    finals = []
    for deprecated in (False, True):
        torch.manual_seed(0)
        model, optimizer, deepfm = _sharded()
        accumulation = GradientAccumulation(model, optimizer, steps=2)
        parts = TrainParts([accumulation])
        if deprecated:
            with pytest.warns(DeprecationWarning, match=r"parts\.wrap_optimizer\(optimizer\).* 0\.3\.0"):
                stepped = accumulation.optimizer
        else:
            stepped = parts.wrap_optimizer(optimizer)
        pipeline = TrainPipelineSparseDist(model, stepped, torch.device("cpu"))
        batches = iter(list(deepfm.Loader(deepfm.splits(256, 64)[0], 64, 0, 1))[:4])
        for step in range(4):
            with parts.step_context(step, last_of_epoch=False):
                pipeline.progress(batches)
        assert accumulation.optimizer_steps == 2
        finals.append(snapshot(model, optimizer))
    assert finals[0].keys() == finals[1].keys()
    assert all(torch.equal(finals[0][k], finals[1][k]) for k in finals[0])


def test_mistakes_are_refused_when_built_and_a_skipped_closing_micro_batch_takes_no_dense_step() -> None:
    torch.manual_seed(0)
    with single_rank_group():
        _check_refusals_on_a_sharded_model()
        _check_a_skipped_closing_micro_batch()


def test_the_deprecated_accumulation_optimizer_steps_as_the_parts_one() -> None:
    with single_rank_group():
        _check_the_deprecated_accumulation_optimizer_steps_as_the_parts_one()


def test_the_overlap_line_names_both_kinds_of_module() -> None:
    assert overlap_line(1, ["ebc", "ec"], []) == "every lookup overlaps the previous backward (ebc, ec)"
    assert overlap_line(1, ["ebc"], ["fp_ebc"]) == (
        "lookups that overlap the previous backward: ebc; after each update (TrainPipelineSparseDist's order): fp_ebc"
    )
    assert overlap_line(0, ["ebc"], []) == "staleness=0: every lookup (ebc) runs after the previous update"
