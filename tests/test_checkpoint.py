"""Checkpoints and resume: exact mid-epoch resume, fallback past damage, other world sizes, non-finite losses.

The multi-rank test trains ``resume_config`` (a MovieLens subset, see
``tests/resume_helpers.py``) on 2 gloo ranks and compares with the uninterrupted
run ``a`` of the session fixture:

- B is "killed" in epoch 1 after its step-8 checkpoint, which is then damaged, with
  an interrupted step-10 save left behind: ``resume="auto"`` falls back to step 4
  (mid-epoch, before the over arch ever trained, so its Adam state must stay absent),
  crosses the freeze-schedule switch, and ends bitwise equal to ``a``'s final checkpoint.
- S (1 rank, this process) saves its end-of-epoch step 10; D loads it on 2 ranks: every
  saved value lands bitwise in D's shards. W (1 rank) loads ``a``'s 2-rank step 10 the
  same way; ``a``'s mid-epoch step 12 is refused on 1 rank (an epoch's shuffled order
  depends on the number of ranks). Both then train epoch 2 in their own order.
- E skips non-finite batches (a diverging learning rate): equal, bitwise, to a run
  that stopped before them. G stops at the first one, naming it and the last checkpoint.
- The semi-synchronous pipeline resumes exactly across its warm-up (same spawn).
"""

import json
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torchrec.optim.keyed import KeyedOptimizerWrapper

from dlrm_multiepoch.data.dataset import TableSpec
from dlrm_multiepoch.distributed import all_gather_object, init_distributed
from dlrm_multiepoch.testing.ranks import run_on_ranks, single_rank_group
from dlrm_multiepoch.train.build import check_resumable
from dlrm_multiepoch.train.checkpoint import (
    STATE_FILE,
    Checkpointer,
    StartPoint,
    CheckpointInfo,
    check_compatible,
    check_sharding,
)
from dlrm_multiepoch.train.config import OptimConfig, parse_config
from dlrm_multiepoch.train.nonfinite import NonFiniteLossError
from dlrm_multiepoch.train.trainer import Trainer
from tests.resume_helpers import (
    STEPS_PER_EPOCH,
    assert_bitwise_equal,
    assert_matches_full,
    local_tensors,
    resume_config,
    scalars,
)

DIVERGING = OptimConfig(learning_rate=1e3, embedding_learning_rate=1e18)  # finite at step 1, NaN from step 2


def _final_metrics(summary: Dict[str, Any]) -> Dict[str, float]:
    last = summary["evaluations"][-1]
    return {f"{s}/{t}/{m}": last[s][t][m] for s in ("test", "train_sample") for t in ("like", "love") for m in ("auc", "logloss")}


def _saved_state(trainer: Trainer, full: Dict[str, Any]) -> Dict[str, Any]:
    """The trainer's state as a checkpoint saves it: model, optimizer and tensor parts (e.g. the table LR step)."""
    state = {"model": trainer.model.state_dict(), "optimizer": trainer.optimizer.state_dict()}
    return state | {name: part.state_dict() for name, part in trainer.checkpointed.items() if name in full}


