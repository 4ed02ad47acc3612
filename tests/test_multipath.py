"""The multi-path model, unsharded: shapes, gradient routes, loss weights, the shared item table.

Its training under DistributedModelParallel on 2 gloo ranks (after loading pre-trained
tables) is in tests/test_pretrain.py, to share the process startups.
"""

import dataclasses
import math
from typing import Dict

import pytest
import torch
import torch.nn.functional as F

from dlrm_multiepoch.data.loader import BatchLoader
from dlrm_multiepoch.data.synthetic import synthetic_data
from dlrm_multiepoch.gates import GradientGate
from dlrm_multiepoch.models import MODELS, ModelConfig, build_model
from dlrm_multiepoch.models.losses import in_batch_info_nce, pairwise_ranking_loss
from dlrm_multiepoch.models.multipath import PATHS, MultiPathTrain, build_multipath

CPU = torch.device("cpu")
K = 6
TABLES = {"user": 300, "item": 500, "age": 8}
BASE = ModelConfig(model="multipath", embedding_dim=8, dense_arch_layer_sizes="16,8", over_arch_layer_sizes="16",
                   transformer_heads=2, transformer_ff_dim=16, sequence_head_layer_sizes="8")


@pytest.fixture(scope="module")
def data():
    return synthetic_data(512, TABLES, history_length=K, seed=1)


@pytest.fixture(scope="module")
def batch(data):
    return next(iter(BatchLoader(data, "train", 64, shuffle=True)))


def _model(data, **overrides) -> MultiPathTrain:
    torch.manual_seed(0)
    return build_multipath(data, dataclasses.replace(BASE, **overrides), CPU, sparse_device=CPU)


def _grads(model: torch.nn.Module, loss: torch.Tensor) -> Dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _only(term: str, weight: float, tasks=("like", "love")) -> Dict[str, object]:
    """Config overrides that weight one loss term and zero every other."""
    task_w = [weight if t == term else 0.0 for t in tasks]
    return dict(
        task_loss_weights=",".join(str(w) for w in task_w),
        pairwise_loss_weight=weight if term == "pairwise" else 0.0,
        contrastive_loss_weight=weight if term == "contrastive" else 0.0,
    )


ITEM_TABLE = "model.sparse_arch.embedding_collection.embeddings.item.weight"


def test_registered_and_built_by_name(data):
    assert "multipath" in MODELS and "dlrm" in MODELS
    model = build_model(data, BASE, CPU)
    assert isinstance(model, MultiPathTrain)
    assert model.model.sparse_arch.embedding_collection.embeddings["item"].weight.device.type == "meta"


def test_forward_backward_shapes_of_every_path(data, batch):
    model = _model(data)
    out = model.model(batch.dense_features, batch.sparse_features)
    b, t, d = batch.batch_size, len(data.tasks), BASE.embedding_dim
    assert out.cross_logits.shape == (b, t)
    assert out.sequence_logits.shape == (b, t)
    assert torch.equal(out.logits, out.cross_logits + out.sequence_logits)
    assert out.contrastive_history.shape == (b, K, d)
    assert out.history_ids.shape == (b, K)
    assert torch.equal(out.history_lengths, batch.sparse_features["history"].lengths())
    loss, mo = model(batch)
    assert loss.shape == () and set(mo.losses) == {"like", "love", "pairwise", "contrastive"}
    assert mo.logits.shape == (b, t) and mo.labels.shape == (b, t)
    grads = _grads(model, loss)
    # Every weight of every path (tables, dense arch, cross, sequence, contrastive head) learns.
    missing = [n for n, p in model.named_parameters() if n not in grads or not grads[n].abs().sum() > 0]
    assert missing == []
    for name in PATHS:
        gate = model.model.gates[name]
        assert isinstance(gate, GradientGate) and gate.name == name and gate.open


def test_eval_mode_computes_task_losses_only(data, batch):
    model = _model(data).eval()
    with torch.no_grad():
        loss, out = model(batch)
    assert set(out.losses) == {"like", "love"}
    assert torch.equal(loss, torch.stack([out.losses["like"], out.losses["love"]]).sum())


@pytest.mark.parametrize("term", ["like", "love", "pairwise", "contrastive"])
def test_each_loss_reacts_to_its_own_weight(data, batch, term):
    model = _model(data, **_only(term, 1.0))
    loss1, out1 = model(batch)
    g1 = _grads(model, loss1)
    assert torch.equal(loss1, out1.losses[term])
    assert g1[ITEM_TABLE].abs().sum() > 0  # every term reaches the shared item table

    # Doubling the weight doubles every gradient exactly (scaling by 2 is exact in floating point).
    model.loss.weights[term] = 2.0
    loss2, _ = model(batch)
    g2 = _grads(model, loss2)
    assert g1.keys() == g2.keys()
    for name in g1:
        assert torch.equal(g2[name], 2 * g1[name]), name

    # Weight 0: no gradient from it anywhere.
    model.loss.weights[term] = 0.0
    loss0, out0 = model(batch)
    g0 = _grads(model, loss0)
    assert all(torch.count_nonzero(g) == 0 for g in g0.values())
    if term in ("pairwise", "contrastive"):
        assert term not in out0.losses  # not even computed


