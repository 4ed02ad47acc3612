"""AutoSchedulePolicy on scripted validation curves: exact transitions at exact steps."""

import json
import math
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

from dlrm_multiepoch.auto.config import AutoScheduleConfig, parse_task_weights
from dlrm_multiepoch.auto.policy import (
    DENSE,
    DONE,
    FROZEN,
    JOINT,
    AutoSchedulePolicy,
    Decision,
)

EVERY = 10  # scripted evaluations every 10 steps


def val(logloss: float, auc: float = 0.7) -> Dict[str, Dict[str, float]]:
    return {"like": {"logloss": logloss, "auc": auc, "ne": logloss / 0.69}}


def run(policy: AutoSchedulePolicy, curve: Sequence[float], start: int = EVERY) -> List[Decision]:
    decisions = []
    for i, value in enumerate(curve):
        decisions.append(policy.observe(start + i * EVERY, val(value)))
        if decisions[-1].stop:
            break
    return decisions


def summary(decisions: Sequence[Decision]) -> List[Tuple[int, str, str, bool, bool, bool]]:
    return [(d.step, d.phase, d.transition, d.save_best, d.restore_best, d.stop) for d in decisions]


def cfg(**kw) -> AutoScheduleConfig:
    # The scripted curves are logloss, and their phases may end within one epoch.
    base = dict(
        auto_patience=2, auto_min_improvement=0.01, auto_frozen_cap=0.5, auto_metric="logloss", auto_min_tables_epochs=0.0
    )
    return AutoScheduleConfig(**(base | kw))


# Validation logloss at steps 10, 20, ...: phase 1 plateaus, phase 2 improves then
# overfits, phase 3 (tables frozen again) improves a little, then plateaus.
CURVE = [0.70, 0.65, 0.648, 0.649, 0.60, 0.58, 0.59, 0.61, 0.575, 0.579, 0.5]


def test_three_phases_on_a_scripted_curve() -> None:
    policy = AutoSchedulePolicy(40, 5, ["like"], cfg())  # epochs of 40 steps: the plateau at 40 is on a boundary
    decisions = run(policy, CURVE)
    assert summary(decisions) == [
        (10, FROZEN, "", True, False, False),
        (20, FROZEN, "", True, False, False),
        # 0.648 is a new best (saved) but not 1% better than 0.65: first stale evaluation.
        (30, FROZEN, "", True, False, False),
        # Second stale evaluation: plateau, on an epoch boundary; phase 2 starts from the best weights (step 30).
        (40, JOINT, "frozen->joint", False, True, False),
        (50, JOINT, "", True, False, False),
        (60, JOINT, "", True, False, False),
        (70, JOINT, "", False, False, False),
        (80, DENSE, "joint->dense", False, True, False),
        # Phase 3 is judged against the restored best (0.58): 0.575 is a new best but < 1%.
        (90, DENSE, "", True, False, False),
        (100, DONE, "dense->done", False, True, True),
    ]
    assert [d.best_step for d in decisions] == [10, 20, 30, 30, 50, 60, 60, 60, 90, 90]
    assert decisions[-1].best_objective == -0.575 and policy.best_step == 90
    assert policy.phase_history == [[0, FROZEN], [40, JOINT], [80, DENSE], [100, DONE]]
    # The reasons carry the numbers that triggered them.
    assert decisions[3].reason == (
        "validation logloss plateaued in phase frozen: 2 evaluations without a 0.01 relative improvement on "
        "0.6500 (since: 0.6480, 0.6490) at step 40; tables start training at the epoch boundary"
    )
    assert "on 0.5800 (since: 0.5900, 0.6100); tables frozen again" in decisions[7].reason
    assert decisions[-1].reason.endswith("(since: 0.5750, 0.5790); run stopped")
    assert all(d.reason == "" for d in decisions if not d.transition)
    with pytest.raises(ValueError, match="stopped the run at step 100"):
        policy.observe(110, val(0.5))


def test_tables_start_at_the_epoch_boundary_after_a_plateau() -> None:
    policy = AutoSchedulePolicy(60, 4, ["like"], cfg())
    # Plateau at step 40 (0.649 and 0.648 are not 1% better than 0.65); the tables wait for
    # the boundary at 60, even though 50 improves: phase 1 is over once it plateaued.
    decisions = run(policy, [0.70, 0.65, 0.649, 0.648, 0.60, 0.59, 0.58])
    assert summary(decisions) == [
        (10, FROZEN, "", True, False, False),
        (20, FROZEN, "", True, False, False),
        (30, FROZEN, "", True, False, False),
        (40, FROZEN, "", True, False, False),
        (50, FROZEN, "", True, False, False),
        (60, JOINT, "frozen->joint", True, False, False),
        (70, JOINT, "", True, False, False),
    ]
    assert decisions[5].reason.endswith("(since: 0.6490, 0.6480) at step 40; tables start training at the epoch boundary")
    # A cap below one epoch (0.2 of 4 epochs) means no frozen phase at all.
    assert AutoSchedulePolicy(60, 4, ["like"], cfg(auto_frozen_cap=0.2)).phase == JOINT


