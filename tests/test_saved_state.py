"""Each ``Stateful`` part validates its own state when loaded, and the checkpointer names the checkpoint.

A damaged or mismatched state is refused with a message naming the part and what
disagrees (never a ``KeyError``, never a silent half-load); loaded through the
:class:`Checkpointer`, the message also names the checkpoint folder and the part.
(Frequency-adaptive LR's counters are checked on sharded tables in tests/test_optim_falr.py.)
"""

import json
import math
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict

import pytest
import torch
from torch import nn
from torchrec.optim.keyed import KeyedOptimizerWrapper

from dlrm_multiepoch.auto.config import AutoScheduleConfig
from dlrm_multiepoch.auto.policy import AutoSchedulePolicy
from dlrm_multiepoch.auto.wrapper import PolicySource
from dlrm_multiepoch.config_section import flag_values
from dlrm_multiepoch.freeze import FreezeScheduleWrapper
from dlrm_multiepoch.optim.accumulation import GradientAccumulation
from dlrm_multiepoch.optim.lr import TableLRScheduler
from dlrm_multiepoch.run_files import CheckpointError, state_path
from dlrm_multiepoch.saved_state import StateMismatch, check_count, check_state
from dlrm_multiepoch.train.checkpoint import Checkpointer
from dlrm_multiepoch.train.metrics_logger import MetricsLogger
from dlrm_multiepoch.train.progress import TrainProgress


def _refused(part: Any, state: Any, message: str) -> None:
    """``part.load_state_dict(state)`` raises StateMismatch with exactly ``message``."""
    with pytest.raises(StateMismatch) as caught:
        part.load_state_dict(state)
    assert str(caught.value) == message


def test_check_state_and_check_count_name_the_part_and_field() -> None:
    fields = {"step": int, "wall": float, "name": str, "any": None}
    check_state("p", {"step": 3, "wall": 2, "name": "x", "any": [None]}, fields)  # an int is a float
    with pytest.raises(StateMismatch, match=re.escape("p: the saved state is a list, expected a mapping of ['any', 'name', 'step', 'wall']")):
        check_state("p", [1], fields)
    with pytest.raises(StateMismatch, match=re.escape("p: the saved state has no 'name' (it has ['step', 'wall'])")):
        check_state("p", {"step": 3, "wall": 1.0}, fields)
    with pytest.raises(StateMismatch, match=re.escape("p: the saved 'step' is True, expected int")):
        check_state("p", {"step": True, "wall": 1.0, "name": "x", "any": 0}, fields)
    assert check_count("p", "n", torch.tensor(4)) == 4 and check_count("p", "n", 5.0) == 5
    for bad, why in [(-1, "-1, expected a whole number >= 0"), (1.5, "1.5, expected a whole number >= 0"),
                     (math.inf, "inf, expected a count"), ("3", "'3', expected a count")]:  # fmt: skip
        with pytest.raises(StateMismatch, match=re.escape(f"p: the saved 'n' is {why}")):
            check_count("p", "n", bad)


def test_train_progress_refuses_a_damaged_position_without_loading_any_of_it() -> None:
    saved = asdict(TrainProgress(step=125, epoch=1, batch_in_epoch=5, wall_time_s=12.5, skipped_nonfinite=1))
    progress = TrainProgress()
    _refused(progress, {k: v for k, v in saved.items() if k != "batch_in_epoch"},
             "train progress: the saved state has no 'batch_in_epoch' (it has "
             "['epoch', 'skipped_nonfinite', 'step', 'wall_time_s'])")  # fmt: skip
    _refused(progress, saved | {"epoch": "1"}, "train progress: the saved 'epoch' is '1', expected int")
    _refused(progress, saved | {"step": -3}, "train progress: the saved 'step' is -3, expected a whole number >= 0")
    _refused(progress, saved | {"wall_time_s": None}, "train progress: the saved 'wall_time_s' is None, expected float")
    _refused(progress, saved | {"wall_time_s": -1.0}, "train progress: the saved 'wall_time_s' is -1.0, expected >= 0")
    assert progress == TrainProgress()  # nothing of a refused state was loaded
    progress.load_state_dict(json.loads(json.dumps(saved)))
    assert progress == TrainProgress(step=125, epoch=1, batch_in_epoch=5, wall_time_s=12.5, skipped_nonfinite=1)


def test_the_metrics_summary_refuses_evaluations_without_epoch_or_step(tmp_path: Path) -> None:
    logger = MetricsLogger(str(tmp_path), enabled=False)
    _refused(logger, {"config": {}}, "metrics summary: the saved state has no 'evaluations' (it has ['config'])")
    _refused(logger, {"evaluations": [{"epoch": 1, "step": 8}, {"epoch": 2}]},
             "metrics summary: evaluation 1: the saved state has no 'step' (it has ['epoch']) (of 2 saved evaluations)")  # fmt: skip
    _refused(logger, {"evaluations": [[1, 8]]},
             "metrics summary: evaluation 0: the saved state is a list, expected a mapping of ['epoch', 'step'] "
             "(of 1 saved evaluations)")  # fmt: skip
    assert logger.summary == {"evaluations": []}
    logger.load_state_dict({"evaluations": [{"epoch": 1, "step": 8, "test": {}}], "wall_time_s": 3.0})
    assert logger.summary == {"evaluations": [{"epoch": 1, "step": 8, "test": {}}], "wall_time_s": 3.0}