def _two_rank_checks(rank: int, world_size: int, tmp: str, ref: str) -> None:
    env = init_distributed()
    b1 = Trainer(resume_config(tmp, "b"), env)
    b1.train_epoch(0)  # saves step_4 and step_8, trains steps 9-10, then "dies" before the epoch's evaluation
    b1.logger.close()
    del b1
    if rank == 0:  # the newest checkpoint is damaged, and a save was interrupted
        shard = next(p for p in sorted(Path(f"{tmp}/b/checkpoints/step_8").iterdir()) if p.suffix == ".distcp")
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
        os.makedirs(f"{tmp}/b/checkpoints/step_10.tmp")
        Path(f"{tmp}/b/checkpoints/step_10.tmp/__0_0.distcp").write_bytes(b"partial")
    dist.barrier()

    b2 = Trainer(resume_config(tmp, "b", resume="auto"), env)
    assert b2.start is not None and b2.start.checkpoint.path == f"{tmp}/b/checkpoints/step_4"
    assert (b2.progress.epoch, b2.progress.batch_in_epoch, b2.step, b2.freeze.global_step) == (0, 4, 4, 4)
    summary_b = b2.train()

    # Every tensor of B's model and optimizer equals A's final checkpoint, bitwise.
    full_a = torch.load(f"{tmp}/a_step_20.pt", weights_only=False)
    state_b = _saved_state(b2, full_a)
    seen = set().union(*all_gather_object(assert_matches_full(state_b, full_a, "resumed B vs A")))
    assert seen == set(local_tensors(full_a))
    # Every kind of optimizer state is covered: fused table momentum (non-zero: tables
    # trained in epoch 1) and Adam moments of data-parallel tables and of dense layers.
    pieces = local_tensors(full_a["optimizer"])
    assert any(bool(t.abs().sum() > 0) for k, ts in pieces.items() if k.endswith("momentum1") for _, t in ts)
    assert any(k.endswith("/exp_avg") and "embedding_bags" in k for k in pieces)
    assert any(k.endswith("/exp_avg") and "over_arch" in k for k in pieces)
    summary_a = json.loads(Path(f"{ref}/a/summary.json").read_text())
    assert [e["epoch"] for e in summary_b["evaluations"]] == [1, 2]
    assert summary_b["evaluations"] == summary_a["evaluations"]
    assert summary_b["resumed_from"] == [{"path": f"{tmp}/b/checkpoints/step_4", "step": 4, "epoch": 0, "batch": 4}]
    # 1 -> 2 ranks: S's single-rank end-of-epoch checkpoint lands bitwise in D's shards, then D trains on.
    d = Trainer(resume_config(tmp, "d", resume=f"{tmp}/s/checkpoints/step_10"), env)
    full = torch.load(f"{tmp}/s_step_10.pt", weights_only=False)
    both = _saved_state(d, full)
    seen = set().union(*all_gather_object(assert_matches_full(both, full, "1 -> 2 ranks")))
    assert seen == set(local_tensors(full))  # the ranks hold every saved value between them
    assert (d.progress.epoch, d.progress.batch_in_epoch) == (1, 0)
    _check_continued(d.train(), d)

    # Skipping non-finite batches is an exact no-op: E equals F, which stopped before them.
    diverging: Dict[str, Any] = dict(epochs=1, freeze_schedule="joint", optim=DIVERGING, log_every_n_steps=1)
    diverging["limit_train_batches"] = 4
    e = Trainer(resume_config(tmp, "e", skip_nonfinite_batches=True, checkpoint=False, **diverging), env)
    summary_e = e.train()
    skipped = e.nonfinite.skipped
    assert 0 < skipped < 4
    diverging["limit_train_batches"] = 4 - skipped
    f = Trainer(resume_config(tmp, "f", checkpoint=False, **diverging), env)
    f.train_epoch(0)
    assert_bitwise_equal(e.model.state_dict(), f.model.state_dict(), "model after skipped batches")
    assert_bitwise_equal(e.optimizer.state_dict(), f.optimizer.state_dict(), "optimizer after skipped batches")
    f.logger.close()
    # Diverged weights give NaN metrics: null in summary.json, which strict JSON readers accept.
    assert summary_e["evaluations"][-1]["test"]["like"]["logloss"] is None
    if rank == 0:
        json.loads(Path(f"{tmp}/e/summary.json").read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))

    # Without skipping, every rank stops at the first non-finite loss, naming it and the last checkpoint.
    g = Trainer(resume_config(tmp, "g", checkpoint_every_n_steps=1, **{**diverging, "limit_train_batches": 3}), env)
    with pytest.raises(NonFiniteLossError, match=r"at step 2 .*Last good checkpoint: \S+/g/checkpoints/step_1\."):
        g.train()
    g.logger.close()

    _semi_sync_resume_is_exact(env, tmp)

    if rank == 0:
        # B kept its 2 newest; the damaged step_8 was re-saved, the interrupted save removed.
        assert sorted(os.listdir(f"{tmp}/b/checkpoints")) == ["step_16", "step_20"]
        on_disk = json.loads(Path(f"{tmp}/b/summary.json").read_text())
        assert [e["epoch"] for e in on_disk["evaluations"]] == [1, 2]
        # TensorBoard shows each step once, the interrupted job's steps after the checkpoint replaced.
        for tag in ("train/loss", "test/like/auc", "freeze/tables"):
            assert scalars(f"{tmp}/b", tag) == scalars(f"{ref}/a", tag), tag


