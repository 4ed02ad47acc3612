"""Compare runs from their TensorBoard event files: per-evaluation metrics side by side.

Usage::

    python -m dlrm_multiepoch.report runs/bookcrossing-*            # test AUC per epoch
    python -m dlrm_multiepoch.report runs/a runs/b --metric logloss --split train_sample
"""

import argparse
import os
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

EPOCH_TAG = "eval/epoch"


def read_run(run_dir: str) -> Dict[str, Dict[int, float]]:
    """All scalars of one run folder: tag -> {step: value} (last value wins per step)."""
    if not os.path.isdir(run_dir):
        raise FileNotFoundError(f"run folder {run_dir!r} does not exist")
    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    if EPOCH_TAG not in tags:
        raise ValueError(f"{run_dir!r} holds no evaluations (no {EPOCH_TAG!r} scalar); is it a dlrm_multiepoch run folder?")
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in tags}


def eval_table(run_dir: str, split: str = "test", metric: str = "auc") -> Dict[str, Dict[float, float]]:
    """task -> {epoch: value} of ``<split>/<task>/<metric>`` at each evaluation."""
    scalars = read_run(run_dir)
    epochs = scalars[EPOCH_TAG]
    table: Dict[str, Dict[float, float]] = {}
    for tag, values in scalars.items():
        parts = tag.split("/")
        if len(parts) == 3 and parts[0] == split and parts[2] == metric:
            table[parts[1]] = {round(epochs[step], 4): v for step, v in values.items() if step in epochs}
    if not table:
        raise ValueError(f"{run_dir!r} has no '{split}/<task>/{metric}' scalars")
    return table


def format_comparison(runs: Sequence[str], split: str = "test", metric: str = "auc", epochs_only: bool = True) -> str:
    """A markdown table: one row per run and task, one column per evaluated epoch."""
    tables = {run: eval_table(run, split, metric) for run in runs}
    all_epochs = sorted({e for t in tables.values() for per in t.values() for e in per})
    if epochs_only:
        all_epochs = [e for e in all_epochs if float(e).is_integer()]
    header = f"| run | task | " + " | ".join(f"ep {e:g}" for e in all_epochs) + " |"
    lines = [f"{split} {metric}", "", header, "|" + "---|" * (len(all_epochs) + 2)]
    for run, table in tables.items():
        for task, per in sorted(table.items()):
            cells = [f"{per[e]:.4f}" if e in per else "" for e in all_epochs]
            lines.append(f"| {os.path.basename(run.rstrip('/'))} | {task} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_seed_table(
    variants: Dict[str, Sequence[str]], tasks: Sequence[str], split: str = "test", metric: str = "auc"
) -> str:
    """Mean ± std over seeds per variant, task and epoch (a markdown table).

    Args:
        variants: variant name -> run folders of its seeds.
        tasks: tasks to show, in order.
    """
    tables = {name: [eval_table(run, split, metric) for run in runs] for name, runs in variants.items()}
    epochs = sorted({e for ts in tables.values() for t in ts for per in t.values() for e in per if float(e).is_integer()})
    lines = [
        f"| variant | task | " + " | ".join(f"{split} {metric} ep {e:g}" for e in epochs) + " |",
        "|" + "---|" * (len(epochs) + 2),
    ]
    for name, ts in tables.items():
        for task in tasks:
            cells = []
            for e in epochs:
                values = np.array([t[task][e] for t in ts if e in t.get(task, {})])
                cells.append(f"{values.mean():.4f} ± {values.std(ddof=1) if len(values) > 1 else 0:.4f}" if len(values) else "")
            lines.append(f"| {name} ({len(ts)} seeds) | {task} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m dlrm_multiepoch.report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", help="run folders (each holds event files)")
    parser.add_argument("--split", default="test", help="test or train_sample")
    parser.add_argument("--metric", default="auc", help="auc, logloss or ne")
    parser.add_argument("--all_evals", action="store_true", help="include mid-epoch evaluations")
    args = parser.parse_args(argv)
    try:
        print(format_comparison(args.runs, args.split, args.metric, epochs_only=not args.all_evals))
    except (FileNotFoundError, ValueError) as e:
        parser.error(str(e))


if __name__ == "__main__":
    main(sys.argv[1:])
