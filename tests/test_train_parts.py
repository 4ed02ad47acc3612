"""TrainParts: each hook in the parts' order, step contexts nested first-outermost, no-op parts never called."""

import contextlib
from typing import List

from dlrm_multiepoch.part import TrainPart, TrainParts, overrides


class Recorder(TrainPart):
    def __init__(self, name: str, calls: List[str]) -> None:
        self.name, self.calls = name, calls

    @contextlib.contextmanager
    def step_context(self, step: int, last_of_epoch: bool):
        self.calls.append(f"enter {self.name} {step}")
        yield
        self.calls.append(f"exit {self.name} {step}")

    def after_step(self, step: int) -> None:
        self.calls.append(f"after {self.name} {step}")


class CountsNoOps(TrainPart):
    """A part that overrides no hook (TrainPart's no-ops)."""


def test_parts_run_in_order_and_nest_first_outermost():
    calls: List[str] = []
    parts = TrainParts([Recorder("a", calls), CountsNoOps(), Recorder("b", calls)])
    with parts.step_context(0, last_of_epoch=False):
        calls.append("step")
    parts.after_step(1)
    assert calls == ["enter a 0", "enter b 0", "step", "exit b 0", "exit a 0", "after a 1", "after b 1"]


def test_only_overriding_parts_are_called_per_step():
    calls: List[str] = []
    only = Recorder("only", calls)
    parts = TrainParts([CountsNoOps(), only, CountsNoOps()])
    assert [overrides(p, "after_step") for p in parts.parts] == [False, True, False]
    assert parts._step_contexts == [only] and parts._after_steps == [only]
    with parts.step_context(3, last_of_epoch=True):
        pass
    assert calls == ["enter only 3", "exit only 3"]
    assert isinstance(TrainParts([CountsNoOps()]).step_context(0, False), contextlib.nullcontext)
    nested = TrainParts([TrainParts([only])])  # a TrainParts is a part that overrides every hook
    nested.after_step(4)
    assert calls[-1] == "after only 4"