def _semi_sync_resume_is_exact(env: Any, tmp: str) -> None:
    # Warm-up (synchronous lookups) ends inside epoch 2, while the tables train: the
    # resumed pipeline must count the warm-up from the run's start, not its own.
    # Table-wise only: the semi-sync pipeline does not take training data-parallel tables.
    settings: Dict[str, Any] = dict(pipeline="semi_sync", pipeline_warmup_batches=STEPS_PER_EPOCH + 3)
    settings |= dict(freeze_schedule="joint", sharding_types="table_wise")
    a = Trainer(resume_config(tmp, "semi_a", **settings), env)
    assert a.steps_per_epoch == STEPS_PER_EPOCH
    summary_a = a.train()
    b1 = Trainer(resume_config(tmp, "semi_b", **settings), env)
    b1.run_epoch(0)
    b1.logger.close()
    b2 = Trainer(resume_config(tmp, "semi_b", resume="auto", **settings), env)
    assert b2.step == STEPS_PER_EPOCH
    summary_b = b2.train()
    assert_bitwise_equal(a.model.state_dict(), b2.model.state_dict(), "semi-sync model")
    assert_bitwise_equal(a.optimizer.state_dict(), b2.optimizer.state_dict(), "semi-sync optimizer state")
    assert summary_b["evaluations"] == summary_a["evaluations"]


def _check_continued(summary: Dict[str, Any], trainer: Trainer) -> None:
    """A run continued on another world size evaluated epoch 2 on every test row, with finite metrics."""
    last = summary["evaluations"][-1]
    assert last["epoch"] == 2 and last["test"]["like"]["rows"] == len(trainer.data.splits["test"])
    assert all(math.isfinite(v) for v in _final_metrics(summary).values())


def test_resume_mid_epoch_after_damage_and_on_other_world_sizes(tmp_path: Path, uninterrupted_runs: Path) -> None:
    tmp, ref = str(tmp_path), str(uninterrupted_runs)
    with single_rank_group():
        Trainer(resume_config(tmp, "s", keep_checkpoints=10), init_distributed()).train()
    dcp_to_torch_save(f"{tmp}/s/checkpoints/step_10", f"{tmp}/s_step_10.pt")
    dcp_to_torch_save(f"{ref}/a/checkpoints/step_20", f"{tmp}/a_step_20.pt")
    run_on_ranks(_two_rank_checks, 2, tmp, ref)

    # 2 -> 1 rank: A's 2-rank end-of-epoch checkpoint lands bitwise in W's single shards.
    # Its epoch 2 runs in the 1-rank order (the block shuffle deals rows to ranks), so it
    # is W's own run from A's state, not comparable row by row with A's epoch 2.
    dcp_to_torch_save(f"{ref}/a/checkpoints/step_10", f"{tmp}/a_step_10.pt")
    with single_rank_group():
        env = init_distributed()
        with pytest.raises(ValueError, match=r"taken 2 batches into epoch 2 on 2 ranks; .* continues only on 2 ranks"):
            Trainer(resume_config(tmp, "w", resume=f"{ref}/a/checkpoints/step_12"), env)
        w = Trainer(resume_config(tmp, "w", resume=f"{ref}/a/checkpoints/step_10"), env)
        full = torch.load(f"{tmp}/a_step_10.pt", weights_only=False)
        state = _saved_state(w, full)
        assert assert_matches_full(state, full, "2 -> 1 ranks") == set(local_tensors(full))
        _check_continued(w.train(), w)