def test_zero_task_weight_leaves_that_tasks_head_untouched(data, batch):
    model = _model(data, task_loss_weights="1,0", pairwise_loss_weight=0.0, contrastive_loss_weight=1.0)
    loss, out = model(batch)
    assert torch.equal(loss, torch.stack([out.losses["like"], out.losses["contrastive"]]).sum())  # love: logged only
    g = _grads(model, loss)
    for head in ("model.feature_cross.head.1", "model.sequence.head.1"):
        assert torch.count_nonzero(g[f"{head}.weight"][1]) == 0 and g[f"{head}.bias"][1] == 0  # love logit
        assert torch.count_nonzero(g[f"{head}.weight"][0]) > 0


def test_zero_contrastive_weight_skips_the_contrastive_head(data, batch):
    model = _model(data, contrastive_loss_weight=0.0)
    loss, out = model(batch)
    g = _grads(model, loss)
    assert "contrastive" not in out.losses
    assert not any(n.startswith("loss.next_item.") for n in g)
    assert torch.equal(loss, torch.stack([out.losses["like"], out.losses["love"], 0.1 * out.losses["pairwise"]]).sum())


@pytest.mark.parametrize(
    "closed, term, zero_tables, live_tables",
    [
        # Pooled tables feed only the feature-cross path; the item table feeds all three.
        (["feature_cross"], "like", ["user", "age"], ["item"]),
        (["sequence"], "like", [], ["user", "age", "item"]),
        (["feature_cross", "sequence"], "like", ["user", "age", "item"], []),
        (["contrastive"], "contrastive", ["user", "age", "item"], []),
        (["feature_cross", "sequence"], "contrastive", ["user", "age"], ["item"]),
    ],
)
def test_closed_gate_cuts_exactly_its_paths_table_gradient(data, batch, closed, term, zero_tables, live_tables):
    model = _model(data, **_only(term, 1.0))
    for name in closed:
        model.model.gates[name].open = False
    g = _grads(model, model(batch)[0])
    table = {
        "item": ITEM_TABLE,
        "user": "model.sparse_arch.embedding_bag_collection.embedding_bags.user.weight",
        "age": "model.sparse_arch.embedding_bag_collection.embedding_bags.age.weight",
    }
    for name in zero_tables:
        assert table[name] not in g or torch.count_nonzero(g[table[name]]) == 0, name
    for name in live_tables:
        assert torch.count_nonzero(g[table[name]]) > 0, name
    # The paths' own weights still train behind a closed gate.
    head = "loss.next_item.project.weight" if term == "contrastive" else "model.sequence.head.1.weight"
    assert torch.count_nonzero(g[head]) > 0


def test_shared_item_table_is_one_parameter(data, batch):
    model = _model(data)
    dim = BASE.embedding_dim
    item_shaped = [n for n, p in model.named_parameters() if p.shape == (TABLES["item"], dim)]
    assert item_shaped == [ITEM_TABLE]
    weight = model.model.sparse_arch.embedding_collection.embeddings["item"].weight
    views = model.model.embedding_views(model.model.sparse_arch(batch.sparse_features))
    kjt = batch.sparse_features
    cand_ids, hist_ids = kjt["item"].values(), kjt["history"].values()
    assert torch.equal(views.candidate, weight[cand_ids])
    assert torch.equal(views.history[views.history_ids >= 0], weight[hist_ids])
    # Gradients of both features land in that one parameter, row by row.
    weight.grad = None
    (views.candidate.sum() + 2 * views.history.sum()).backward()
    rows = TABLES["item"]
    expected = torch.bincount(cand_ids, minlength=rows) + 2 * torch.bincount(hist_ids, minlength=rows)
    assert torch.equal(weight.grad, expected.to(weight.dtype)[:, None].expand(-1, dim))


def test_bad_configs_name_the_flag(data):
    with pytest.raises(ValueError, match="--transformer_heads"):
        _model(data, transformer_heads=3)
    with pytest.raises(ValueError, match="--task_loss_weights"):
        _model(data, task_loss_weights="1,1,1")
    with pytest.raises(ValueError, match="--contrastive_temperature"):
        _model(data, contrastive_temperature=0.0)
    with pytest.raises(ValueError, match="history"):
        build_multipath(synthetic_data(64, TABLES), BASE, CPU, sparse_device=CPU)


