"""Summarise a quality-run folder (benchmarks/quality/quality_runs.py) for the remedies' results.

For each variant and task, over its seeds (mean ± std): test AUC after epoch 1, after the
last epoch, at the best epoch (the best epoch of each seed), the change from epoch 1 to
the last epoch, the AUC on test rows whose user / item is unseen in training and on
the other rows (at the last epoch), the task's test positive rate (label sparsity) and
the training wall time. ``--encoding`` adds, per distinct id encoding (``--min_count``
setting), how many ids and rows each table folds into the unknown row. Reads each
run's ``summary.json``; run folders are named ``<variant>-s<seed>``.

Usage::

    python benchmarks/analysis/remedies_summary.py runs/quality-20261130 [--variants joint delayed falr] [--encoding]
"""

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List

import numpy as np


def _ms(values: List[float]) -> str:
    a = np.array(values, dtype=float)
    if not len(a) or np.isnan(a).all():
        return "n/a"
    return f"{np.nanmean(a):.4f} ± {np.nanstd(a, ddof=1) if len(a) > 1 else 0:.4f}"


# Rows in none of the unseen-id slices: "seen" today, "seen_user_item" in runs before the streaming data path.
SEEN_SLICES = ("test.seen", "test.seen_user_item")


def load_runs(folder: Path, variants: List[str]) -> Dict[str, List[dict]]:
    """``summary.json`` of every ``<variant>-s<seed>`` run folder, by variant (in ``variants`` order)."""
    runs: Dict[str, List[dict]] = defaultdict(list)
    for summary in sorted(folder.glob("*/summary.json")):
        m = re.fullmatch(r"(.+)-s(\d+)", summary.parent.name)
        if not m:
            continue
        run = json.loads(summary.read_text())
        done = sum(float(e["epoch"]).is_integer() for e in run["evaluations"])
        if done < run["config"]["epochs"]:  # unfinished: would mix shorter runs into the epoch columns
            print(f"left out {summary.parent.name}: {done} of {run['config']['epochs']} epochs", file=sys.stderr)
            continue
        runs[m.group(1)].append(run)
    names = variants or sorted(runs)
    missing = [n for n in names if n not in runs]
    if missing:
        raise SystemExit(f"no runs of {missing} in {folder}; found {sorted(runs)}")
    return {n: runs[n] for n in names}


def _slice_auc(evaluation: dict, names: tuple, task: str) -> float:
    for name in names:
        if name in evaluation:
            return evaluation[name].get(task, {}).get("auc", float("nan"))
    return float("nan")


def summarise(runs: Dict[str, List[dict]]) -> str:
    names = list(runs)
    tasks = list(runs[names[0]][0]["evaluations"][0]["test"])
    lines = [
        "| variant | task | positive rate | AUC ep 1 | AUC last ep | AUC best ep | best ep (per seed) | "
        "change ep 1 → last | unseen-user AUC | unseen-item AUC | seen AUC | logloss last ep | wall time (s) |",
        "|" + "---|" * 13,
    ]
    for name in names:
        for task in tasks:
            cols: Dict[str, List[float]] = defaultdict(list)
            best_epochs = []
            for s in runs[name]:
                evals = [e for e in s["evaluations"] if float(e["epoch"]).is_integer()]
                auc = [e["test"][task]["auc"] for e in evals]
                cols["pos"].append(evals[-1]["test"][task]["positive_rate"])
                cols["ep1"].append(auc[0])
                cols["last"].append(auc[-1])
                cols["best"].append(max(auc))
                best_epochs.append(str(int(evals[int(np.argmax(auc))]["epoch"])))
                cols["wall"].append(s.get("wall_time_s", float("nan")))
                cols["seen"].append(_slice_auc(evals[-1], SEEN_SLICES, task))
                cols["change"].append(auc[-1] - auc[0])
                cols["logloss"].append(evals[-1]["test"][task]["logloss"])
                for sl in ("unseen_user", "unseen_item"):
                    cols[sl].append(_slice_auc(evals[-1], (f"test.{sl}",), task))
            wall = np.array(cols["wall"], dtype=float)
            lines.append(
                f"| {name} ({len(runs[name])} seeds) | {task} | {np.mean(cols['pos']):.3f} | {_ms(cols['ep1'])} | "
                f"{_ms(cols['last'])} | {_ms(cols['best'])} | {','.join(best_epochs)} | {_ms(cols['change'])} | "
                f"{_ms(cols['unseen_user'])} | {_ms(cols['unseen_item'])} | {_ms(cols['seen'])} | "
                f"{_ms(cols['logloss'])} | {np.nanmean(wall):.0f} ± {np.nanstd(wall, ddof=1) if len(wall) > 1 else 0:.0f} |"
            )
    return "\n".join(lines)


def encoding_table(runs: Dict[str, List[dict]]) -> str:
    """Per distinct id encoding among the variants: ids and rows folded into each table's unknown row."""
    lines = [
        "| variants | table | min_count | ids folded / fitted | train rows folded | train rows in unknown row | "
        "test rows in unknown row |",
        "|" + "---|" * 7,
    ]
    groups: Dict[str, List[str]] = {}
    encodings: Dict[str, dict] = {}
    for name, summaries in runs.items():
        encoding = summaries[0].get("encoding", {})
        key = json.dumps(encoding, sort_keys=True)
        groups.setdefault(key, []).append(name)
        encodings[key] = encoding
    for key, names in groups.items():
        for table, e in encodings[key].items():
            lines.append(
                f"| {', '.join(names)} | {table} | {e['min_count']} | {e['folded_ids']:,} / {e['fit_ids']:,} "
                f"({e['folded_ids'] / max(e['fit_ids'], 1):.1%}) | {e['folded_fit_rows']:,} | "
                f"{e['train_unknown_row_share']:.1%} | {e['test_unknown_row_share']:.1%} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="the --out folder of benchmarks/quality/quality_runs.py")
    parser.add_argument("--variants", nargs="*", default=[], help="variants in this order (default: all, sorted)")
    parser.add_argument("--encoding", action="store_true", help="add the per-table fold report of each id encoding")
    args = parser.parse_args()
    runs = load_runs(args.folder, args.variants)
    print(summarise(runs))
    if args.encoding:
        print()
        print(encoding_table(runs))


if __name__ == "__main__":
    main()
