"""Where a schedule search's trained steps went, and the least any rule of a kind could have spent.

Reads real searches (``dlrm-multiepoch search``: ``search.json`` and the branches' run
folders) and prints, per setup and seed, the steps each branch trained under the rule
recorded in ``search.json`` (a cut branch counts up to its cut: steps an earlier rule's
invocation of the same folder trained past it are left out), then the cost each lever
would reach at best on the same records, keeping what the search deployed:

- ``first judgements free``: a branch cut at a fractional rung (a first judgement,
  ``--rung_fraction`` f after its tables and suffix started) costs what it trained up to
  the whole epoch before it, as if f were 0 (no f > 0 does better); with ``delayed cut
  early`` as well, ``delayed`` is cut at E - 1;
- ``delayed cut early``: ``delayed``, when it is not what the search deployed, is cut at
  its first judgement (E - 1 + f) instead of training to its end, as if a comparison
  there had gone against it (no record holds its value there: an oracle bound). Since
  the search judges ``reinit`` on the tables it deploys, it compares the two there, so
  on records of today's rule this lever only changes seeds where ``delayed`` won;
- ``auto shares delayed's frozen epochs``: ``auto`` does not retrain the epochs its tables
  stayed frozen when its frozen phase ended at the cap without restoring earlier weights
  (then those epochs are ``delayed``'s, bitwise); the trainer refuses today to start
  ``auto`` from a checkpoint (it decides from its own validation history since step 0).

Each bound is computed from the steps a branch trained, so it is the best a rule of that
kind can reach on these records, not a replay of one.

Usage::

    python benchmarks/analysis/search_cost_floor.py /work/exp/search2/ml-time /work/exp/search2/ml-random \\
        /work/exp/search2/bx-random
"""

import argparse
import itertools
import json
import math
import os
import sys
from typing import Dict, List, Mapping, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from dlrm_multiepoch.search.candidates import Candidate, candidate_tree  # noqa: E402
from dlrm_multiepoch.search.branches import run_name  # noqa: E402
from dlrm_multiepoch.search.search_json import read_record  # noqa: E402

LEVERS = ("first judgements free", "delayed cut early", "auto shares delayed's frozen epochs")


def step_at(epoch: float, spe: int) -> int:
    """The step a run pauses at after ``epoch`` epochs (the trainer's ``--stop_at_epoch``: round half up)."""
    return math.floor(epoch * spe + 0.5)


def rule_steps(branch: Mapping, spe: int) -> int:
    """Steps a branch trained under the recorded rule: a cut branch up to its cut."""
    trained = int(branch["trained_steps"])
    if branch["status"] != "cut":
        return trained
    return min(trained, step_at(float(branch["cut_at"]), spe) - int(branch["fork"]) * spe)


def auto_shared_epochs(run_dir: str, cap: int) -> int:
    """Epochs of ``auto``'s run that are ``delayed``'s bitwise: its frozen phase ended at the cap, no restore."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        decisions = json.load(f).get("auto_decisions", [])
    start = next((d for d in decisions if d.get("transition", "").startswith("frozen->")), None)
    return cap if start is not None and not start["restore_best"] else 0


def seed_costs(folder: str, seed: str, entry: Mapping, tree: Sequence[Candidate], fraction: float) -> Dict[str, int]:
    """Branch -> steps under the recorded rule, then ``recorded rule`` and each combination of levers -> total steps."""
    spe = int(entry["cost"]["steps_per_epoch"])
    by = {c.name: c for c in tree}
    steps = {n: rule_steps(b, spe) for n, b in entry["branches"].items()}
    deployed = (entry.get("deploy") or {}).get("branch")

    def cost(name: str, levers: Sequence[str]) -> int:
        c, b = by[name], entry["branches"][name]
        f = 0.0 if LEVERS[0] in levers else fraction
        own = steps[name]
        if b["status"] == "cut" and not float(b["cut_at"]).is_integer() and LEVERS[0] in levers:
            own = max(int(float(b["cut_at"])) * spe - c.fork * spe, 0)  # cut at a fractional rung: at f = 0
        if name == "delayed" and deployed != name and LEVERS[1] in levers:
            own = min(own, step_at(c.judged_from(fraction) - fraction + f, spe))
        if c.adaptive and LEVERS[2] in levers:
            shared = auto_shared_epochs(os.path.join(folder, run_name(name, int(seed))), c.tables_from)
            own -= min(shared * spe, own)
        return own

    out = dict(steps)
    out["recorded rule"] = sum(steps.values())
    for k in range(1, len(LEVERS) + 1):
        for combo in itertools.combinations(LEVERS, k):
            out[" + ".join(combo)] = sum(cost(name, combo) for name in steps)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="search folders (each with search.json)")
    args = parser.parse_args()
    rows: List[str] = []
    for folder in args.folders:
        loaded = read_record(folder)
        if loaded.damage:
            print(f"{loaded.damage}: its intact part only", file=sys.stderr)
        record = loaded.record
        tree = [c for c in candidate_tree(int(record["budget"])) if c.name in record["candidates"]]
        fraction = float(record["rung_fraction"])
        setup = os.path.basename(os.path.normpath(folder))
        print(f"\n**{setup}** (rung fraction {fraction:g}, eta {record['eta']})\n")
        print(f"| seed | {' | '.join(c.name for c in tree)} | trained steps | sweep | share | deployed |")
        print(f"|---|{'---|' * len(tree)}---|---|---|---|")
        for seed, entry in sorted(record["seeds"].items()):
            costs = seed_costs(folder, seed, entry, tree, fraction)
            sweep = int(entry["cost"]["sweep_steps"])
            deploy = entry.get("deploy") or {}
            cells = " | ".join(f"{costs[c.name]} ({entry['branches'][c.name]['status']})" for c in tree)
            print(
                f"| {seed} | {cells} | {costs['recorded rule']} | {sweep} | {costs['recorded rule'] / sweep:.1%} | "
                f"{deploy.get('branch')}@{float(deploy.get('epoch', 0)):.2f} |"
            )
            for name, total in costs.items():
                if name not in {c.name for c in tree}:
                    rows.append(f"| {setup} | {seed} | {name} | {total} | {total / sweep:.1%} |")
    print("\n**Least cost per lever** (the same deployed models; share of the sweep of the same candidates)\n")
    print("| setup | seed | rule | trained steps | share |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
