"""TrainParts: each hook in the parts' order, step contexts nested first-outermost, no-op parts never called, and
the hook between backward and the optimizer step (``wrap_optimizer``)."""

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


class HoldOddSteps(TrainPart):
    """Acts on the gradients before every step (records their sum) and holds every first of two."""

    def __init__(self, params: list, seen: List[float]) -> None:
        self.params, self.seen, self.calls = params, seen, 0

    def before_optimizer_step(self) -> bool:
        self.seen.append(float(sum(p.grad.sum() for p in self.params)))
        self.calls += 1
        return self.calls % 2 == 0


def test_a_part_acts_between_backward_and_step_and_a_held_step_keeps_its_gradients():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1, bias=False)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    assert TrainParts([CountsNoOps()]).wrap_optimizer(sgd) is sgd  # no part acts on gradients: the optimizer itself
    seen: List[float] = []
    stepped = TrainParts([CountsNoOps(), HoldOddSteps(list(model.parameters()), seen)]).wrap_optimizer(sgd)
    x = torch.randn(4, 3)
    start = model.weight.detach().clone()
    grads = []
    for _ in range(2):  # what a TorchRec pipeline does per progress(): zero_grad, forward, backward, step
        stepped.zero_grad()
        model(x).sum().backward()
        grads.append(model.weight.grad.clone())
        stepped.step()
        if len(grads) == 1:
            assert torch.equal(model.weight, start)  # held: no update
    # The held step's gradients stayed (zero_grad waited): the second backward added to them, then one step.
    torch.testing.assert_close(grads[1], 2 * grads[0])
    assert seen == [float(grads[0].sum()), float(grads[1].sum())]
    assert torch.equal(model.weight.detach(), start.add(grads[1], alpha=-0.1))  # SGD's one update