def test_history_longer_than_the_model_is_refused(data):
    model = _model(data)
    longer = synthetic_data(64, TABLES, history_length=K + 2, seed=3)
    batch = next(iter(BatchLoader(longer, "train", 32)))
    assert int(batch.sparse_features["history"].lengths().max()) > K
    with pytest.raises(RuntimeError, match="longer than the model's history length"):
        model(batch)


def test_pairwise_ranking_loss_matches_pair_loop():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(9, 2, generator=g, dtype=torch.float64)
    labels = torch.tensor([[1, 0], [0, 0], [1, 1], [0, 1], [1, 0], [0, 0], [1, 0], [0, 1], [1, 1]], dtype=torch.float64)
    weights = torch.tensor([1, 1, 1, 1, 1, 1, 1, 0, 0], dtype=torch.float64)  # last two: padding
    per_task = []
    for t in range(2):
        pairs = [(i, j) for i in range(9) for j in range(9)
                 if weights[i] and weights[j] and labels[i, t] == 1 and labels[j, t] == 0]
        per_task.append(sum(F.softplus(-(logits[i, t] - logits[j, t])) for i, j in pairs) / len(pairs))
    torch.testing.assert_close(pairwise_ranking_loss(logits, labels, weights), sum(per_task) / 2, rtol=1e-12, atol=0)


def test_info_nce_excludes_same_item_and_missing_targets():
    g = torch.Generator().manual_seed(0)
    q, t = torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 3, generator=g, dtype=torch.float64)
    ids = torch.tensor([7, 7, 8, 9])
    query_mask = torch.tensor([True, True, True, False])
    target_mask = torch.tensor([True, True, False, True])
    tau = 0.5
    s = F.normalize(q, dim=-1) @ F.normalize(t, dim=-1).t() / tau
    # Row 0 and 1 share item 7 (not each other's negatives); row 2 has no target (never a
    # negative, its loss does not count); row 3's query does not count.
    row0 = -s[0, 0] + torch.logsumexp(s[0, [0, 3]], 0)
    row1 = -s[1, 1] + torch.logsumexp(s[1, [1, 3]], 0)
    got = in_batch_info_nce(q, t, ids, query_mask, target_mask, tau)
    torch.testing.assert_close(got, (row0 + row1) / 2, rtol=1e-12, atol=0)
    assert math.isfinite(float(got))


# -- fused vs separate item lookups (--fused_lookup) ---------------------------------------


def test_separate_lookups_equal_the_fused_lookup(data, batch):
    fused, separate = _model(data), _model(data, fused_lookup=False)
    assert fused.model.sparse_arch.separate_lookups is None
    assert separate.model.sparse_arch.separate_lookups is not None
    # The switch adds no weights and moves none: checkpoints load either way.
    assert list(fused.state_dict()) == list(separate.state_dict())
    for (name, a), (_, b) in zip(fused.state_dict().items(), separate.state_dict().items()):
        assert torch.equal(a, b), name
    loss_f, out_f = fused(batch)
    loss_s, out_s = separate(batch)
    assert torch.equal(loss_f, loss_s)
    assert torch.equal(out_f.logits, out_s.logits)
    assert out_f.losses.keys() == out_s.losses.keys()
    assert all(torch.equal(out_f.losses[k], out_s.losses[k]) for k in out_f.losses)
    g_f, g_s = _grads(fused, loss_f), _grads(separate, loss_s)
    assert g_f.keys() == g_s.keys()
    for name in g_f:
        if name == ITEM_TABLE:
            # One scatter-add over candidate + history ids vs two summed: rows hit by both
            # add the same terms in another order.
            torch.testing.assert_close(g_f[name], g_s[name], rtol=0, atol=1e-7)
        else:
            assert torch.equal(g_f[name], g_s[name]), name


def test_separate_lookups_name_a_missing_feature(data, batch):
    lookups = _model(data, fused_lookup=False).model.sparse_arch
    no_history = batch.sparse_features.permute([batch.sparse_features.keys().index(k) for k in ("user", "item", "age")])
    with pytest.raises(ValueError, match=r"lookup group 'history': features \['history'\] are not in the batch"):
        lookups(no_history)


def test_fused_lookup_flag_reaches_the_model():
    from dlrm_multiepoch.train.config import parse_config

    assert parse_config([]).model.fused_lookup is True
    assert parse_config(["--no-fused_lookup"]).model.fused_lookup is False