# ---------------------------------------------------------------- single-process checks


class _JsonPart:
    def __init__(self) -> None:
        self.value = {"lr_scale": 0.5, "undefined": float("nan")}

    def state_dict(self) -> Dict[str, Any]:
        return dict(self.value)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.value = dict(state)


class _TensorPart:
    def __init__(self) -> None:
        self.counts = torch.zeros(5)

    def state_dict(self) -> Dict[str, Any]:
        return {"counts": self.counts}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.counts.copy_(state["counts"])


def test_checkpointer_saves_json_parts_in_the_state_file_and_tensor_parts_in_dcp(tmp_path: Path) -> None:
    model = nn.Linear(3, 2)
    optimizer = KeyedOptimizerWrapper(dict(model.named_parameters()), lambda p: torch.optim.SGD(p, lr=0.1))
    parts: Dict[str, Any] = {"schedule": _JsonPart(), "counts": _TensorPart()}
    ckpt = Checkpointer(str(tmp_path), model, optimizer, parts, log=lambda _: None)
    parts["counts"].counts += torch.arange(5.0)
    path = ckpt.save(7, {"config": {}})
    state = json.loads(Path(path, STATE_FILE).read_text())
    assert state["parts"] == {"schedule": {"lr_scale": 0.5, "undefined": None}} and state["tensor_parts"] == ["counts"]
    weight = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.zero_()
    parts["counts"].counts.zero_()
    info = ckpt.find("auto")
    ckpt.load(info)
    assert torch.equal(model.weight, weight) and torch.equal(parts["counts"].counts, torch.arange(5.0))
    assert parts["schedule"].value == {"lr_scale": 0.5, "undefined": None}
    parts["late"] = _JsonPart()  # registered after the save: the checkpoint cannot restore it
    with pytest.raises(ValueError, match=r"holds no state for \['late'\]"):
        ckpt.load(info)
    # A start point from another run's checkpoint (a branch) leaves out what it excludes; the run's own wins whole.
    assert StartPoint.choose(info, info, ("late",)) == StartPoint(info, "--resume", ())
    branch = StartPoint.choose(None, info, ("late", "schedule"))
    assert branch == StartPoint(info, "--start_from", ("late", "schedule")) and branch.is_branch
    parts["schedule"].value, parts["late"].value = {"own": 1}, {"own": 2}
    with torch.no_grad():
        model.weight.zero_()
    assert ckpt.restore(branch) == []  # same world size, and an unsharded model has no plan to compare
    assert torch.equal(model.weight, weight) and (parts["schedule"].value, parts["late"].value) == ({"own": 1}, {"own": 2})
    assert StartPoint.choose(None, None) is None


def test_config_mismatch_names_the_field(tmp_path: Path) -> None:
    base = resume_config(str(tmp_path), "run")
    tables = [TableSpec("user", 100, ["user"]), TableSpec("item", 200, ["item"])]
    info = CheckpointInfo(path="ckpt", state={"config": base.to_dict(), "tables": {"user": 100, "item": 200}, "step": 5})
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
    # On another world size (or launch) the planner may shard a table otherwise: fine where DCP reshards its state.
    tw, dp = {"type": "table_wise", "column_shards": 1}, {"type": "data_parallel", "column_shards": 1}
    info.state["sharding"] = {"m.user": tw, "m.age": dp, "m.item": tw}
    one_column_range = {"type": "column_wise", "column_shards": 1}
    assert check_sharding(info, {"m.user": {"type": "row_wise", "column_shards": 1}, "m.age": dp, "m.item": one_column_range}) == [
        "table m.item: table_wise -> column_wise (resharded)",
        "table m.user: table_wise -> row_wise (resharded)",
    ]
    with pytest.raises(ValueError, match=r"table m.age was data_parallel .* made it table_wise.*--sharding_types"):
        check_sharding(info, {"m.user": tw, "m.age": tw, "m.item": tw})
    with pytest.raises(ValueError, match=r"table m.item was table_wise \(1 column shard\(s\)\) .* column_wise \(2\)"):
        check_sharding(info, {"m.user": tw, "m.age": dp, "m.item": {"type": "column_wise", "column_shards": 2}})


