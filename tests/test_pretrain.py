"""Pre-training stage and pre-trained tables: save sharded, load bit-exactly elsewhere.

The multi-rank test chains three small jobs: pre-train on 2 ranks (column-wise) →
load into a 1-rank fine-tuning model (table-wise), train it, save → load into a 2-rank
fine-tuning model (table-wise) and train the multi-path model under
DistributedModelParallel with TorchRec's pipeline.
"""

import dataclasses
import json
import os
from typing import Dict

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed._shard.sharded_tensor import ShardedTensor
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist

from dlrm_multiepoch.data.loader import BatchLoader
from dlrm_multiepoch.data.synthetic import synthetic_data
from dlrm_multiepoch.distributed import init_distributed
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.models.multipath import build_multipath
from dlrm_multiepoch.models.pretrain import build_pretrain_model
from dlrm_multiepoch.testing.ranks import run_on_ranks
from dlrm_multiepoch.train.evaluate import eval_outputs
from dlrm_multiepoch.run_files import CheckpointInfo
from dlrm_multiepoch.train.config import TrainConfig
from dlrm_multiepoch.train.pretrain import PRETRAIN_SPLIT, PretrainSpec, pretrain_split
from dlrm_multiepoch.train.pretrained import SUMMARY_FILE, load_pretrained_tables, save_tables, table_state_dict
from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, shard_model
from dlrm_multiepoch.train.spec import TRAIN
from dlrm_multiepoch.train.trainer import Trainer

CPU = torch.device("cpu")
TABLES = {"user": 300, "item": 500, "age": 8}
K = 6
MODEL = ModelConfig(model="multipath", embedding_dim=8, dense_arch_layer_sizes="16,8", over_arch_layer_sizes="16",
                    transformer_heads=2, transformer_ff_dim=16, sequence_head_layer_sizes="8")


def _data(num_rows: int = 2048):
    return synthetic_data(num_rows, TABLES, history_length=K, seed=2)


