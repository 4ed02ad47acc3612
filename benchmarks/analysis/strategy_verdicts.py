"""Which strategy to deploy: each strategy's deployed model on test, and the auto schedule's target.

Reads a sweep folder (``dlrm-multiepoch sweep``, runs ``<strategy>-s<seed>``) and prints a
Markdown table: per strategy, the epoch of the model it deploys and its test AUC per
task (mean ± std over seeds). What each deploys:

- fixed schedules (``joint``, ``early``, ``delayed``, ``reinit``, ``window@W``, ...): the
  model after the budget's last epoch; ``joint-1ep`` is ``joint``'s epoch 1 (the same
  trajectory) unless the folder has its own runs;
- ``joint`` at its best validation epoch (within the budget, by ``--metric``): what a
  user without test labels would pick from joint training;
- validation-driven runs (``summary.json`` has ``best``: ``auto``, ``joint-early-stop``,
  ``auto-<metric>``): their restored best-validation weights;
- ``joint-early-stop``, when the folder has no such runs: replayed on each ``joint``
  run's validation curve (benchmarks/analysis/val_metric_choice.py; exact when ``joint`` evaluated
  validation at the auto schedule's cadence, ``--eval_every_n_steps``).

Then, per validation-driven strategy, the target of issue 18: its mean test AUC is at
least the best fixed preset's mean minus that preset's seed standard deviation, for
every task, and at least joint at its best validation epoch.

Usage::

    python benchmarks/analysis/strategy_verdicts.py /work/exp/valmetric/ml-time --epochs 3 --metric cal_ne
"""

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dlrm_multiepoch.auto.config import AutoScheduleConfig  # noqa: E402
from dlrm_multiepoch.metrics import METRICS  # noqa: E402
from val_metric_choice import replay  # noqa: E402  (this folder)

Pick = Tuple[float, dict]  # (epoch, evaluation with a "test" split)


def load(folder: Path) -> Dict[str, List[dict]]:
    """Strategy -> summaries of its finished runs, in seed order."""
    runs: Dict[str, List[Tuple[int, dict]]] = defaultdict(list)
    for path in sorted(folder.glob("*-s*/summary.json")):
        m = re.fullmatch(r"(.+)-s(\d+)", path.parent.name)
        summary = json.loads(path.read_text())
        done = "best" in summary or any(
            float(e["epoch"]) >= summary["config"]["epochs"] and "test" in e for e in summary.get("evaluations", [])
        )
        if m and done:
            runs[m.group(1)].append((int(m.group(2)), summary))
    return {name: [s for _, s in sorted(seeds, key=lambda x: x[0])] for name, seeds in runs.items()}


def epoch_evals(summary: dict, budget: int) -> List[dict]:
    return [e for e in summary["evaluations"] if float(e["epoch"]).is_integer() and "test" in e and e["epoch"] <= budget]


def deployed(summary: dict, how: str, budget: int, metric: str) -> Pick:
    """The model a run deploys: ``best`` (restored), ``last`` (budget's last epoch), ``epoch1``, ``best_val``."""
    if how == "best":
        return summary["best"]["epoch"], summary["best"]
    if how == "replay":
        curve = [e for e in summary["evaluations"] if "val" in e and "test" in e and e["epoch"] <= budget]
        defaults = AutoScheduleConfig()
        tasks = list(curve[0]["val"])
        best, _ = replay(curve, metric, tasks, budget, cap=0.0, min_tables=defaults.auto_min_tables_epochs)
        return best["epoch"], best
    per_epoch = epoch_evals(summary, budget)
    if how == "epoch1":
        return 1.0, per_epoch[0]
    if how == "last":
        return per_epoch[-1]["epoch"], per_epoch[-1]
    tasks = list(per_epoch[0]["val"])
    best = max(per_epoch, key=lambda e: METRICS[metric].sign * np.mean([e["val"][t][metric] for t in tasks]))
    return best["epoch"], best


