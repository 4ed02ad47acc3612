"""Freeze-schedule text form, presets, step windows and validation messages."""

import pytest

from dlrm_multiepoch.schedule import PRESETS, Bound, FreezeSchedule, Window


@pytest.mark.parametrize(
    "text",
    [
        "tables=frozen@[0,1) train@[1,2)",
        "tables=frozen@[0,1.5) train@[1.5,end); gate:feature_cross=closed@[1,2)",
        "module:over_arch.*=frozen",
        "table:user=train@[0,300step) frozen@[300step,end-25%); tables=frozen@[0,0.25)",
        "tables=frozen@[end-1,end)",
        *PRESETS.values(),
    ],
)
def test_text_round_trips(text: str) -> None:
    schedule = FreezeSchedule.parse(text)
    assert str(schedule) == text
    assert FreezeSchedule.parse(str(schedule)) == schedule


def test_spaces_aliases_and_presets_in_entries() -> None:
    s = FreezeSchedule.parse(" delayed ;  gate:x = open@[0, 1)  closed@[1, end) ")
    assert str(s) == "tables=frozen@[0,end-1) train@[end-1,end); gate:x=open@[0,1) closed@[1,end)"


def test_python_api_equals_text() -> None:
    api = FreezeSchedule({"tables": [Window.epochs(False, 0, 1.5), Window.epochs(True, 1.5)]})
    assert api == FreezeSchedule.parse("tables=frozen@[0,1.5) train@[1.5,end)")
    assert FreezeSchedule({"tables": [Window.steps(False, 0, 7)]}) == FreezeSchedule.parse("tables=frozen@[0step,7step)")


def test_presets_resolve_to_expected_steps() -> None:
    steps = 4
    delayed = FreezeSchedule.preset("delayed").resolve(steps, 3)
    assert [delayed.trains("tables", s) for s in range(12)] == [False] * 8 + [True] * 4
    early = FreezeSchedule.preset("early").resolve(steps, 2)
    assert [early.trains("tables", s) for s in range(8)] == [True] * 4 + [False] * 4
    assert not any(FreezeSchedule.preset("frozen").resolve(steps, 2).trains("tables", s) for s in range(8))
    assert all(FreezeSchedule.preset("joint").resolve(steps, 2).trains("tables", s) for s in range(8))


def test_fractional_epochs_land_on_exact_steps() -> None:
    # Step s is at epoch s/6: epoch 1.5 is step 9, so steps 0..8 are frozen.
    plan = FreezeSchedule.parse("tables=frozen@[0,1.5)").resolve(6, 2)
    assert [plan.trains("tables", s) for s in range(12)] == [False] * 9 + [True] * 3
    # 1.5 epochs of 5 steps = 7.5: step 7 is at epoch 1.4 (< 1.5, frozen), step 8 at 1.6.
    plan = FreezeSchedule.parse("tables=frozen@[0,1.5)").resolve(5, 2)
    assert [plan.trains("tables", s) for s in range(10)] == [False] * 8 + [True] * 2
    plan = FreezeSchedule.parse("gate:g=closed@[25%,50%)").resolve(10, 2)
    assert [s for s in range(20) if not plan.trains("gate:g", s)] == list(range(5, 10))
    assert plan.state("gate:g", 0) is None


def test_bound_units() -> None:
    assert Bound.parse("end-300step").to_step(100, 1000) == 700
    assert Bound.parse("50%").to_step(100, 1000) == 500
    assert Bound.parse("2.5").to_step(100, 1000) == 250


@pytest.mark.parametrize(
    "text, message",
    [
        ("tables=frozen@[1,0)", "group 'tables' window frozen@[1,0) is empty or inverted"),
        ("tables=frozen@[0,3)", "group 'tables' window frozen@[0,3) reaches beyond the run: steps [0,30) but the run has 20 steps"),
        ("table:user=frozen@[0,1.5) train@[1,2)", "group 'table:user': windows frozen@[0,1.5) and train@[1,2) overlap"),
        ("tables=frozen@[0,1); tables=train", "group 'tables' appears twice"),
        ("towers=frozen", "unknown group 'towers'"),
        ("table:=frozen", "group 'table:' names nothing"),
        ("tables=melted", "group 'tables': state 'melted' must be one of"),
        ("tables=frozen@(0,1]", "group 'tables': cannot parse phases"),
        ("tables=frozen@[0,1x)", "group 'tables': bad window bound '1x'"),
        ("tables", "must be GROUP=PHASE"),
        ("nightly", "must be GROUP=PHASE"),
    ],
)
def test_bad_schedules_name_group_and_window(text: str, message: str) -> None:
    with pytest.raises(ValueError) as e:
        FreezeSchedule.parse(text).resolve(steps_per_epoch=10, num_epochs=2)
    assert message in str(e.value)


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("epochs", [2, 3, 5])
def test_every_schedule_preset_parses_and_resolves(name: str, epochs: int) -> None:
    schedule = FreezeSchedule.preset(name)
    assert FreezeSchedule.parse(str(schedule)) == schedule == FreezeSchedule.parse(name)
    plan = schedule.resolve(steps_per_epoch=4, num_epochs=epochs)
    assert plan.total_steps == 4 * epochs and set(plan.windows) == {"tables"}


def test_unknown_preset() -> None:
    with pytest.raises(ValueError, match="unknown freeze-schedule preset 'late'"):
        FreezeSchedule.preset("late")
