"""The loop's per-step hook cost: ``TrainParts`` calling every part vs only the parts that override a hook.

The app's parts (non-finite policy, table-LR schedule, FALR, reinit, freeze schedule,
validator, ...) mostly leave ``step_context`` and ``after_step`` as no-ops; only the
table-LR schedule / gradient accumulation wrap a step and the freeze schedule acts after it.
This times ``with parts.step_context(...): pass; parts.after_step(...)`` for eight parts of
which two override a per-step hook, calling all of them (the loop before 2026-12-02) and
only the overriding ones (``TrainParts`` now), in one process; it prints medians and the ratio.

Usage::

    python benchmarks/bench_part_hooks.py [--steps 20000] [--repeats 7]
"""

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path
from typing import ContextManager

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dlrm_multiepoch.train.part import TrainPart, TrainParts  # noqa: E402


class Wraps(TrainPart):
    def step_context(self, step: int, last_of_epoch: bool) -> ContextManager:
        return contextlib.nullcontext()


class After(TrainPart):
    def after_step(self, step: int) -> None:
        pass


class CallsEveryPart(TrainParts):
    """The loop before: every part's hooks, no-ops included."""

    def step_context(self, step: int, last_of_epoch: bool) -> ContextManager:
        stack = contextlib.ExitStack()
        for part in self.parts:
            stack.enter_context(part.step_context(step, last_of_epoch))
        return stack

    def after_step(self, step: int) -> None:
        for part in self.parts:
            part.after_step(step)


def per_step_us(parts: TrainParts, steps: int) -> float:
    start = time.perf_counter()
    for step in range(steps):
        with parts.step_context(step, last_of_epoch=False):
            pass
        parts.after_step(step + 1)
    return (time.perf_counter() - start) / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    members = [TrainPart(), Wraps(), TrainPart(), TrainPart(), TrainPart(), After(), TrainPart(), TrainPart()]
    every, overriding = CallsEveryPart(members), TrainParts(members)
    old = [per_step_us(every, args.steps) for _ in range(args.repeats)]
    new = [per_step_us(overriding, args.steps) for _ in range(args.repeats)]
    o, n = statistics.median(old), statistics.median(new)
    print(f"8 parts, 2 overriding a per-step hook, {args.steps} steps x {args.repeats} repeats (medians)")
    print(f"  every part:        {o:.2f} us/step")
    print(f"  overriding only:   {n:.2f} us/step")
    print(f"  ratio (old / new): {o / n:.1f}x")


if __name__ == "__main__":
    main()