def _fused_vs_separate_on_2_ranks(rank: int, world_size: int) -> None:
    from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
    from torchrec.sparse.jagged_tensor import KeyedTensor

    from dlrm_multiepoch.distributed import init_distributed
    from dlrm_multiepoch.lookup import count_all_to_all
    from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, shard_model
    from tests.sharding_helpers import load_full_tables, local_tables, snapshot

    env = init_distributed()
    data = synthetic_data(1024, TABLES, history_length=K, seed=1)
    full = _model(data).state_dict()  # rank-independent tables

    def sharded(fused_lookup: bool):
        torch.manual_seed(0)  # same dense weights in both models
        model = build_multipath(data, dataclasses.replace(BASE, fused_lookup=fused_lookup), env.device)
        # Exact SGD: two in-backward updates (separate lookups) equal one of the summed gradient.
        apply_embedding_optimizer(model, "sgd", 0.5)
        dmp = shard_model(model, env, ("table_wise",))  # real all-to-alls for every table
        load_full_tables(dmp, full)
        return dmp

    models = {"fused": sharded(True), "separate": sharded(False)}
    start = snapshot(models["fused"])
    assert start.keys() == snapshot(models["separate"]).keys()
    assert all(torch.equal(start[k], v) for k, v in snapshot(models["separate"]).items())
    batch = next(iter(BatchLoader(data, "train", 64, rank, world_size, shuffle=True)))
    with torch.no_grad():  # the first call of a sharded module sets up its distributions
        for dmp in models.values():
            dmp(batch)

    outs, grads, calls = {}, {}, {}
    for name, dmp in models.items():
        with count_all_to_all() as forward_calls:
            loss, outs[name] = dmp(batch)
        with count_all_to_all() as backward_calls:
            loss.backward()
        calls[name] = (forward_calls, backward_calls)
        grads[name] = {n: p.grad.clone() for n, p in dmp.named_parameters() if p.grad is not None}
    f, s = outs["fused"], outs["separate"]
    assert torch.equal(f.loss, s.loss) and torch.equal(f.logits, s.logits)
    assert all(torch.equal(f.losses[k], s.losses[k]) for k in f.losses)
    assert grads["fused"].keys() == grads["separate"].keys() and grads["fused"]  # the dense weights
    for n in grads["fused"]:
        assert torch.equal(grads["fused"][n], grads["separate"][n]), n
    after = {name: local_tables(dmp) for name, dmp in models.items()}
    assert after["fused"].keys() == after["separate"].keys()
    for k in after["fused"]:
        torch.testing.assert_close(after["fused"][k], after["separate"][k], rtol=0, atol=1e-6, msg=k)
    assert any(not torch.equal(after["fused"][k], start[k]) for k in after["fused"])

    # Collectives per lookup, measured on their own: the separate path pays the item
    # table's lookup twice (input + output all-to-alls forward, gradient ones backward).
    arch = models["fused"].module.model.sparse_arch
    per_lookup = {}
    for name in ("embedding_bag_collection", "embedding_collection"):
        with count_all_to_all() as forward_calls:
            out = getattr(arch, name)(batch.sparse_features).wait()
        total = out.values().sum() if isinstance(out, KeyedTensor) else sum(jt.values().sum() for jt in out.values())
        with count_all_to_all() as backward_calls:
            total.backward()
        per_lookup[name] = (forward_calls, backward_calls)
    ebc, ec = per_lookup["embedding_bag_collection"], per_lookup["embedding_collection"]
    for i in (0, 1):  # forward, backward
        assert sum(ec[i].values()) > 0 and sum(ebc[i].values()) > 0
        assert calls["fused"][i] == ebc[i] + ec[i], (i, calls["fused"][i], ebc[i], ec[i])
        assert calls["separate"][i] == ebc[i] + ec[i] + ec[i], (i, calls["separate"][i], ebc[i], ec[i])

    # Under TorchRec's pipeline: the fused item lookup runs ahead of the forward, the
    # separate ones inside it (KJTs built in the model); both train the same way.
    losses = {}
    for name, dmp in models.items():
        load_full_tables(dmp, full)
        pipeline = TrainPipelineSparseDist(dmp, build_optimizer(dmp, 1e-3), env.device)
        it = iter(BatchLoader(data, "train", 64, rank, world_size))
        losses[name] = [float(pipeline.progress(it).loss) for _ in range(3)]
        pipelined = {type(m).__name__ for m in pipeline._pipelined_modules}
        if name == "fused":
            assert pipelined == {"ShardedEmbeddingBagCollection", "ShardedEmbeddingCollection"}
        else:
            assert pipelined == {"ShardedEmbeddingBagCollection"}
    assert losses["fused"][0] == losses["separate"][0]
    assert losses["fused"] == pytest.approx(losses["separate"], rel=1e-5)


def test_sharded_separate_lookups_equal_fused_with_twice_the_item_collectives():
    from dlrm_multiepoch.testing.ranks import run_on_ranks

    run_on_ranks(_fused_vs_separate_on_2_ranks, 2)
