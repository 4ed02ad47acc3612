"""Runs started from another run's checkpoint (``--start_from``, a schedule branch), paused runs (``--stop_at_epoch``).

The 2-rank test trains ``resume_config`` (MovieLens sample, 10 steps per epoch, schedule
S switching after epoch 1; see ``tests/resume_helpers.py``):

- A trains S for 2 epochs in one go (the reference).
- P trains S with ``--stop_at_epoch 1``: it pauses after epoch 1's checkpoint without
  end-of-run records.
- B branches from P's step-10 checkpoint with the same S, saves a step checkpoint,
  "dies" before the end of epoch 2, and its own ``--resume auto`` finishes it: weights,
  optimizer state and every evaluation are bitwise A's.
- Q pauses inside epoch 2 (``--stop_at_epoch 1.5``: an evaluation and a checkpoint at
  step 15) and ``--resume auto`` finishes it: bitwise A's, A's evaluations plus the pause's.
- D branches from P's step 10 with another suffix (the tables keep training in epoch 2);
  E trains D's schedule from scratch: D equals E bitwise (the shared prefix is exact).
"""

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dlrm_multiepoch.distributed import init_distributed
from dlrm_multiepoch.testing.ranks import run_on_ranks
from dlrm_multiepoch.train.checkpoint import CheckpointInfo
from dlrm_multiepoch.train.config import OptimConfig, TrainConfig, parse_config
from dlrm_multiepoch.freeze.scheduler import FixedSchedule
from dlrm_multiepoch.train.start_point import OWN_PARTS, check_branch, check_same_schedule
from dlrm_multiepoch.train.trainer import Trainer
from tests.resume_helpers import STEPS_PER_EPOCH, assert_bitwise_equal, resume_config

# Tables keep training in epoch 2 (S freezes them); the over arch as in S.
OTHER_SUFFIX = "tables=train; module:over_arch.*=frozen@[0,1) train@[1,end)"


def _same(a: Trainer, b: Trainer, what: str) -> None:
    assert_bitwise_equal(a.model.state_dict(), b.model.state_dict(), f"{what}: model")
    assert_bitwise_equal(a.optimizer.state_dict(), b.optimizer.state_dict(), f"{what}: optimizer")


def _branches(rank: int, world_size: int, tmp: str) -> None:
    env = init_distributed()
    a = Trainer(resume_config(tmp, "a"), env)
    summary_a = a.train()

    p = Trainer(resume_config(tmp, "p", stop_at_epoch=1), env)
    summary_p = p.train()
    assert "wall_time_s" not in summary_p and [e["epoch"] for e in summary_p["evaluations"]] == [1]
    parent = f"{tmp}/p/checkpoints/step_{STEPS_PER_EPOCH}"

    b1 = Trainer(resume_config(tmp, "b", start_from=parent, resume="auto"), env)
    assert (b1.start.checkpoint.path, b1.start.flag, b1.start.exclude_from_loading) == (parent, "--start_from", OWN_PARTS)
    assert (b1.step, b1.progress.epoch, b1.freeze.global_step) == (10, 1, 10)
    b1.train_epoch(1)  # saves step_12 and step_16, trains to 20, then "dies" before the epoch's evaluation
    b1.logger.close()
    b2 = Trainer(resume_config(tmp, "b", start_from=parent, resume="auto"), env)
    assert (b2.start.checkpoint.path, b2.start.flag, b2.start.exclude_from_loading) == (f"{tmp}/b/checkpoints/step_16", "--resume", ())
    summary_b = b2.train()
    _same(a, b2, "branch with the same schedule, resumed")
    assert summary_b["evaluations"] == summary_a["evaluations"]  # the parent's epoch 1, then its own epoch 2
    assert summary_b["started_from"]["path"] == parent and summary_b["started_from"]["step"] == 10

    # A pause inside an epoch (step 15 of 20, between the step checkpoints 12 and 16): its own evaluation of
    # every split and checkpoint, then --resume auto goes on to A's end, bitwise.
    q1 = Trainer(resume_config(tmp, "q", stop_at_epoch=1.5), env)
    summary_q1 = q1.train()
    assert "wall_time_s" not in summary_q1 and [e["epoch"] for e in summary_q1["evaluations"]] == [1, 1.5]
    assert summary_q1["evaluations"][1]["step"] == 15 and q1.last_checkpoint.endswith("step_15")
    q2 = Trainer(resume_config(tmp, "q", resume="auto"), env)
    assert q2.start.checkpoint.path == f"{tmp}/q/checkpoints/step_15" and not q2.start.is_branch
    summary_q2 = q2.train()
    _same(a, q2, "paused inside epoch 2, resumed")
    assert [e for e in summary_q2["evaluations"] if e["epoch"] != 1.5] == summary_a["evaluations"]

    d = Trainer(resume_config(tmp, "d", start_from=parent, freeze_schedule=OTHER_SUFFIX), env)
    summary_d = d.train()
    e = Trainer(resume_config(tmp, "e", freeze_schedule=OTHER_SUFFIX), env)
    summary_e = e.train()
    _same(d, e, "branch with another suffix vs that schedule from scratch")
    assert summary_d["evaluations"] == summary_e["evaluations"]
    assert summary_d["evaluations"][1] != summary_a["evaluations"][1]  # the suffix changed the training
    if rank == 0:
        assert json.loads(Path(f"{tmp}/d/summary.json").read_text())["wall_time_s"] == summary_d["wall_time_s"]


def test_a_branch_continues_its_parent_bitwise_and_survives_its_own_resume(tmp_path: Path) -> None:
    run_on_ranks(_branches, 2, str(tmp_path))


