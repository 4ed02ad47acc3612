"""Summarise a quality-run folder (benchmarks/quality_runs.py) for the remedies' results.

For each variant and task, over its seeds (mean ± std): test AUC after epoch 1, after the
last epoch, at the best epoch (the best epoch of each seed), the change from epoch 1 to
the last epoch, the AUC on test rows whose user / item is unseen in training (at the
last epoch), and the task's test positive rate (label sparsity). Reads each run's
``summary.json``; run folders are named ``<variant>-s<seed>``.

Usage::

    python benchmarks/tools/remedies_summary.py runs/quality-20261130 [--variants joint delayed falr]
"""

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Dict, List

import numpy as np


def _ms(values: List[float]) -> str:
    a = np.array(values, dtype=float)
    if not len(a) or np.isnan(a).all():
        return "n/a"
    return f"{np.nanmean(a):.4f} ± {np.nanstd(a, ddof=1) if len(a) > 1 else 0:.4f}"


def summarise(folder: Path, variants: List[str]) -> str:
    runs: Dict[str, List[dict]] = defaultdict(list)
    for summary in sorted(folder.glob("*/summary.json")):
        m = re.fullmatch(r"(.+)-s(\d+)", summary.parent.name)
        if m:
            runs[m.group(1)].append(json.loads(summary.read_text()))
    names = variants or sorted(runs)
    missing = [n for n in names if n not in runs]
    if missing:
        raise SystemExit(f"no runs of {missing} in {folder}; found {sorted(runs)}")
    tasks = list(runs[names[0]][0]["evaluations"][0]["test"])
    lines = [
        "| variant | task | positive rate | AUC ep 1 | AUC last ep | AUC best ep | change ep 1 → last | "
        "unseen-user AUC | unseen-item AUC | logloss last ep |",
        "|" + "---|" * 10,
    ]
    for name in names:
        for task in tasks:
            cols: Dict[str, List[float]] = defaultdict(list)
            for s in runs[name]:
                evals = [e for e in s["evaluations"] if float(e["epoch"]).is_integer()]
                auc = [e["test"][task]["auc"] for e in evals]
                cols["pos"].append(evals[-1]["test"][task]["positive_rate"])
                cols["ep1"].append(auc[0])
                cols["last"].append(auc[-1])
                cols["best"].append(max(auc))
                cols["change"].append(auc[-1] - auc[0])
                cols["logloss"].append(evals[-1]["test"][task]["logloss"])
                for sl in ("unseen_user", "unseen_item"):
                    cols[sl].append(evals[-1].get(f"test.{sl}", {}).get(task, {}).get("auc", float("nan")))
            lines.append(
                f"| {name} ({len(runs[name])} seeds) | {task} | {np.mean(cols['pos']):.3f} | {_ms(cols['ep1'])} | "
                f"{_ms(cols['last'])} | {_ms(cols['best'])} | {_ms(cols['change'])} | {_ms(cols['unseen_user'])} | "
                f"{_ms(cols['unseen_item'])} | {_ms(cols['logloss'])} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="the --out folder of benchmarks/quality_runs.py")
    parser.add_argument("--variants", nargs="*", default=[], help="variants in this order (default: all, sorted)")
    args = parser.parse_args()
    print(summarise(args.folder, args.variants))


if __name__ == "__main__":
    main()
