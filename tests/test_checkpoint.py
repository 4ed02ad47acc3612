"""Per-epoch checkpoints and resume: a resumed run is bitwise the uninterrupted one.

The multi-rank test trains on a MovieLens subset on 2 gloo ranks: run A two epochs
uninterrupted; run B one epoch (checkpoint), then epoch 2 trained and logged but
"killed" before its checkpoint, leaving an interrupted save behind; then a new Trainer
resumes B with ``resume="auto"``. The planner shards ``user``/``item`` table-wise (fused
row-wise Adagrad) and replicates the small tables (trained by the dense Adam). The
freeze schedule switches at the resume point (tables train in epoch 1, frozen in
epoch 2; the over arch the other way round), so the fused Adagrad momentum, the Adam
moments (present for the tables and dense arch, absent for the still-frozen over arch)
and the freeze state all have to round-trip.
"""

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import torch
import torch.distributed as dist
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.distributed._shard.sharded_tensor import ShardedTensor

from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.data.dataset import TableSpec
from dlrm_multiepoch.distributed import init_distributed
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.train.checkpoint import (
    STATE_FILE,
    CheckpointInfo,
    check_compatible,
    complete_checkpoints,
    find_checkpoint,
)
from dlrm_multiepoch.train.config import TrainConfig, parse_config
from dlrm_multiepoch.train.trainer import Trainer
from tests.multiprocess import run_on_ranks

STEPS_PER_EPOCH = 10  # 2400 train rows of the 3000-row MovieLens sample, global batch 256
SCHEDULE = "tables=train@[0,1) frozen@[1,end); module:over_arch.*=frozen@[0,1) train@[1,end)"


def _cfg(tmp: str, run_name: str, **overrides: Any) -> TrainConfig:
    settings: Dict[str, Any] = dict(
        epochs=2,
        batch_size=256,
        eval_batch_size=1024,
        train_eval_rows=500,
        log_every_n_steps=3,
        progress_bar=False,
        sharding_types="data_parallel,table_wise",
        freeze_schedule=SCHEDULE,
    )
    return TrainConfig(
        data=DataConfig(dataset="movielens", max_rows=3000),
        model=ModelConfig(embedding_dim=8, dense_arch_layer_sizes="16,8", over_arch_layer_sizes="16"),
        tensorboard_dir=tmp,
        run_name=run_name,
        **(settings | overrides),
    )


def _local_tensors(state: Any, prefix: str = "") -> Dict[str, List[Tuple[Tuple[int, ...], torch.Tensor]]]:
    """Every tensor of a nested state dict, as this rank's (shard offsets, tensor) pieces."""
    out: Dict[str, List[Tuple[Tuple[int, ...], torch.Tensor]]] = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out |= _local_tensors(value, f"{prefix}{key}/")
        elif isinstance(value, ShardedTensor):
            out[prefix + key] = [(tuple(s.metadata.shard_offsets), s.tensor) for s in value.local_shards()]
        elif isinstance(value, torch.Tensor):
            out[prefix + key] = [((), value)]
    return out


def _assert_bitwise_equal(a: Any, b: Any, what: str) -> None:
    ta, tb = _local_tensors(a), _local_tensors(b)
    assert sorted(ta) == sorted(tb), f"{what}: keys differ: {sorted(set(ta) ^ set(tb))}"
    for key in ta:
        assert [o for o, _ in ta[key]] == [o for o, _ in tb[key]], f"{what}: {key} is sharded differently"
        for (_, x), (_, y) in zip(ta[key], tb[key]):
            assert torch.equal(x, y), f"{what}: {key} differs"


