"""Replay the schedule search's pruning rules offline on recorded runs: cost and deployed test AUC per rule.

The search is deterministic: a branch trained from its parent's checkpoint reproduces the
from-scratch run of its schedule (checked to the last digit), so a fixed-schedule sweep's
runs (``dlrm-multiepoch sweep``, folders ``<strategy>-s<seed>``) stand for the search's
branches. This script applies :mod:`dlrm_multiepoch.search.pruning` (the search's own
functions) to their validation curves and reports, per rule and seed, what the search
would deploy (its test AUC, never used to decide) and the epochs it would train against
a sweep of the same candidates.

What the recorded runs allow: ``joint`` with validation every 0.1 epoch (its value at any
rung), ``auto`` (its best), ``delayed``, ``reinit``, ``early``, ``window@1`` per whole epoch. A
branch's value at a fractional rung (``early``, ``reinit``, ``window@1`` at 1 + f, ``delayed``
and ``reinit`` at 2 + f) is not recorded: where a rule needs one, every outcome of that
comparison is replayed and the range is reported (``min..max``). A setup may be several
sweep folders joined by commas (the first holding a candidate's run is read); a candidate
swept in none of them is left out, with its branches.

Usage::

    python benchmarks/analysis/search_rules_sim.py /work/exp/valmetric/ml-time,/work/exp/s3/ml-time \\
        /work/exp/valmetric/ml-random,/work/exp/s3/ml-random /work/exp/valmetric/bx-random,/work/exp/s3/bx-random
"""

import argparse
import itertools
import json
import math
import sys
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dlrm_multiepoch.search.candidates import Candidate, candidate_tree  # noqa: E402
from dlrm_multiepoch.search.pruning import Curve, choose, compared_at, objective, prune_rung, rung_points  # noqa: E402

NAMES = {"joint": "joint", "delayed": "delayed", "auto": "auto-cal", "early": "early", "reinit": "reinit",
         "window@1": "window@1"}  # fmt: skip
BUDGET = 3


def load_seed(folders: List[Path], seed: int, metric: str) -> Optional[Dict[str, dict]]:
    """Candidate -> {"values": point -> objective, "test": point -> (like, love), "best": ..., "end": last epoch}."""
    out = {}
    for cand, run in NAMES.items():
        path = next((p for p in (f / f"{run}-s{seed}" / "summary.json" for f in folders) if p.is_file()), None)
        if path is None:
            continue
        s = json.loads(path.read_text())
        values, test = {}, {}
        for e in s["evaluations"]:
            if "val" not in e:
                continue
            ep = round(float(e["epoch"]), 6)
            values[ep] = objective(e["val"], metric, {})
            if "test" in e:
                test[ep] = tuple(e["test"][t]["auc"] for t in ("like", "love"))
        best = None
        if "best" in s:
            best = (float(s["best"]["epoch"]), objective(s["best"]["val"], metric, {}),
                    tuple(s["best"]["test"][t]["auc"] for t in ("like", "love")))  # fmt: skip
        out[cand] = {"values": values, "test": test, "best": best, "end": max(values) if values else 0}
    return out if {"joint", "delayed", "auto"} <= set(out) else None


def value_at(run: dict, point: float, steps: int) -> Optional[float]:
    """The recorded evaluation within half a step of ``point`` (None: not recorded)."""
    for ep, v in run["values"].items():
        if abs(ep - point) <= 0.5 / steps + 1e-9:
            return v
    return None


def simulate(
    runs: Dict[str, dict],
    tree: List[Candidate],
    fraction: float,
    eta: int,
    steps: int,
    pick: Dict[float, Dict[int, str]],
):
    """One search (``eta`` 0: nothing cut); ``pick``: rung -> cohort -> the name that goes on where the
    comparison is not recorded.

    Returns (deployed (branch, epoch, test AUCs), epochs trained, whether the outcome needed a pick).
    """
    live = [c for c in tree]
    by = {c.name: c for c in tree}
    reached: Dict[str, float] = {c.name: 0.0 for c in tree}
    ended: Dict[str, float] = {}
    guessed = False
    for point in rung_points(tree, fraction):
        if point >= BUDGET + 1:
            break
        compared = compared_at(point, [c for c in live if c.name not in ended or ended[c.name] >= point], fraction)
        if not compared:
            continue
        curves: Dict[str, Curve] = {}
        missing: Dict[int, List[str]] = {}
        for c in compared:
            reached[c.name] = max(reached[c.name], point)
            v = value_at(runs[c.name], point, steps)
            if c.adaptive and runs[c.name]["end"] < point:  # auto stopped itself before the rung
                ended[c.name] = runs[c.name]["end"]
            if v is None:
                missing.setdefault(c.tables_start(point), []).append(c.name)
                v = math.nan
            curves[c.name] = Curve(
                {point: v, **{e: x for e, x in runs[c.name]["values"].items() if float(e).is_integer()}}
            )
        if missing:  # not recorded: the pick decides the cohort
            guessed = True
            for cohort, names in missing.items():
                members = [c.name for c in compared if c.tables_start(point) == cohort]
                winner = pick.get(point, {}).get(cohort, members[0])
                for n in members:
                    curves[n].values[point] = 1.0 if n == winner else -1.0
        cuts = prune_rung(point, live, curves, eta, fraction) if eta else {}
        live = [c for c in live if c.name not in cuts]
    for c in live:  # the survivors train to their ends (auto: where it stopped itself)
        reached[c.name] = (
            runs[c.name]["end"] if c.adaptive else min(c.epochs, BUDGET) if c.name == "joint" else c.epochs
        )
        if c.name == "joint" and c.epochs > BUDGET and _rising(runs["joint"], BUDGET):
            reached[c.name] = c.epochs  # the 4th epoch (not recorded: it cannot be deployed here)
    final = {c.name for c in live}
    curves = {}
    for c in tree:
        whole = {e: x for e, x in runs[c.name]["values"].items() if float(e).is_integer() and e <= reached[c.name]}
        if not c.any_epoch and c.name not in final:
            whole = {e: x for e, x in whole.items() if e < c.epochs}
        curves[c.name] = Curve(whole, best=runs[c.name]["best"][:2] if c.adaptive and c.name in final else None)
    choice = choose(tree, curves)
    run = runs[choice.branch]
    test = run["best"][2] if by[choice.branch].adaptive else run["test"][round(float(choice.epoch), 6)]
    own = sum(
        reached[c.name] - (c.fork if c.parent else 0) for c in tree if reached[c.name] > (c.fork if c.parent else 0)
    )
    return (choice.branch, choice.epoch, test), own, guessed