def test_cap_ends_phase_one_and_stop_ends_after_the_tables() -> None:
    # Still improving at the cap (0.3 of 10 epochs of 20 steps = step 60): the tables start there.
    policy = AutoSchedulePolicy(20, 10, ["like"], cfg(auto_frozen_cap=0.3, auto_after_tables="stop"))
    decisions = run(policy, [0.70, 0.65, 0.60, 0.55, 0.50, 0.45, 0.40, 0.41, 0.42, 0.3])
    assert summary(decisions)[4:] == [
        (50, FROZEN, "", True, False, False),
        (60, JOINT, "frozen->joint", True, False, False),  # the current weights are the best: no restore
        (70, JOINT, "", True, False, False),
        (80, JOINT, "", False, False, False),
        (90, DONE, "joint->done", False, True, True),
    ]
    assert decisions[5].reason == (
        "tables frozen for the cap: step 60 >= 0.3 of the budget, rounded down to whole epochs (60 steps)"
    )


def test_zero_cap_is_joint_training_with_early_stopping() -> None:
    policy = AutoSchedulePolicy(10, 10, ["like"], cfg(auto_frozen_cap=0.0, auto_after_tables="stop"))
    assert policy.phase == JOINT and policy.phase_history == [[0, JOINT]]
    decisions = run(policy, [0.6, 0.5, 0.52, 0.51, 0.4])
    assert summary(decisions) == [
        (10, JOINT, "", True, False, False),
        (20, JOINT, "", True, False, False),
        (30, JOINT, "", False, False, False),
        (40, DONE, "joint->done", False, True, True),
    ]


def test_auc_objective_weighted_over_tasks_and_nan_never_improves() -> None:
    policy = AutoSchedulePolicy(
        10, 10, ["like", "love"], cfg(auto_metric="auc", auto_task_weights="like:1,love:3", auto_frozen_cap=0.0)
    )
    metrics = {"like": {"auc": 0.70, "logloss": 1.0}, "love": {"auc": 0.80, "logloss": 2.0}}
    assert policy.objective(metrics) == pytest.approx((0.70 + 3 * 0.80) / 4)
    first = policy.observe(10, metrics)
    assert first.save_best and first.objective == pytest.approx(0.775)
    nan = {"like": {"auc": float("nan")}, "love": {"auc": 0.9}}
    second = policy.observe(20, nan)
    assert math.isnan(second.objective) and not second.save_best and second.best_step == 10
    third = policy.observe(30, nan)
    assert third.stop is False and third.transition == "joint->dense" and third.restore_best
    # Logloss counts lower-is-better: a higher logloss is worse.
    ll = AutoSchedulePolicy(10, 10, ["like"], cfg())
    assert ll.objective(val(0.5)) > ll.objective(val(0.6))


def test_gate_closes_when_the_train_validation_gap_grows() -> None:
    policy = AutoSchedulePolicy(
        20, 10, ["like"], cfg(auto_frozen_cap=0.0, auto_gate="feature_cross", auto_gate_gap=0.2, auto_patience=3)
    )
    # Relative gap (val - train) / val in logloss: 0.0, 0.1, 0.25 (grown by 0.25 > 0.2).
    steps = [(10, 0.60, 0.60), (20, 0.55, 0.495), (30, 0.54, 0.405), (40, 0.56, 0.3)]
    decisions = [policy.observe(s, val(v), train=val(t)) for s, v, t in steps]
    assert [d.gates for d in decisions] == [{}, {}, {"feature_cross": False}, {}]
    assert decisions[2].phase == JOINT and decisions[2].transition == ""
    assert decisions[2].reason == "train/validation gap grew from 0.0000 to 0.2500 (> +0.2); gate feature_cross closed"
    assert policy.gate_history == [[30, "feature_cross", False]] and policy.gates == {"feature_cross": False}
    with pytest.raises(ValueError, match="--auto_gate feature_cross: the policy needs train-sample metrics"):
        AutoSchedulePolicy(10, 10, ["like"], cfg(auto_frozen_cap=0.0, auto_gate="feature_cross")).observe(10, val(0.5))


