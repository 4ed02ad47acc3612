"""Run every speed benchmark (``benchmarks/bench_*.py``) at its defaults, one after the other, then a summary.

What ``make bench`` runs. Each benchmark's output streams as it runs; at the end comes one
line per benchmark: its name, the ratios it claims (its :func:`~benchmarks.tools.claims.claim`
lines, contender against baseline) and its wall time. The defaults are quick sizes; the
commands in docs/BENCHMARKS.md give the sizes of the documented figures. Exits 1 if a
benchmark failed (the summary names it).

Usage::

    python benchmarks/tools/run_all.py                          # all of them
    python benchmarks/tools/run_all.py bench_freeze bench_falr  # some
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List, NamedTuple, Tuple

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS.parent))

from benchmarks.tools.claims import read_claims  # noqa: E402


class Outcome(NamedTuple):
    name: str
    returncode: int
    claims: List[Tuple[str, str]]
    seconds: float


def run(script: Path) -> Outcome:
    """Run ``script`` without arguments, echoing its output, and gather its claims."""
    print(f"== benchmarks/{script.name}", flush=True)
    start = time.perf_counter()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    lines = []
    with subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    ) as proc:
        for line in proc.stdout:  # type: ignore[union-attr]
            print(line, end="", flush=True)
            lines.append(line)
    return Outcome(script.name, proc.returncode, read_claims(lines), time.perf_counter() - start)


def summary(outcomes: List[Outcome]) -> str:
    total = sum(o.seconds for o in outcomes)
    width = max(len(o.name) for o in outcomes)
    rows = [f"make bench: {len(outcomes)} benchmarks, {total / 60:.1f} min"]
    for o in outcomes:
        said = "; ".join(f"{ratio} {what}" for what, ratio in o.claims) or "no claim printed"
        if o.returncode:
            said = f"FAILED (exit {o.returncode}); {said}"
        rows.append(f"  {o.name:<{width}}  {o.seconds:6.0f} s  {said}")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="benchmarks to run, e.g. bench_freeze (default: every bench_*.py)")
    args = parser.parse_args()
    scripts = sorted(BENCHMARKS.glob("bench_*.py"))
    if args.names:
        known = {s.stem: s for s in scripts}
        unknown = [n for n in args.names if n.removesuffix(".py") not in known]
        if unknown:
            parser.error(f"no benchmarks/{unknown[0]}.py; benchmarks: {', '.join(known)}")
        scripts = [known[n.removesuffix(".py")] for n in args.names]
    outcomes = [run(script) for script in scripts]
    print(summary(outcomes))
    return 1 if any(o.returncode for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
