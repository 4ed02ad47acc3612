"""Time several contenders interleaved round by round on the same model, rank 0 reports.

Shared by the step-time benchmarks: each round runs every contender (rotating the
order so none always runs first), a few warm-up steps, a barrier, then ``steps`` timed
steps; wall time and this process's CPU time (which resists other processes' load) are
kept per step and per round.

Example::

    timings = time_interleaved(lambda: pipeline.progress(batches), ["plain", "falr"], enter, leave, rounds=20, steps=40)
    if rank == 0:
        print_timings(timings, ratios={"falr / plain - 1": ("falr", "plain")})
"""

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Sequence, Tuple

import torch.distributed as dist


@dataclass
class Timings:
    """Per contender: every step's times and each round's median, for ``wall`` and ``cpu``."""

    steps: Dict[str, Dict[str, List[float]]] = field(default_factory=lambda: {"wall": {}, "cpu": {}})
    rounds: Dict[str, Dict[str, List[float]]] = field(default_factory=lambda: {"wall": {}, "cpu": {}})


def time_interleaved(
    step: Callable[[], None],
    modes: Sequence[str],
    enter: Callable[[str], None] = lambda mode: None,
    leave: Callable[[str], None] = lambda mode: None,
    rounds: int = 20,
    steps: int = 40,
    warmup: int = 3,
    steps_of: Callable[[str], int] = None,
) -> Timings:
    """Run ``step`` under each mode (``enter``/``leave`` switch modes), interleaved."""
    out = Timings()
    for clock in ("wall", "cpu"):
        for m in modes:
            out.steps[clock][m], out.rounds[clock][m] = [], []
    for r in range(rounds):
        for mode in list(modes[r % len(modes) :]) + list(modes[: r % len(modes)]):
            enter(mode)
            for _ in range(warmup):  # also flushes batches queued under the previous mode
                step()
            if dist.is_initialized():
                dist.barrier()
            wall, cpu = [], []
            for _ in range(steps_of(mode) if steps_of else steps):
                start, start_cpu = time.perf_counter(), time.process_time()
                step()
                wall.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
            leave(mode)
            for clock, values in (("wall", wall), ("cpu", cpu)):
                out.steps[clock][mode].extend(values)
                out.rounds[clock][mode].append(statistics.median(values))
    return out


def _quartiles(values: Sequence[float]) -> Tuple[float, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return q[0], q[2]


def print_timings(
    timings: Timings, ratios: Mapping[str, Tuple[str, str]] = (), percent: bool = True, label: str = "step"
) -> Dict[str, Dict[str, float]]:
    """Median and IQR per contender; for each ``name: (a, b)`` the median over rounds of a/b
    (as ``a/b - 1`` in percent, or as ``a/b`` with ``percent=False``). Returns those medians of
    a/b, ``{clock: {name: median}}``."""
    medians: Dict[str, Dict[str, float]] = {"wall": {}, "cpu": {}}
    for clock in ("wall", "cpu"):
        print(f"[{clock} time per {label}, rank 0]")
        for m, t in timings.steps[clock].items():
            lo, hi = _quartiles(t)
            print(f"  {m:11s} median {statistics.median(t) * 1e3:7.2f} ms  (IQR {lo * 1e3:.2f}-{hi * 1e3:.2f}, {len(t)} steps)")
        for name, (a, b) in dict(ratios).items():
            values = [x / y for x, y in zip(timings.rounds[clock][a], timings.rounds[clock][b])]
            lo, hi = _quartiles(values)
            med = medians[clock][name] = statistics.median(values)
            if percent:
                text = f"{(med - 1) * 100:+.1f}% (IQR {(lo - 1) * 100:+.1f}% to {(hi - 1) * 100:+.1f}%)"
            else:
                text = f"{med:.3f}x (IQR {lo:.3f}x to {hi:.3f}x)"
            print(f"  {name}: median of {len(values)} rounds {text}")
    return medians