def test_resumed_policy_makes_the_same_decisions() -> None:
    config = cfg(auto_gate="feature_cross")
    reference = AutoSchedulePolicy(40, 5, ["like"], config)
    curve: List[Tuple[float, Optional[float]]] = [(v, v * 0.9 - 0.01 * i) for i, v in enumerate(CURVE)]

    def feed(policy: AutoSchedulePolicy, part) -> List[dict]:
        out = []
        for i, (v, t) in part:
            d = policy.observe(EVERY * (i + 1), val(v), train=val(t))
            out.append(d.to_dict())
            if d.stop:
                break
        return out

    expected = feed(reference, list(enumerate(curve)))
    for cut in range(1, len(expected)):
        first = AutoSchedulePolicy(40, 5, ["like"], config)
        got = feed(first, list(enumerate(curve))[:cut])
        saved = json.loads(json.dumps(first.state_dict()))  # what a checkpoint stores
        resumed = AutoSchedulePolicy(40, 5, ["like"], config)
        resumed.load_state_dict(saved)
        got += feed(resumed, list(enumerate(curve))[cut:])
        assert got == expected, cut
    with pytest.raises(ValueError, match=r"other settings \(auto_patience\)"):
        AutoSchedulePolicy(40, 5, ["like"], cfg(auto_gate="feature_cross", auto_patience=5)).load_state_dict(saved)


def test_bad_settings_name_their_flag() -> None:
    for kw, flag in [
        (dict(auto_patience=0), "--auto_patience"),
        (dict(auto_frozen_cap=1.5), "--auto_frozen_cap"),
        (dict(auto_after_tables="continue"), "--auto_after_tables"),
        (dict(auto_metric="accuracy"), "--auto_metric"),
        (dict(auto_min_improvement=float("nan")), "--auto_min_improvement"),
        (dict(auto_evals_per_epoch=0), "--auto_evals_per_epoch"),
        (dict(auto_min_tables_epochs=-1.0), "--auto_min_tables_epochs"),
    ]:
        with pytest.raises(ValueError, match=flag):
            AutoSchedulePolicy(10, 10, ["like"], cfg(**kw))
    with pytest.raises(ValueError, match=r"--auto_task_weights: unknown task 'click'; tasks: \['like'\]"):
        AutoSchedulePolicy(10, 10, ["like"], cfg(auto_task_weights="click:1"))  # the data's tasks: known here
    with pytest.raises(ValueError, match="must be TASK:WEIGHT"):
        parse_task_weights("like=1")
    policy = AutoSchedulePolicy(10, 10, ["like"], cfg())
    policy.observe(10, val(0.5))
    with pytest.raises(ValueError, match="must increase: got 10 after 10"):
        policy.observe(10, val(0.5))


def test_tables_phase_lasts_one_whole_pass_before_a_plateau_ends_it() -> None:
    # Joint training with early stopping, epochs of 60 steps: validation is flat at steps 30-40
    # (within the tables' first pass) and improves again at 60.
    curve = [0.60, 0.55, 0.56, 0.57, 0.58, 0.50, 0.51, 0.52]
    joint_stop = dict(auto_frozen_cap=0.0, auto_after_tables="stop")
    first = run(AutoSchedulePolicy(60, 5, ["like"], cfg(**joint_stop)), curve)
    assert [(d.step, d.transition, d.best_step) for d in first if d.transition] == [(40, "joint->done", 20)]
    whole = run(AutoSchedulePolicy(60, 5, ["like"], cfg(**joint_stop, auto_min_tables_epochs=1.0)), curve)
    assert [(d.step, d.transition, d.best_step, d.restore_best) for d in whole if d.transition] == [
        (80, "joint->done", 60, True)
    ]
    # After a frozen epoch (tables start at step 40 of 40-step epochs) the pass ends at step 80:
    # the plateau at 70 waits for it and, still flat there, ends the phase at 80.
    frozen_then_joint = [0.70, 0.69, 0.69, 0.69, 0.55, 0.56, 0.57, 0.58, 0.50, 0.49]
    policy = AutoSchedulePolicy(40, 5, ["like"], cfg(auto_frozen_cap=0.2, auto_min_tables_epochs=1.0))
    got = run(policy, frozen_then_joint)
    assert [(d.step, d.transition) for d in got if d.transition] == [(40, "frozen->joint"), (80, "joint->dense")]
    assert "3 evaluations without" in got[7].reason and got[7].restore_best and got[7].best_step == 50
    early = run(AutoSchedulePolicy(40, 5, ["like"], cfg(auto_frozen_cap=0.2)), frozen_then_joint)
    assert [(d.step, d.transition) for d in early if d.transition][:2] == [(40, "frozen->joint"), (70, "joint->dense")]


def test_default_objective_is_the_calibration_free_ne() -> None:
    config = AutoScheduleConfig()
    assert (config.auto_metric, config.auto_min_tables_epochs) == ("cal_ne", 1.0)
    policy = AutoSchedulePolicy(10, 3, ["like", "love"], config)
    metrics = {"like": {"cal_ne": 0.90, "logloss": 0.6}, "love": {"cal_ne": 0.80, "logloss": 0.4}}
    assert policy.objective(metrics) == pytest.approx(-0.85)  # lower NE is better: negated
    weighted = AutoSchedulePolicy(10, 3, ["like", "love"], AutoScheduleConfig(auto_task_weights="like:3,love:1"))
    assert weighted.objective(metrics) == pytest.approx(-(3 * 0.90 + 0.80) / 4)