# -- the consistency rule, on configs alone (no training) ----------------------------------


def _parent_checkpoint(cfg: TrainConfig, step: int = 2 * 10, epoch: int = 2, batch: int = 0) -> CheckpointInfo:
    progress = {"step": step, "epoch": epoch, "batch_in_epoch": batch}
    state = {"config": cfg.to_dict(), "step": step, "parts": {"progress": progress}}
    return CheckpointInfo("runs/p/checkpoints/step_20", state)


def _cfg(**overrides: Any) -> TrainConfig:
    cfg = resume_config("runs", "x", **{"epochs": 3, **overrides})
    cfg.validate()  # as the trainer does before check_branch: the parsed flags
    return cfg


def test_a_branch_may_change_the_schedule_only_after_its_checkpoint() -> None:
    delayed = _parent_checkpoint(_cfg(freeze_schedule="delayed"))  # tables frozen in epochs 1-2 of 3
    check_branch(delayed, _cfg(freeze_schedule="tables=frozen@[0,2) train@[2,end)"), 10, ["t_user"])
    check_branch(delayed, _cfg(freeze_schedule="tables=frozen@[0,2) train@[2,end)", epochs=4), 10, ["t_user"])
    with pytest.raises(ValueError, match=r"at step 10 .*group 'tables' is frozen in the parent.*but trains"):
        check_branch(delayed, _cfg(freeze_schedule="tables=frozen@[0,1) train@[1,end)"), 10, ["t_user"])
    joint = _parent_checkpoint(_cfg(freeze_schedule="joint", epochs=4), step=10, epoch=1)
    check_branch(joint, _cfg(freeze_schedule="early"), 10, ["t_user"])
    reinit = replace(OptimConfig(), reinit="tables@each")
    check_branch(joint, _cfg(freeze_schedule="joint", optim=reinit), 10, ["t_user"])
    later = _parent_checkpoint(_cfg(freeze_schedule="joint"), step=20, epoch=2)
    with pytest.raises(ValueError, match=r"before epoch 2 the parent re-initialised \[\] .*\['t_user'\]"):
        check_branch(later, _cfg(freeze_schedule="joint", optim=reinit), 10, ["t_user"])


def test_a_branch_must_keep_every_other_setting_of_its_parent() -> None:
    parent = _parent_checkpoint(_cfg())
    with pytest.raises(ValueError, match=r"the parent trained with --learning_rate 0.001, this run has 0.01"):
        check_branch(parent, _cfg(optim=replace(OptimConfig(), learning_rate=0.01)), 10, ["t_user"])
    with pytest.raises(ValueError, match=r"--seed 0, this run has 1"):
        check_branch(parent, _cfg(seed=1), 10, ["t_user"])
    decay = replace(OptimConfig(), table_lr_decay="cosine")
    with pytest.raises(ValueError, match=r"--epochs 3 -> 4 with a table LR schedule that follows the run's length"):
        check_branch(_parent_checkpoint(_cfg(optim=decay)), _cfg(optim=decay, epochs=4), 10, ["t_user"])
    check_branch(parent, _cfg(eval_every_n_steps=5, keep_checkpoints=9, stop_at_epoch=3), 10, ["t_user"])


def test_start_from_flags_are_checked_before_any_data_is_read(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for flags, expected in [
        (["--start_from", "x", "--resume", "y"], "--start_from 'x' with --resume 'y': give one checkpoint"),
        (["--start_from", "x", "--freeze_schedule", "auto", "--val_fraction", "0.1"], "cannot start from another run"),
        (["--stop_at_epoch", "4", "--epochs", "3"], "--stop_at_epoch must be in [0, --epochs 3]"),
        (["--stop_at_epoch", "-0.5"], "--stop_at_epoch must be in [0, --epochs 3] (0: no pause), got -0.5"),
        (["--stop_at_epoch", "1", "--no-checkpoint"], "--stop_at_epoch pauses a run to continue it from its checkpoint"),
        (["--start_from", str(tmp_path / "none")], "--start_from '" + str(tmp_path / "none") + "': no such checkpoint"),
    ]:
        with pytest.raises(SystemExit):
            parse_config(flags, check_paths=True)
        assert expected in capsys.readouterr().err


def test_a_resume_keeps_the_schedule_its_checkpoint_saved() -> None:
    # What the freeze part saves is what the config's parsed schedule predicts (no part for joint).
    for text in ["delayed", "early", "frozen", "tables=frozen@[0,1) train@[1,end)", OTHER_SUFFIX]:
        assert FixedSchedule(text, 10, 3).describe() == _cfg(freeze_schedule=text).freeze.saved_schedule
    assert _cfg(freeze_schedule="joint").freeze.saved_schedule is None
    delayed = _parent_checkpoint(_cfg(freeze_schedule="delayed"))
    delayed.state["parts"]["freeze"] = {"schedule": FixedSchedule("delayed", 10, 3).describe()}
    check_same_schedule(delayed, _cfg(freeze_schedule="tables=frozen@[0,end-1) train@[end-1,end)"))  # the same, spelt out
    for other in ["joint", "early"]:
        with pytest.raises(ValueError, match=rf"--resume .*trained with --freeze_schedule 'delayed', this run has '{other}'"):
            check_same_schedule(delayed, _cfg(freeze_schedule=other))
    joint = _parent_checkpoint(_cfg(freeze_schedule="joint"))  # no freeze part saved
    check_same_schedule(joint, _cfg(freeze_schedule="joint"))
    with pytest.raises(ValueError, match=r"trained with --freeze_schedule 'joint', this run has 'delayed'"):
        check_same_schedule(joint, _cfg(freeze_schedule="delayed"))