def _frozen_then_training() -> FreezeScheduleWrapper:
    model = nn.Sequential(nn.Linear(2, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return FreezeScheduleWrapper(model, "module:0=frozen@[0,1) train@[1,end)", 2, 2, optimizer=optimizer)


def test_the_freeze_schedule_refuses_another_schedule_and_a_damaged_step() -> None:
    freeze = _frozen_then_training()
    saved = {"global_step": 3, "schedule": freeze.source.describe(), "source": {}}
    _refused(freeze, {"schedule": "delayed"}, "freeze schedule: the saved state has no 'global_step' (it has ['schedule'])")
    _refused(freeze, saved | {"global_step": -1}, "freeze schedule: the saved 'global_step' is -1, expected a whole number >= 0")
    _refused(freeze, saved | {"schedule": "delayed"},
             "freeze schedule: the checkpoint was trained with freeze schedule 'delayed', this run has "
             "'module:0=frozen@[0,1) train@[1,end)'; pass strict=False to switch schedules on resume")  # fmt: skip
    assert freeze.global_step == 0
    freeze.load_state_dict(saved)
    assert freeze.global_step == 3 and freeze.states() == {"module:0": 1}


def test_the_remedies_refuse_a_damaged_state() -> None:
    model = nn.Linear(2, 2)
    table_lr = TableLRScheduler(model, None, steps_per_epoch=10, num_epochs=2)
    _refused(table_lr, {}, "table LR schedule: the saved state has no 'step' (it has [])")
    _refused(table_lr, {"step": torch.tensor(-1)}, "table LR schedule: the saved 'step' is -1, expected a whole number >= 0")
    table_lr.load_state_dict({"step": torch.tensor(7)})
    assert table_lr.step == 7
    optimizer = KeyedOptimizerWrapper(dict(model.named_parameters()), lambda p: torch.optim.SGD(p, lr=0.1))
    accumulation = GradientAccumulation(model, optimizer, steps=2)
    _refused(accumulation, {"accumulated": torch.tensor(0)},
             "gradient accumulation: the saved state has no 'optimizer_steps' (it has ['accumulated'])")  # fmt: skip
    _refused(accumulation, {"accumulated": torch.tensor(1), "optimizer_steps": torch.tensor(3)},
             "gradient accumulation: the state was saved 1 micro-batch(es) into an accumulation window, whose gradients "
             "are not saved; resume from a checkpoint taken at an optimizer step")  # fmt: skip
    accumulation.load_state_dict({"accumulated": torch.tensor(0), "optimizer_steps": torch.tensor(3)})
    assert accumulation.optimizer_steps == 3


def test_the_automatic_schedule_refuses_a_damaged_or_mismatched_state() -> None:
    config = AutoScheduleConfig(auto_metric="logloss")
    policy = AutoSchedulePolicy(40, 5, ["like"], config)
    saved = policy.state_dict()
    source = PolicySource(AutoSchedulePolicy(40, 5, ["like"], config))
    _refused(source, {"policy": saved}, "automatic schedule: the saved state has no 'decisions' (it has ['policy'])")
    _refused(source, {"policy": {k: v for k, v in saved.items() if k != "best_step"}, "decisions": []},
             "automatic schedule policy: the saved state has no 'best_step' (it has "
             f"{sorted(k for k in saved if k != 'best_step')})")  # fmt: skip
    _refused(source, {"policy": saved | {"phase": None}, "decisions": []},
             "automatic schedule policy: the saved 'phase' is None, expected str")  # fmt: skip
    other = AutoSchedulePolicy(40, 4, ["like"], config)  # another run length
    _refused(other, saved, "automatic schedule policy: the state was saved with other settings (total steps 200 -> 160)")
    source.load_state_dict({"policy": saved, "decisions": []})
    assert source.policy.state_dict() == saved and flag_values(source.policy.config) == saved["config"]


def test_the_checkpointer_names_the_checkpoint_and_the_part_that_refuses_its_state(tmp_path: Path) -> None:
    model = nn.Linear(3, 2)
    optimizer = KeyedOptimizerWrapper(dict(model.named_parameters()), lambda p: torch.optim.SGD(p, lr=0.1))
    parts: Dict[str, Any] = {
        "progress": TrainProgress(step=4, epoch=1),
        "metrics": MetricsLogger(str(tmp_path / "run"), enabled=False),
        "table_lr": TableLRScheduler(model, None, steps_per_epoch=4, num_epochs=2),
    }
    ckpt = Checkpointer(str(tmp_path / "checkpoints"), model, optimizer, parts, log=lambda _: None)
    path = ckpt.save(4, {"config": {}})
    state_file = Path(state_path(path))
    state = json.loads(state_file.read_text())
    del state["parts"]["progress"]["batch_in_epoch"]
    state_file.write_text(json.dumps(state))
    with pytest.raises(CheckpointError) as caught:
        ckpt.load(ckpt.find("auto"))
    assert str(caught.value) == (
        f"checkpoint {path}: part 'progress': train progress: the saved state has no 'batch_in_epoch' "
        "(it has ['epoch', 'skipped_nonfinite', 'step', 'wall_time_s'])"
    )

    class Unchecked:  # a user's part that does not check its state: its KeyError is named too
        def state_dict(self) -> Dict[str, Any]:
            return {"scale": 1.0}

        def load_state_dict(self, state: Dict[str, Any]) -> None:
            self.scale = state["factor"]

    state["parts"]["progress"]["batch_in_epoch"] = 0
    state["parts"]["user"] = {"scale": 1.0}
    state_file.write_text(json.dumps(state))
    parts["user"] = Unchecked()
    with pytest.raises(CheckpointError, match=re.escape(f"checkpoint {path}: part 'user': KeyError 'factor'")):
        ckpt.load(ckpt.find("auto"))
    del parts["user"]
    ckpt.load(ckpt.find("auto"))
    assert parts["progress"] == TrainProgress(step=4, epoch=1) and parts["table_lr"].step == 0