def _rising(run: dict, epoch: int) -> bool:
    return run["values"].get(epoch, -math.inf) >= max(
        v for e, v in run["values"].items() if float(e).is_integer() and e < epoch
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="per setup: its sweep folder(s), joined by commas")
    parser.add_argument("--metric", default="cal_ne")
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()
    rules = [("whole epochs (f=1), eta 3", 1.0, 3), ("f=0.5, cohorts, eta 3", 0.5, 3), ("f=0.3, cohorts, eta 3", 0.3, 3),
             ("f=0.3, cohorts, eta 2", 0.3, 2), ("no pruning (sweep + choose)", 1.0, 0)]  # fmt: skip
    for setup in args.folders:
        folders = [Path(f) for f in setup.split(",")]
        print(f"\n**{folders[0].name}** (metric {args.metric})\n")
        print("| rule | seed | deploys | test AUC like / love | epochs trained (of the sweep) | share |")
        print("|---|---|---|---|---|---|")
        for label, fraction, eta in rules:
            tree = candidate_tree(BUDGET)
            likes, loves, shares = [], [], []
            for seed in (int(s) for s in args.seeds.split(",")):
                runs = load_seed(folders, seed, args.metric)
                if runs is None:
                    continue
                present = [c for c in tree if c.name in runs and (c.parent is None or c.parent in runs)]
                steps = next(round(e["step"] / e["epoch"]) for e in json.loads(
                    (folders[0] / f"delayed-s{seed}" / "summary.json").read_text())["evaluations"])  # fmt: skip
                outcomes = []
                rungs = [p for p in rung_points(present, fraction) if not float(p).is_integer()]
                per_rung = []  # at each fractional rung, every way its cohorts' comparisons can go
                for p in rungs:
                    cohorts = sorted({c.tables_start(p) for c in present})
                    per_rung.append([dict(zip(cohorts, combo)) for combo in itertools.product(
                        *[[c.name for c in present if c.tables_start(p) == k] for k in cohorts])])  # fmt: skip
                for combo in itertools.product(*per_rung) if rungs else [()]:
                    outcomes.append(simulate(runs, present, fraction, eta, steps, dict(zip(rungs, combo))))
                uniq = {(o[0][0], round(float(o[0][1]), 2), o[0][2], o[1]) for o in outcomes}
                sweep = sum(c.epochs for c in present)
                deploys = " / ".join(sorted({f"{b}@{e:g}" for b, e, _, _ in uniq}))
                like = [t[0] for _, _, t, _ in uniq]
                love = [t[1] for _, _, t, _ in uniq]
                cost = [o for *_, o in uniq]
                guessed = any(o[2] for o in outcomes)
                rng = lambda xs: f"{min(xs):.4f}" if max(xs) - min(xs) < 5e-5 else f"{min(xs):.4f}..{max(xs):.4f}"  # noqa: E731
                print(
                    f"| {label} | {seed}{' (picks)' if guessed and len(uniq) > 1 else ''} | {deploys} | {rng(like)} / "
                    f"{rng(love)} | {min(cost):.1f}..{max(cost):.1f} of {sweep} | {min(cost) / sweep:.0%}..{max(cost) / sweep:.0%} |"
                )
                likes.append(np.mean(like)), loves.append(np.mean(love)), shares.append(np.mean(cost) / sweep)
            if likes:
                print(
                    f"| {label} | mean | | {np.mean(likes):.4f} ± {np.std(likes):.4f} / {np.mean(loves):.4f} ± "
                    f"{np.std(loves):.4f} | | {np.mean(shares):.0%} |"
                )


if __name__ == "__main__":
    main()
