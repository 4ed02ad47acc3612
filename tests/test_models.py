import numpy as np
import pytest
import torch

from dlrm_multiepoch.data import BatchLoader, synthetic_data
from dlrm_multiepoch.models import ModelConfig, build_model
from dlrm_multiepoch.models.dlrm import weighted_bce


def _materialise(model: torch.nn.Module) -> torch.nn.Module:
    # Tables are built on the meta device for sharding; give them real storage here.
    ebc = model.model.sparse_arch.embedding_bag_collection
    for name, bag in ebc.embedding_bags.items():
        ebc.embedding_bags[name] = torch.nn.EmbeddingBag(
            bag.num_embeddings, bag.embedding_dim, mode=bag.mode, include_last_offset=bag.include_last_offset
        )
    return model


@pytest.mark.parametrize("arch", ["dlrm", "dlrm_dcn"])
def test_forward_shapes_and_backward(arch):
    data = synthetic_data(300, history_length=3)
    torch.manual_seed(0)
    model = _materialise(build_model(data, ModelConfig(model=arch), torch.device("cpu")))
    batch = next(iter(BatchLoader(data, "train", 64)))
    loss, out = model(batch)
    assert out.logits.shape == (64, 2) and out.labels.shape == (64, 2)
    assert set(out.losses) == {"like", "love"}
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_padding_rows_do_not_change_the_loss():
    torch.manual_seed(0)
    logits, labels = torch.randn(10), (torch.rand(10) > 0.5).float()
    real = weighted_bce(logits[:7], labels[:7], torch.ones(7))
    padded = weighted_bce(logits, labels, torch.tensor([1.0] * 7 + [0.0] * 3))
    assert torch.equal(real, padded)


def test_dense_arch_must_end_with_embedding_dim():
    data = synthetic_data(100)
    with pytest.raises(ValueError, match="--dense_arch_layer_sizes must end with --embedding_dim"):
        build_model(data, ModelConfig(embedding_dim=8, dense_arch_layer_sizes="32,16"), torch.device("cpu"))


def test_bad_layer_sizes_and_unknown_model_name_the_flag():
    data = synthetic_data(100)
    with pytest.raises(ValueError, match="--over_arch_layer_sizes expects comma-separated integers"):
        build_model(data, ModelConfig(over_arch_layer_sizes="64,x"), torch.device("cpu"))
    with pytest.raises(ValueError, match="--model must be one of"):
        build_model(data, ModelConfig(model="nope"), torch.device("cpu"))


def test_over_arch_gets_one_logit_per_task():
    data = synthetic_data(100, tasks=("a", "b", "c"))
    model = build_model(data, ModelConfig(over_arch_layer_sizes="8"), torch.device("cpu"))
    assert model.model.over_arch.model[-1].out_features == 3
    assert np.array_equal(model.tasks, ["a", "b", "c"])


@pytest.mark.parametrize("arch", ["dlrm_dcn", "multipath"])
def test_builders_read_the_parsed_values_not_the_text(arch):
    # validate() parses each text flag once and the builders read what it parsed. Made to differ from
    # the text here, the parsed values win: the model equals the one their own text builds.
    data = synthetic_data(200, history_length=3)
    base = dict(model=arch, embedding_dim=8, transformer_heads=2, transformer_ff_dim=16)
    cfg = ModelConfig(**base, dense_arch_layer_sizes="32,8", over_arch_layer_sizes="16", sequence_head_layer_sizes="8")
    cfg.validate()
    cfg.dense_arch_sizes, cfg.over_arch_sizes, cfg.sequence_head_sizes = (24, 8), (12,), (4,)
    cfg.task_loss_weight_values = (0.5, 2.0)
    text = ModelConfig(**base, dense_arch_layer_sizes="24,8", over_arch_layer_sizes="12", sequence_head_layer_sizes="4",
                       task_loss_weights="0.5,2")  # fmt: skip
    built = []
    for c in (cfg, text):
        torch.manual_seed(0)
        model = build_model(data, c, torch.device("cpu"))
        built.append((model, {k: v for k, v in model.state_dict().items() if not v.is_meta}))  # tables: meta
    (got, got_weights), (want, want_weights) = built
    assert got_weights.keys() == want_weights.keys()
    assert all(torch.equal(got_weights[k], want_weights[k]) for k in want_weights)
    if arch == "multipath":
        assert got.loss.weights == want.loss.weights == {"like": 0.5, "love": 2.0, "pairwise": 0.1, "contrastive": 0.1}
