"""Are two sweeps' runs bitwise the same model? Compares every run's summary.json evaluations exactly.

Used to check that a refactor leaves every preset's results unchanged: sweep the same
strategies and flags with the old and the new code into two folders, then

    python benchmarks/analysis/same_evaluations.py OLD_EXPERIMENT_DIR NEW_EXPERIMENT_DIR

prints one line per run (equal, or the last test metrics of both) and exits 1 on any
difference or missing run.
"""

import argparse
import json
import os
import sys
from typing import Any, List


def evaluations(run_dir: str) -> List[Any]:
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)["evaluations"]


def main(old: str, new: str) -> int:
    different = 0
    for run in sorted(os.listdir(old)):
        if not os.path.exists(os.path.join(old, run, "summary.json")):
            continue
        if not os.path.exists(os.path.join(new, run, "summary.json")):
            print(f"{run}: missing in {new}")
            different += 1
            continue
        a, b = evaluations(os.path.join(old, run)), evaluations(os.path.join(new, run))
        if a == b:
            print(f"{run}: bitwise equal ({len(a)} evaluations)")
        else:
            print(f"{run}: DIFFERENT; last test: {a[-1].get('test')} vs {b[-1].get('test')}")
            different += 1
    return 1 if different else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", help="the experiment folder swept with the old code")
    parser.add_argument("new", help="the same sweep with the new code")
    args = parser.parse_args()
    sys.exit(main(args.old, args.new))
