"""The schedule search's deployed model against the fixed presets, per task: test AUC mean ± seed std, and cost.

Reads a search folder (``dlrm-multiepoch search``: ``search.json`` and its branches) and
sweep folders of the same setup (``dlrm-multiepoch sweep``: ``<strategy>-s<seed>/summary.json``;
comma-separated, the first that has a finished run wins; ``--alias auto=auto-cal`` reads a
preset under another run name). A preset missing (or unfinished) there is read from the
search's own branch when that branch trained to its end (a cut branch has no final result). A fixed preset is judged by what it deploys: joint at its best *validation* epoch (the
search's objective), ``auto`` its restored best weights, every other preset its last
epoch. Prints a Markdown table (docs/RESULTS_HISTORY.md, "Schedule search") and the issue's
target: searched mean >= best preset mean - 1 seed std, and >= joint at its best
validation epoch, per task.

Usage::

    python benchmarks/analysis/search_vs_presets.py SEARCH_DIR SWEEP_DIR[,SWEEP_DIR2] [--presets joint,delayed,reinit,early,window@1,auto]
"""

import argparse
import json
import os
import statistics
import sys
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from dlrm_multiepoch.search.pruning import objective  # noqa: E402


def _read(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def deployed_test_auc(
    summary: dict, preset: str, metric: str, weights: Dict[str, float], budget: int
) -> Optional[Dict[str, float]]:
    """Test AUC per task of what ``preset`` deploys (see the module docstring); None if unfinished.

    ``joint`` is joint at its best validation epoch within the budget; ``joint-end`` joint after ``budget`` epochs.
    """
    whole = [e for e in summary["evaluations"] if float(e["epoch"]).is_integer() and e["epoch"] <= budget]
    if preset == "joint-end":
        return next(({t: m["auc"] for t, m in e["test"].items()} for e in whole if e["epoch"] == budget), None)
    if "wall_time_s" not in summary:
        return None
    if "best" in summary:
        return {t: m["auc"] for t, m in summary["best"]["test"].items()}
    if preset == "joint":
        chosen = max(whole, key=lambda e: objective(e["val"], metric, weights))
    else:
        chosen = whole[-1]
    return {t: m["auc"] for t, m in chosen["test"].items()}


def _stats(values: List[float]) -> str:
    if not values:
        return "n/a"
    std = f" ± {statistics.stdev(values):.4f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):.4f}{std} (n={len(values)})"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("search_dir")
    parser.add_argument("sweep_dir")
    parser.add_argument("--presets", default="joint,joint-end,delayed,reinit,early,window@1,auto")
    parser.add_argument("--alias", default="", help="preset=run name in the sweep folders, e.g. auto=auto-cal")
    args = parser.parse_args(argv)
    record = _read(os.path.join(args.search_dir, "search.json"))
    metric, weights = record["metric"], record["task_weights"]
    searched: Dict[str, List[float]] = {}
    rows = []
    for seed, entry in sorted(record["seeds"].items()):
        deploy = entry.get("deploy")
        if not deploy:
            continue
        for task, auc in deploy["test_auc"].items():
            searched.setdefault(task, []).append(auc)
        cost = entry["cost"]
        rows.append(
            f"| {seed} | {deploy['branch']} @ {deploy['epoch']:g} | {cost['trained_steps']} / {cost['sweep_steps']} "
            f"({cost['trained_steps'] / cost['sweep_steps']:.0%}) | {cost['launches']} | {cost['wall_s']:.0f} |"
        )
    presets: Dict[str, Dict[str, List[float]]] = {}
    for preset in args.presets.split(","):
        for seed in record["seeds"]:
            aucs = None
            aliases = dict(a.split("=") for a in args.alias.split(",") if a)
            for folder in [*args.sweep_dir.split(","), args.search_dir]:  # not swept: the search's own branch
                run = aliases.get(preset, preset) if folder != args.search_dir else preset
                run = "joint" if preset == "joint-end" else run  # the same run, read after the budget
                path = os.path.join(folder, f"{run}-s{seed}", "summary.json")
                found = os.path.isfile(path) and deployed_test_auc(
                    _read(path), preset, metric, weights, record["budget"]
                )
                aucs = aucs or found or None
            for task, auc in (aucs or {}).items():
                presets.setdefault(preset, {}).setdefault(task, []).append(auc)
    tasks = sorted(searched)
    print(f"search: {args.search_dir}; presets: {args.sweep_dir}; decided on validation {metric}\n")
    print("| seed | deployed | trained steps / sweep's | launches | wall s |\n|---|---|---|---|---|")
    print("\n".join(rows))
    print("\n| test AUC | " + " | ".join(tasks) + " |\n|---|" + "---|" * len(tasks))
    print("| **search (deployed)** | " + " | ".join(_stats(searched[t]) for t in tasks) + " |")
    for preset, per_task in presets.items():
        label = {"joint": "joint at its best val epoch", "joint-end": "joint after the budget"}.get(preset, preset)
        print(f"| {label} | " + " | ".join(_stats(per_task.get(t, [])) for t in tasks) + " |")
    print()
    for t in tasks:
        # The target's "best fixed preset": validation-driven runs (auto) are not fixed presets.
        means = {p: statistics.mean(v[t]) for p, v in presets.items() if v.get(t) and not p.startswith("auto")}
        if not means or not searched.get(t):
            continue
        best = max(means, key=means.get)
        spread = statistics.stdev(presets[best][t]) if len(presets[best][t]) > 1 else 0.0
        mine = statistics.mean(searched[t])
        verdict = mine >= means[best] - spread and mine >= means.get("joint", -1.0)
        print(
            f"{t}: search {mine:.4f} vs best preset {best} {means[best]:.4f} - std {spread:.4f} and joint "
            f"{means.get('joint', float('nan')):.4f}: {'MET' if verdict else 'NOT MET'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
