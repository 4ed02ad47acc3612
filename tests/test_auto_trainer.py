"""The auto schedule in the training app's Trainer, on 2 gloo ranks and a MovieLens sample.

One deterministic run (A) is the reference; the settings make its validation curve go
through every phase: tables frozen until the validation loss plateaus, trained until it
stops improving, frozen again, stopped; each transition restores the best weights.
Then, against A:

- B sees test labels flipped: the same decisions and bitwise the same final weights
  (the test metrics it reports do change), so decisions never read the test split;
- D resumes A's job from its epoch-1 checkpoint: the same decisions, weights and summary;
- A ends on the best-validation weights: the checkpoint of that evaluation, bitwise,
  and the validation metrics recorded there;
- E runs the semi-synchronous pipeline: exact lookups exactly while the tables are frozen.
"""

import copy
import os
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import torch.distributed.checkpoint as dcp

from dlrm_multiepoch.auto import AutoScheduleConfig
from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.data.load import load_dataset
from dlrm_multiepoch.distributed import init_distributed
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.schedule import FreezeSchedule
from dlrm_multiepoch.testing.ranks import run_on_ranks
from dlrm_multiepoch.train.config import OptimConfig, TrainConfig
from dlrm_multiepoch.train.trainer import Trainer
from tests.resume_helpers import assert_bitwise_equal as _assert_bitwise_equal, scalars as _scalars


def _cfg(tmp: str, run_name: str, **overrides: Any) -> TrainConfig:
    settings: Dict[str, Any] = dict(
        epochs=3, batch_size=256, eval_batch_size=1024, train_eval_rows=500, log_every_n_steps=4,
        progress_bar=False, freeze_schedule="auto", sharding_types="table_wise",
        # Logloss and phases ended by the first plateau: the curve below goes through every phase.
        auto=AutoScheduleConfig(
            auto_evals_per_epoch=4, auto_patience=1, auto_metric="logloss", auto_min_tables_epochs=0.0
        ),
    )  # fmt: skip
    model = ModelConfig(embedding_dim=8, dense_arch_layer_sizes="16,8", over_arch_layer_sizes="16")
    return TrainConfig.from_flags(
        data=DataConfig(dataset="movielens", max_rows=3000, val_fraction=0.2),
        model=model,
        tensorboard_dir=tmp,
        run_name=run_name,
        # Fast learning rates: 8 steps per epoch are enough to plateau and overfit.
        optim=OptimConfig(learning_rate=0.03, embedding_learning_rate=0.5),
        **(settings | overrides),
    )


def _auto_runs(rank: int, world_size: int, tmp: str) -> None:
    env = init_distributed()
    a = Trainer(_cfg(tmp, "a"), env)
    assert (a.steps_per_epoch, a.freeze.eval_every_n_steps) == (8, 2)
    summary_a = a.train()
    decisions = summary_a["auto_decisions"]
    assert [(d["step"], d["transition"], d["best_step"], d["restore_best"]) for d in decisions] == [
        (8, "frozen->joint", 8, False),  # the 1-epoch cap, on the epoch boundary; step 8 is the best
        (10, "joint->dense", 8, True),
        (16, "dense->done", 14, True),
    ]
    assert summary_a["best"]["step"] == 14
    assert summary_a["best"]["schedule"] == "tables=frozen@[0step,8step) train@[8step,10step) frozen@[10step,end)"
    # Stopped at step 16, the end of epoch 2: its evaluation is the last.
    assert [e["step"] for e in summary_a["evaluations"]] == [2, 4, 6, 8, 10, 12, 14, 16]

    # The final weights are the best-validation ones: the checkpoint taken at that
    # evaluation (bitwise) and the validation metrics recorded there.
    at_best = next(e for e in summary_a["evaluations"] if e["step"] == 14)
    assert summary_a["best"]["val"] == at_best["val"]
    final = a.model.state_dict()
    from_disk = copy.deepcopy(final)
    dcp.load({"model": from_disk}, checkpoint_id=f"{tmp}/a/checkpoints/best_step_14")
    _assert_bitwise_equal(final, from_disk, "final weights vs best_step_14")

    # B: test labels flipped. Nothing the schedule does may change.
    data = load_dataset(_cfg(tmp, "b").data, log=lambda _: None)
    test = data.splits["test"].take(np.arange(len(data.splits["test"])))  # in memory, to edit
    test.labels = {task: 1.0 - y for task, y in test.labels.items()}
    data.splits["test"] = test
    b = Trainer(_cfg(tmp, "b"), env, data=data)
    summary_b = b.train()
    assert summary_b["auto_decisions"] == decisions
    _assert_bitwise_equal(final, b.model.state_dict(), "final weights with flipped test labels")
    assert summary_b["best"]["val"] == summary_a["best"]["val"]
    for task in ("like", "love"):  # what B reports on its test split did change
        assert abs(summary_b["best"]["test"][task]["auc"] + summary_a["best"]["test"][task]["auc"] - 1.0) < 1e-6

    # D: A's job dies after epoch 1 and is resumed from that checkpoint (A's later
    # checkpoints and bests are still there, as after a crash); it restores bests saved
    # before the resume (step 8) and after it (step 14).
    d = Trainer(_cfg(tmp, "a", resume=f"{tmp}/a/checkpoints/step_8"), env)
    assert d.freeze.policy.best_step == 8 and d.freeze.policy.phase == "joint"
    summary_d = d.train()
    assert summary_d["auto_decisions"] == decisions
    assert summary_d["best"] == summary_a["best"]
    assert summary_d["evaluations"] == summary_a["evaluations"]
    _assert_bitwise_equal(final, d.model.state_dict(), "final weights after resume")
    if rank == 0:
        # Bests kept: the ones the two kept epoch checkpoints refer to (the current one is epoch 2's).
        expected = ["best_step_14", "best_step_8", "step_16", "step_8"]
        assert sorted(os.listdir(f"{tmp}/a/checkpoints")) == expected

    # E: the semi-synchronous pipeline follows the decisions too: its lookups are exact
    # (no stale rows) exactly while the auto schedule keeps the tables frozen. Default
    # objective (the calibration-free NE) and minimum tables phase.
    few_evals = AutoScheduleConfig(auto_evals_per_epoch=2, auto_patience=1)
    settings = dict(pipeline="semi_sync", log_every_n_steps=1, pipeline_staleness_interval=1, auto=few_evals)
    e = Trainer(_cfg(tmp, "e", **settings), env)
    summary_e = e.train()
    frozen_steps = set()
    for start, end in _frozen_windows(summary_e["best"]["schedule"], e.freeze.policy.total_steps):
        frozen_steps |= set(range(start + 1, end + 1))  # logged at the step count after the step
    if rank == 0:
        stale = dict(_scalars(f"{tmp}/e", "pipeline/stale_fraction"))
        assert stale and {s for s, v in stale.items() if v == 0.0} >= frozen_steps & set(stale)
        assert any(v > 0.0 for s, v in stale.items() if s not in frozen_steps)


def _frozen_windows(schedule: str, total: int) -> List[Tuple[int, int]]:
    """``[start, end)`` step windows of ``tables=frozen@[...)`` in a realised schedule."""
    plan = FreezeSchedule.parse(schedule).resolve(steps_per_epoch=total, num_epochs=1)
    return [(w.start, w.end) for w in plan.windows["tables"] if not w.trains]


def test_auto_schedule_decisions_never_read_test_resume_exactly_and_end_on_best(tmp_path: Path) -> None:
    run_on_ranks(_auto_runs, 2, str(tmp_path))