def _full_tables(model: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """Whole tables on rank 0 (gathered from the live shards, not from any checkpoint)."""
    full: Dict[str, torch.Tensor] = {}
    for name, t in table_state_dict(model).items():
        if isinstance(t, ShardedTensor):
            out = torch.empty(t.size(), dtype=t.dtype) if dist.get_rank() == 0 else None
            t.gather(dst=0, out=out)
            full[name] = out
        else:
            full[name] = t.detach().clone()
    return full


def _fine_tune_model(data, sharding_types):
    env = init_distributed()
    torch.manual_seed(123)  # a different init than pre-training: loading must overwrite it
    model = build_multipath(data, MODEL, env.device)
    apply_embedding_optimizer(model, "rowwise_adagrad", 0.05)
    dmp = shard_model(model, env, sharding_types)
    return env, dmp, TrainPipelineSparseDist(dmp, build_optimizer(dmp, 1e-3), env.device)


def _train(pipeline, loader, steps: int):
    it = iter(loader)
    return [pipeline.progress(it) for _ in range(steps)]


def _assert_tables_equal(model, reference_path: str) -> None:
    live = _full_tables(model)
    if dist.get_rank() == 0:
        reference = torch.load(reference_path)
        assert sorted(live) == sorted(reference)
        for name in reference:
            assert torch.equal(live[name], reference[name]), f"table {name} differs after loading"


def _pretrain_cfg(tmp: str, run_name: str, **flags) -> TrainConfig:
    return TrainConfig.from_flags(
        model=MODEL, history_length=K, batch_size=256, sharding_types="column_wise", pipeline="semi_sync",
        log_every_n_steps=2, limit_train_batches=4, epochs=2, tensorboard_dir=tmp, run_name=run_name,
        progress_bar=False, **flags,
    )  # fmt: skip


def _pretrain_on_2_ranks(rank: int, world_size: int, tmp: str) -> None:
    env = init_distributed()
    trainer = Trainer(_pretrain_cfg(tmp, "a"), env, data=_data(), spec=PretrainSpec(f"{tmp}/pretrained", 0.75))
    trainer.train()
    dist.barrier()  # rank 0 writes the summary
    summary = json.load(open(f"{tmp}/pretrained/{SUMMARY_FILE}"))
    assert summary["tables"] == ["age", "item", "user"] and summary["data"] == trainer.cfg.data.cache_options()
    assert summary["rows"] == 1152  # 0.75 of the 1536 train rows: 5 batches, limited to 4
    assert summary["steps"] == 8  # 2 epochs x 4
    losses = [e["loss"] for e in summary["loss"]]
    assert len(losses) == 4 and all(np.isfinite(losses))
    # Reference: the live tables after pre-training, gathered independently of DCP.
    full = _full_tables(trainer.model)
    if rank == 0:
        torch.save(full, f"{tmp}/reference_a.pt")

    # Paused after epoch 1 (its checkpoint), then resumed: the same tables and loss history, bit for bit.
    Trainer(_pretrain_cfg(tmp, "b", stop_at_epoch=1), env, data=_data(), spec=PretrainSpec(f"{tmp}/paused", 0.75)).train()
    assert not os.path.exists(f"{tmp}/paused")  # a paused run saves no tables
    resumed = Trainer(_pretrain_cfg(tmp, "b", resume="auto"), env, data=_data(), spec=PretrainSpec(f"{tmp}/b", 0.75))
    assert resumed.step == 4
    resumed.train()
    dist.barrier()
    _assert_tables_equal(resumed.model, f"{tmp}/reference_a.pt")
    assert json.load(open(f"{tmp}/b/{SUMMARY_FILE}"))["loss"] == summary["loss"]


def _load_on_1_rank_then_save(rank: int, world_size: int, tmp: str) -> None:
    data = _data()
    env, dmp, pipeline = _fine_tune_model(data, ["table_wise"])
    logged = []
    report = load_pretrained_tables(dmp, f"{tmp}/pretrained", logged.append, strict=True)
    assert report.loaded == ["user", "age", "item"] and report.fresh == [] and "loaded: user, age, item" in logged[0]
    _assert_tables_equal(dmp, f"{tmp}/reference_a.pt")
    _train(pipeline, BatchLoader(data, "train", 256, rank, world_size, shuffle=True), 3)
    save_tables(dmp, f"{tmp}/finetuned")
    full = _full_tables(dmp)
    torch.save(full, f"{tmp}/reference_b.pt")


def _load_on_2_ranks_and_train(rank: int, world_size: int, tmp: str) -> None:
    data = _data()
    env, dmp, pipeline = _fine_tune_model(data, ["table_wise"])
    load_pretrained_tables(dmp, f"{tmp}/finetuned", lambda _: None)
    _assert_tables_equal(dmp, f"{tmp}/reference_b.pt")

    # The shared item table is one (sharded) parameter serving both features.
    item_keys = [k for k in dmp.state_dict() if k.endswith(".item.weight")]
    assert item_keys == ["model.sparse_arch.embedding_collection.embeddings.item.weight"]
    batch = next(iter(BatchLoader(data, "train", 256, rank, world_size)))
    with torch.no_grad():
        views = dmp.module.model.embedding_views(dmp.module.model.sparse_arch(batch.sparse_features))
    row_of = {int(i): n for n, i in enumerate(views.candidate_ids)}
    shared = [(row_of[int(i)], j) for j, i in enumerate(views.history_ids[views.history_ids >= 0]) if int(i) in row_of]
    assert shared, "batch has no item id that is both a candidate and in a history"
    history = views.history[views.history_ids >= 0]
    for c, h in shared:
        assert torch.equal(views.candidate[c], history[h])

    # The multi-path model trains under DistributedModelParallel with TorchRec's pipeline.
    loader = BatchLoader(data, "train", 256, rank, world_size, shuffle=True)
    first, last = [], []
    for epoch in range(4):
        loader.set_epoch(epoch)
        outs = _train(pipeline, loader, len(loader))
        (first if epoch == 0 else last).extend(outs)
    assert {type(m).__name__ for m in pipeline._pipelined_modules} == {
        "ShardedEmbeddingBagCollection", "ShardedEmbeddingCollection"}  # both lookups ran ahead of forward
    assert set(first[0].losses) == {"like", "love", "pairwise", "contrastive"}
    for name in first[0].losses:
        start = np.mean([float(o.losses[name]) for o in first])
        end = np.mean([float(o.losses[name]) for o in last[-len(first):]])
        assert end < start, f"train loss {name} did not decrease: {start:.4f} -> {end:.4f}"
    dmp.eval()
    test = BatchLoader(data, "test", 256, rank, world_size)
    outs = list(eval_outputs(pipeline.progress, test))
    rows = torch.tensor(sum(int(o.weights.sum()) for o in outs))
    dist.all_reduce(rows)
    assert int(rows) == len(data.splits["test"])  # every test row scored once across ranks
    assert all(torch.isfinite(o.logits).all() and set(o.losses) == {"like", "love"} for o in outs)


def test_pretrained_tables_move_between_world_sizes_and_fine_tune(tmp_path):
    tmp = str(tmp_path)
    run_on_ranks(_pretrain_on_2_ranks, 2, tmp)
    summary = json.load(open(os.path.join(tmp, "pretrained", SUMMARY_FILE)))
    assert summary["world_size"] == 2 and summary["split"] == PRETRAIN_SPLIT
    run_on_ranks(_load_on_1_rank_then_save, 1, tmp)
    run_on_ranks(_load_on_2_ranks_and_train, 2, tmp)


# -- single process ---------------------------------------------------------------------


def _unsharded(data, embedding_dim: int = 8):
    torch.manual_seed(0)
    return build_multipath(data, dataclasses.replace(MODEL, embedding_dim=embedding_dim), CPU, sparse_device=CPU)


def _save_unsharded(tables: Dict[str, torch.Tensor], path: str) -> None:
    dcp.save(tables, checkpoint_id=path, no_dist=True)


def test_missing_checkpoint_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no torch.distributed.checkpoint there"):
        load_pretrained_tables(_unsharded(_data(256)), str(tmp_path / "nothing"))


def test_mismatched_table_names_the_table(tmp_path):
    model = _unsharded(_data(256))
    tables = {k: v.detach().clone() for k, v in table_state_dict(model).items()}
    _save_unsharded(tables, str(tmp_path / "dim8"))
    with pytest.raises(ValueError, match=r"table 'user' is 300 rows x 8 dims in the checkpoint but 300 x 16"):
        load_pretrained_tables(_unsharded(_data(256), embedding_dim=16), str(tmp_path / "dim8"))
    tables["item"] = torch.zeros(TABLES["item"] + 1, 8)
    _save_unsharded(tables, str(tmp_path / "rows"))
    with pytest.raises(ValueError, match=r"table 'item' is 501 rows x 8 dims in the checkpoint but 500 x 8"):
        load_pretrained_tables(model, str(tmp_path / "rows"))
    # Pre-trained with other data flags (pretrain.json records them): the message names them.
    (tmp_path / "rows" / "pretrain.json").write_text(json.dumps({"data": {"val_fraction": 0.0, "min_count": "1"}}))
    with pytest.raises(ValueError, match=r"500 x 8 .*the data flags differ: --val_fraction 0.0 in pre-training, 0.1 here$"):
        load_pretrained_tables(model, str(tmp_path / "rows"), data_options={"val_fraction": 0.1, "min_count": "1"})
    tables["item"] = torch.zeros(TABLES["item"], 8, dtype=torch.float64)
    _save_unsharded(tables, str(tmp_path / "dtype"))
    with pytest.raises(ValueError, match=r"table 'item' is torch.float64 in the checkpoint but torch.float32"):
        load_pretrained_tables(model, str(tmp_path / "dtype"))


def test_missing_table_is_reported_fresh_or_refused(tmp_path):
    model = _unsharded(_data(256))
    tables = {k: v.detach().clone() + 1.0 for k, v in table_state_dict(model).items() if k != "age"}
    tables["genre"] = torch.zeros(4, 8)
    _save_unsharded(tables, str(tmp_path / "ckpt"))
    with pytest.raises(ValueError, match=r"table\(s\) \['age'\] missing from the checkpoint"):
        load_pretrained_tables(model, str(tmp_path / "ckpt"), strict=True)
    before_age = table_state_dict(model)["age"].detach().clone()
    report = load_pretrained_tables(model, str(tmp_path / "ckpt"), log=lambda _: None)
    assert (report.loaded, report.fresh, report.unused) == (["user", "item"], ["age"], ["genre"])
    after = table_state_dict(model)
    assert torch.equal(after["user"], tables["user"]) and torch.equal(after["item"], tables["item"])
    assert torch.equal(after["age"], before_age)
    _save_unsharded({"genre": torch.zeros(4, 8)}, str(tmp_path / "other"))
    with pytest.raises(ValueError, match=r"none of the model's tables \['age', 'item', 'user'\]"):
        load_pretrained_tables(model, str(tmp_path / "other"))


def test_pretrain_split_is_a_seeded_slice_of_train_only():
    data = _data(400)
    train = data.splits["train"]
    assert pretrain_split(data, 0.25, seed=5) == PRETRAIN_SPLIT
    part = data.splits[PRETRAIN_SPLIT]
    assert len(part) == 75  # 300 train rows x 0.25
    rows = {tuple(r) for r in train.history.tolist()}
    assert all(tuple(r) in rows for r in part.history.tolist())
    again = _data(400)
    pretrain_split(again, 0.25, seed=5)
    assert np.array_equal(again.splits[PRETRAIN_SPLIT].dense, part.dense)
    with pytest.raises(ValueError, match="--pretrain_train_fraction"):
        PretrainSpec("x", train_fraction=0.0)


def test_pretrain_objective_trains_every_table():
    data = _data(256)
    torch.manual_seed(0)
    model = build_pretrain_model(data, MODEL, CPU, sparse_device=CPU)
    batch = next(iter(BatchLoader(data, "train", 64)))
    loss, logged = model(batch)
    loss.backward()
    assert torch.equal(loss.detach(), logged.loss) and set(logged.losses) == {"contrastive"} and loss > 0
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    # Same table names and shapes as the multi-path model: its checkpoint loads there.
    shapes = {k: tuple(v.shape) for k, v in table_state_dict(model).items()}
    assert shapes == {k: tuple(v.shape) for k, v in table_state_dict(_unsharded(data)).items()}


def test_pretrain_refuses_by_name_the_training_flags_it_would_ignore(capsys):
    from dlrm_multiepoch.train.pretrain import parse_pretrain_config

    with pytest.raises(SystemExit):
        parse_pretrain_config(["--pretrain_output", "x", "--freeze_schedule", "delayed", "--eval_every_n_steps", "5",
                               "--reinit", "tables@1"])
    err = capsys.readouterr().err
    assert "error: --eval_every_n_steps, --freeze_schedule, --reinit: not used by pre-training" in err
    # The loop's flags apply: epochs, pipeline, checkpoints, resume, batch, learning rates, progress bar.
    flags = ["--pretrain_output", "x", "--epochs", "3", "--pipeline", "semi_sync", "--no-checkpoint", "--resume", "auto",
             "--run_name", "p",
             "--history_length", "10", "--batch_size", "64", "--learning_rate", "0.01", "--no-progress_bar"]
    cfg, spec = parse_pretrain_config(flags + ["--pretrain_train_fraction", "0.25"])
    assert (cfg.epochs, cfg.pipeline.name, cfg.checkpoint.enabled, cfg.checkpoint.resume) == (3, "semi_sync", False, "auto")
    assert (cfg.loader.batch_size, cfg.optim.learning_rate, cfg.metrics.progress_bar) == (64, 0.01, False)
    assert (spec.output, spec.train_fraction) == ("x", 0.25)


def test_pretraining_and_training_refuse_each_others_checkpoints():
    record = TrainConfig().to_dict()
    trained = CheckpointInfo("runs/a/checkpoints/step_8", {"config": record})
    pretrained = CheckpointInfo("runs/p/checkpoints/step_8", {"config": PretrainSpec("out", 0.5).config_record(TrainConfig())})
    with pytest.raises(ValueError, match="'runs/a/checkpoints/step_8' is a training run's checkpoint"):
        PretrainSpec("out", 0.5).check_checkpoint(trained)
    with pytest.raises(ValueError, match="--pretrain_train_fraction 0.25: checkpoint runs/p/checkpoints/step_8 .* 0.5"):
        PretrainSpec("out", 0.25).check_checkpoint(pretrained)
    PretrainSpec("elsewhere", 0.5).check_checkpoint(pretrained)  # another output folder continues
    with pytest.raises(ValueError, match="--start_from 'runs/p/.*' is a pre-training run's checkpoint; fine-tune"):
        TRAIN.check_checkpoint(pretrained, "--start_from")
