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
from typing import ContextManager, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tools.claims import claim  # noqa: E402
from dlrm_multiepoch.part import TrainPart, TrainParts  # noqa: E402


class Wraps(TrainPart):
    def step_context(self, step: int, last_of_epoch: bool) -> ContextManager:
        return contextlib.nullcontext()


class After(TrainPart):
    def after_step(self, step: int) -> None:
        pass


def calling_every_part(parts: List[TrainPart]) -> TrainParts:
    """The loop before: every part's per-step hooks, no-ops included (TrainParts' own loops over all parts)."""
    every = TrainParts(parts)
    every._step_contexts, every._after_steps = list(parts), list(parts)
    return every


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
    every, overriding = calling_every_part(members), TrainParts(members)
    old, new = [], []
    for _ in range(args.repeats):  # interleaved: a load change hits both alike
        old.append(per_step_us(every, args.steps))
        new.append(per_step_us(overriding, args.steps))
    o, n = statistics.median(old), statistics.median(new)
    print(f"8 parts, 2 overriding a per-step hook, {args.steps} steps x {args.repeats} repeats (medians)")
    print(f"  every part:        {o:.2f} us/step")
    print(f"  overriding only:   {n:.2f} us/step")
    print(f"  ratio (old / new): {o / n:.1f}x")
    claim("per-step hooks: calling every part / only the overriding ones", o / n)


if __name__ == "__main__":
    main()