def rows_of(runs: Dict[str, List[dict]], metric: str) -> List[Tuple[str, str, str]]:
    """(label, strategy, how) in table order; fixed presets first."""
    rows = []
    if "joint" in runs and "joint-1ep" not in runs:
        rows.append(("joint-1ep (joint's epoch 1)", "joint", "epoch1"))
    for name, summaries in runs.items():
        if "best" in summaries[0]:
            continue
        rows.append((name, name, "epoch1" if name == "joint-1ep" else "last"))
    if "joint" in runs:
        rows.append((f"joint at its best val epoch ({metric})", "joint", "best_val"))
    rows += [(name, name, "best") for name, summaries in runs.items() if "best" in summaries[0]]
    # The replay needs joint's validation curve at the policy's cadence, not once per epoch.
    curves = "joint" in runs and any(not float(e["epoch"]).is_integer() for e in runs["joint"][0]["evaluations"])
    if curves and "joint-early-stop" not in runs:
        rows.append(("joint-early-stop (replayed on joint)", "joint", "replay"))
    return rows


def table(folder: Path, budget: int, metric: str) -> str:
    runs = load(folder)
    if not runs:
        raise SystemExit(f"{folder}: no finished runs")
    evaluations = [e for summaries in runs.values() for s in summaries for e in s["evaluations"]]
    tasks = sorted(next(e["test"] for e in evaluations if "test" in e))
    out = ["| strategy | deploys | seeds | epoch | " + " | ".join(f"test AUC {t}" for t in tasks) + " |",
           "|---|---|---|---|" + "---|" * len(tasks)]  # fmt: skip
    stats: Dict[str, Tuple[str, np.ndarray]] = {}  # label -> (how, [seeds, tasks] AUCs)
    for label, name, how in rows_of(runs, metric):
        picks = [deployed(s, how, budget, metric) for s in runs[name]]
        aucs = np.array([[ev["test"][t]["auc"] for t in tasks] for _, ev in picks])
        stats[label] = (how, aucs)
        what = {"best": "best val (restored)", "last": f"epoch {budget}", "epoch1": "epoch 1"}
        what.update(best_val="best val epoch", replay="best val (replay)")
        epochs = ", ".join(f"{e:.2g}" for e, _ in picks)
        cells = [label, what[how], str(len(picks)), epochs] + [_ms(aucs[:, i]) for i in range(len(tasks))]
        out.append("| " + " | ".join(cells) + " |")
    out += ["", *targets(stats, tasks)]
    return "\n".join(out)


def targets(stats: Dict[str, Tuple[str, np.ndarray]], tasks: List[str]) -> List[str]:
    """The target check of each validation-driven strategy, one line each."""
    fixed = {k: a for k, (how, a) in stats.items() if how in ("last", "epoch1")}
    joint_val = next((a for k, (how, a) in stats.items() if how == "best_val"), None)
    lines = []
    for label, (how, aucs) in stats.items():
        if how not in ("best", "replay"):
            continue
        verdicts = []
        for i, task in enumerate(tasks):
            top = max(fixed, key=lambda k: fixed[k][:, i].mean())
            top_mean, top_std = fixed[top][:, i].mean(), _std(fixed[top][:, i])
            ok = aucs[:, i].mean() >= top_mean - top_std
            line = f"{task}: {aucs[:, i].mean():.4f} vs {top} {top_mean:.4f} - {top_std:.4f}"
            if joint_val is not None:
                ok = ok and aucs[:, i].mean() >= joint_val[:, i].mean()
                line += f", joint@best-val {joint_val[:, i].mean():.4f}"
            verdicts.append(f"{line} {'met' if ok else 'MISSED'}")
        lines.append(f"- {label}: " + "; ".join(verdicts))
    return lines


def _std(a: np.ndarray) -> float:
    return float(a.std(ddof=1)) if len(a) > 1 else 0.0


def _ms(a: np.ndarray) -> str:
    return f"{a.mean():.4f} ± {_std(a):.4f}"


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--epochs", type=int, default=3, help="the budget")
    parser.add_argument(
        "--metric", default=AutoScheduleConfig().auto_metric, choices=sorted(METRICS),
        help="validation metric that picks joint's best epoch (default: the auto schedule's)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    for folder in args.folders:
        print(f"### {folder}\n")
        print(table(folder, args.epochs, args.metric))
        print()


if __name__ == "__main__":
    main()