def _scalars(run_dir: str, tag: str) -> List[Tuple[int, float]]:
    acc = EventAccumulator(run_dir)
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _resume_is_exact(rank: int, world_size: int, tmp: str) -> None:
    env = init_distributed()
    a = Trainer(_cfg(tmp, "a", keep_checkpoints=1), env)
    summary_a = a.train()
    steps_per_epoch = a.steps_per_epoch
    assert steps_per_epoch == STEPS_PER_EPOCH

    b1 = Trainer(_cfg(tmp, "b"), env)
    b1.run_epoch(0)
    b1.train_epoch(1)  # epoch 2 trains and logs, then the job dies before its checkpoint...
    b1.logger.close()
    del b1
    if rank == 0:  # ...in the middle of saving it
        os.makedirs(f"{tmp}/b/checkpoints/epoch_2.tmp")
        Path(f"{tmp}/b/checkpoints/epoch_2.tmp/__0_0.distcp").write_bytes(b"partial")
    dist.barrier()

    b2 = Trainer(_cfg(tmp, "b", resume="auto"), env)
    assert b2.resume_from is not None and b2.resume_from.path == f"{tmp}/b/checkpoints/epoch_1"
    assert (b2.start_epoch, b2.step, b2.freeze.global_step) == (1, steps_per_epoch, steps_per_epoch)
    assert b2.freeze.frozen_tables() == sorted(t.name for t in b2.data.tables)
    summary_b = b2.train()

    _assert_bitwise_equal(a.model.state_dict(), b2.model.state_dict(), "model")
    opt_a = a.optimizer.state_dict()
    _assert_bitwise_equal(opt_a, b2.optimizer.state_dict(), "optimizer state")
    # Every kind of optimizer state is covered: fused table momentum (non-zero: tables
    # trained in epoch 1, before the checkpoint) and Adam moments of data-parallel
    # tables and of dense layers.
    pieces = _local_tensors(opt_a)
    momentum = [t for k, ts in pieces.items() if k.endswith("momentum1") for _, t in ts]
    assert momentum and any(bool(t.abs().sum() > 0) for t in momentum)
    assert any(k.endswith("/exp_avg") and "embedding_bags" in k for k in pieces)
    assert any(k.endswith("/exp_avg") and "over_arch" in k for k in pieces)
    # Evaluations: epoch 1 restored from the checkpoint, epoch 2 computed again, all equal.
    evals_a, evals_b = summary_a["evaluations"], summary_b["evaluations"]
    assert [e["epoch"] for e in evals_b] == [1, 2] and evals_b == evals_a
    assert summary_b["resumed_from"] == [{"path": f"{tmp}/b/checkpoints/epoch_1", "epoch": 1, "step": steps_per_epoch}]

    # The resumed run's own checkpoint data is consistent: re-resuming finds epoch 2, nothing to train.
    c = Trainer(_cfg(tmp, "b", resume="auto"), env)
    assert (c.start_epoch, c.step) == (2, 2 * steps_per_epoch)
    c.logger.close()

    # A shape-changing flag is refused before anything is built, naming the flag.
    with pytest.raises(ValueError, match="--embedding_dim 8, this run has 4"):
        bad = _cfg(tmp, "c", resume=f"{tmp}/a/checkpoints/epoch_2")
        Trainer(replace(bad, model=replace(bad.model, embedding_dim=4, dense_arch_layer_sizes="16,4")), env)

    if rank == 0:
        # keep_checkpoints=1 left A only its last; B keeps 2; the interrupted save is gone.
        assert sorted(os.listdir(f"{tmp}/a/checkpoints")) == ["epoch_2", "latest.json"]
        assert sorted(os.listdir(f"{tmp}/b/checkpoints")) == ["epoch_1", "epoch_2", "latest.json"]
        latest = json.loads(Path(f"{tmp}/b/checkpoints/latest.json").read_text())
        assert latest == {"path": "epoch_2", "epoch": 2, "step": 2 * steps_per_epoch}
        # summary.json keeps every evaluation; TensorBoard shows each step once, with
        # the interrupted job's epoch-2 scalars replaced by the resumed job's.
        on_disk = json.loads(Path(f"{tmp}/b/summary.json").read_text())
        assert [e["epoch"] for e in on_disk["evaluations"]] == [1, 2]
        for tag in ("train/loss", "test/like/auc", "freeze/tables"):
            assert _scalars(f"{tmp}/b", tag) == _scalars(f"{tmp}/a", tag), tag
        assert max(step for step, _ in _scalars(f"{tmp}/b", "train/loss")) == 2 * steps_per_epoch


def test_resumed_run_is_bitwise_equal_to_uninterrupted_run(tmp_path: Path) -> None:
    run_on_ranks(_resume_is_exact, 2, str(tmp_path))


def _semi_sync_resume_is_exact(rank: int, world_size: int, tmp: str) -> None:
    env = init_distributed()
    # Warm-up (synchronous lookups) ends inside epoch 2, while the tables train: the
    # resumed pipeline must count the warm-up from the run's start, not its own.
    # Table-wise only: the semi-sync pipeline does not take training data-parallel tables.
    settings: Dict[str, Any] = dict(pipeline="semi_sync", pipeline_warmup_batches=STEPS_PER_EPOCH + 3)
    settings |= dict(freeze_schedule="joint", sharding_types="table_wise")
    a = Trainer(_cfg(tmp, "a", **settings), env)
    assert a.steps_per_epoch == STEPS_PER_EPOCH
    summary_a = a.train()
    b1 = Trainer(_cfg(tmp, "b", **settings), env)
    b1.run_epoch(0)
    b1.logger.close()
    b2 = Trainer(_cfg(tmp, "b", resume="auto", **settings), env)
    summary_b = b2.train()
    _assert_bitwise_equal(a.model.state_dict(), b2.model.state_dict(), "model")
    _assert_bitwise_equal(a.optimizer.state_dict(), b2.optimizer.state_dict(), "optimizer state")
    assert summary_b["evaluations"] == summary_a["evaluations"]


def test_semi_sync_resume_is_exact_across_warmup(tmp_path: Path) -> None:
    run_on_ranks(_semi_sync_resume_is_exact, 2, str(tmp_path))