def test_a_resume_may_not_skip_or_redo_work(tmp_path: Path) -> None:
    cfg = resume_config(str(tmp_path), "run")
    progress = {"epoch": 1, "batch_in_epoch": 4}
    info = CheckpointInfo(path="ckpt", state={"config": cfg.to_dict(), "parts": {"progress": progress}, "step": 14})
    info.state["world_size"] = 2
    check_resumable(info, cfg, 2)
    with pytest.raises(ValueError, match=r"--epochs 1 is below what checkpoint ckpt has trained \(epoch 2, batch 4\); pass --epochs 2"):
        check_resumable(info, replace(cfg, epochs=1), 2)
    with pytest.raises(ValueError, match=r"--batch_size 512: checkpoint ckpt was taken 4 batches into an epoch at --batch_size 256"):
        check_resumable(info, cfg.with_flags(batch_size=512), 2)
    with pytest.raises(ValueError, match=r"taken 4 batches into epoch 2 on 2 ranks; .* continues only on 2 ranks"):
        check_resumable(info, cfg, 1)
    progress["batch_in_epoch"] = 0  # at an epoch's end any batch size and world size continue
    check_resumable(info, cfg.with_flags(batch_size=512), 1)


def test_checkpoint_flags(tmp_path: Path) -> None:
    cfg = parse_config(["--no-checkpoint", "--keep_checkpoints", "3", "--resume", "auto", "--run_name", "r"])
    assert (cfg.checkpoint.enabled, cfg.checkpoint.keep_checkpoints, cfg.checkpoint.resume) == (False, 3, "auto")
    cfg = parse_config(["--checkpoint_every_n_steps", "50", "--overwrite", "--skip_nonfinite_batches"])
    assert (cfg.checkpoint.checkpoint_every_n_steps, cfg.checkpoint.overwrite, cfg.pipeline.skip_nonfinite_batches) == (50, True, True)
    assert parse_config([]).checkpoint.enabled is True and parse_config([]).checkpoint.keep_checkpoints == 2
    with pytest.raises(ValueError, match="--resume auto needs --run_name"):
        cfg.with_flags(resume="auto", run_name="").validate()
    with pytest.raises(ValueError, match="--keep_checkpoints must be >= 1, got 0"):
        cfg.with_flags(keep_checkpoints=0).validate()
    with pytest.raises(ValueError, match="--checkpoint_every_n_steps must be >= 0"):
        cfg.with_flags(checkpoint_every_n_steps=-1).validate()
    with pytest.raises(ValueError, match=r"--resume '\S+nope': no such checkpoint folder"):
        cfg.with_flags(resume=str(tmp_path / "nope")).check_paths()


def test_the_planner_sees_sharding_types_in_the_given_order() -> None:
    # TorchRec intersects them as sets (order by string hash seed); ties between equal-cost
    # plans then went table-wise in one launch and column-wise in the next.
    from torchrec.distributed.planner import ParameterConstraints, Topology

    from dlrm_multiepoch.train.sharding import OrderedEnumerator

    order = ["table_wise", "row_wise", "column_wise"]
    enumerator = OrderedEnumerator(
        topology=Topology(world_size=2, compute_device="cpu"),
        batch_size=512,
        constraints={"t": ParameterConstraints(sharding_types=order)},
        sharding_types=order,
    )
    assert enumerator._filter_sharding_types("t", ["column_wise", "data_parallel", "row_wise", "table_wise"]) == order