# ---------------------------------------------------------------- single-process checks


def _fake_checkpoint(path: Path, epoch: int, complete: bool = True) -> None:
    path.mkdir(parents=True)
    (path / ".metadata").write_bytes(b"")
    if complete:
        (path / STATE_FILE).write_text(json.dumps({"format": 1, "epoch": epoch, "step": 10 * epoch}))


def test_interrupted_save_is_ignored_by_auto_and_rejected_by_path(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    _fake_checkpoint(folder / "epoch_1", 1)
    (folder / "latest.json").write_text(json.dumps({"path": "epoch_1", "epoch": 1, "step": 10}))
    _fake_checkpoint(folder / "epoch_2.tmp", 2, complete=False)
    assert complete_checkpoints(str(folder)) == [(1, str(folder / "epoch_1"))]
    info = find_checkpoint("auto", str(folder))
    assert info is not None and (info.path, info.epoch, info.step) == (str(folder / "epoch_1"), 1, 10)
    with pytest.raises(ValueError, match=r"epoch_2\.tmp'.*incomplete checkpoint.*trainer_state\.json.*epoch_1"):
        find_checkpoint(str(folder / "epoch_2.tmp"), str(folder))
    with pytest.raises(FileNotFoundError, match="epoch_7'.*no such checkpoint folder"):
        find_checkpoint(str(folder / "epoch_7"), str(folder))
    assert find_checkpoint("", str(folder)) is None
    assert find_checkpoint("auto", str(tmp_path / "fresh-run" / "checkpoints")) is None
    # latest.json naming a folder that is gone is an error, not a silent fresh start.
    (folder / "latest.json").write_text(json.dumps({"path": "epoch_3", "epoch": 3, "step": 30}))
    with pytest.raises(ValueError, match="names 'epoch_3', which is missing or incomplete"):
        find_checkpoint("auto", str(folder))


def test_config_mismatch_names_the_field(tmp_path: Path) -> None:
    base = _cfg(str(tmp_path), "run")
    tables = [TableSpec("user", 100, ["user"]), TableSpec("item", 200, ["item"])]
    info = CheckpointInfo(
        path="ckpt", state={"config": base.to_dict(), "tables": {"user": 100, "item": 200}, "epoch": 1, "step": 5}
    )
    longer = replace(base, epochs=3, optim=replace(base.optim, learning_rate=0.01))
    assert check_compatible(info, longer.to_dict(), tables) == ["--learning_rate 0.001 -> 0.01", "--epochs 2 -> 3"]
    for section, name, value in [
        ("data", "dataset", "bookcrossing"),
        ("data", "history_length", 5),
        ("model", "model", "dlrm_dcn"),
        ("model", "embedding_dim", 4),
        ("model", "over_arch_layer_sizes", "32"),
        ("optim", "embedding_optimizer", "sgd"),
    ]:
        changed = replace(base, **{section: replace(getattr(base, section), **{name: value})})
        with pytest.raises(ValueError, match=f"trained with --{name} .*this run has {value!r}"):
            check_compatible(info, changed.to_dict(), tables)
    other_rows = replace(base, data=replace(base.data, max_rows=2000))
    with pytest.raises(ValueError, match=r"table 'item' has 200 rows in the checkpoint but 190.*\['--max_rows'\]"):
        check_compatible(info, other_rows.to_dict(), [tables[0], TableSpec("item", 190, ["item"])])


def test_checkpoint_flags() -> None:
    cfg = parse_config(["--no-checkpoint", "--keep_checkpoints", "3", "--resume", "auto", "--run_name", "r"])
    assert (cfg.checkpoint, cfg.keep_checkpoints, cfg.resume) == (False, 3, "auto")
    assert parse_config([]).checkpoint is True and parse_config([]).keep_checkpoints == 2
    with pytest.raises(ValueError, match="--resume auto needs --run_name"):
        replace(cfg, run_name="").validate()
    with pytest.raises(ValueError, match="--keep_checkpoints must be >= 1, got 0"):
        replace(cfg, keep_checkpoints=0).validate()


def test_prune_keeps_the_newest_up_to_the_saved_epoch(tmp_path):
    # After resuming from epoch 2 of a run that had reached epoch 4, saving epoch 3
    # must keep epoch 3 (latest.json points at it) and drop the superseded epoch 4.
    from dlrm_multiepoch.train.checkpoint import STATE_FILE, _prune, complete_checkpoints

    for epoch in (1, 2, 3, 4):
        (tmp_path / f"epoch_{epoch}").mkdir()
        (tmp_path / f"epoch_{epoch}" / STATE_FILE).write_text("{}")
    (tmp_path / "epoch_5.tmp").mkdir()
    _prune(str(tmp_path), keep=2, saved=3)
    assert [e for e, _ in complete_checkpoints(str(tmp_path))] == [2, 3]
    assert not (tmp_path / "epoch_5.tmp").exists()
