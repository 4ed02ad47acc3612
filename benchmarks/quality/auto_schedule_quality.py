"""The automatic schedule against fixed strategies: the model each one would deploy, on its test split.

Runs every strategy for several seeds with the training app (2 gloo ranks, the same
``--val_fraction`` for all, so all train on the same rows), then reports, per strategy,
mean ± std over seeds of the test AUC and logloss of the model it ends with, the epoch
that model comes from and the wall time:

- runs with ``--freeze_schedule auto`` (``auto``, ``joint-early-stop``) end holding their
  best-validation weights: ``summary.json``'s ``best``;
- fixed strategies are read at their last epoch; ``joint`` also at its best-validation
  epoch (chosen by the validation objective the auto schedule uses) and at epoch 1.

Usage::

    python benchmarks/quality/auto_schedule_quality.py --seeds 0 1 2 -- --dataset movielens
    python benchmarks/quality/auto_schedule_quality.py --report runs/auto-quality-bx    # report existing runs
"""

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dlrm_multiepoch.auto import AutoScheduleConfig, AutoSchedulePolicy  # noqa: E402
from dlrm_multiepoch.run_files import read_summary  # noqa: E402
from dlrm_multiepoch.sweep.command import main as sweep_main  # noqa: E402

STRATEGIES = {
    "joint": "--freeze_schedule joint",
    "delayed": "--freeze_schedule delayed",
    "joint-early-stop": "--freeze_schedule auto --auto_frozen_cap 0 --auto_after_tables stop",
    "auto": "--freeze_schedule auto",
}


def selected(summary: Dict[str, Any], how: str) -> Tuple[float, Dict[str, Any]]:
    """``(epoch, evaluation)`` of the model a run ends with (``how``: last, best_val, epoch1, auto)."""
    if how == "auto":
        best = summary["best"]
        return best["epoch"], best
    per_epoch = [e for e in summary["evaluations"] if float(e["epoch"]).is_integer() and "test" in e]
    if how == "last":
        return per_epoch[-1]["epoch"], per_epoch[-1]
    if how == "epoch1":
        return 1, per_epoch[0]
    config = summary["config"]["auto"]
    tasks = list(per_epoch[0]["val"])
    policy = AutoSchedulePolicy(1, 1, tasks, AutoScheduleConfig(**config))
    best = max(per_epoch, key=lambda e: policy.objective(e["val"]))
    return best["epoch"], best


def report(runs: Dict[str, List[Path]], tasks: List[str]) -> str:
    rows: List[Tuple[str, str]] = []
    for name in runs:
        if name == "joint":
            rows += [("joint", "epoch1"), ("joint", "best_val"), ("joint", "last")]
        elif STRATEGIES.get(name, "").startswith("--freeze_schedule auto") or "auto" in name:
            rows.append((name, "auto"))
        else:
            rows.append((name, "last"))
    header = ["strategy", "model used", "epoch"] + [f"test {m} {t}" for m in ("auc", "logloss") for t in tasks]
    lines = ["| " + " | ".join(header + ["wall time (s)"]) + " |", "|" + "---|" * (len(header) + 1)]
    for name, how in rows:
        summaries = [read_summary(str(run)) for run in runs[name]]
        picked = [selected(s, how) for s in summaries]
        epochs = np.array([e for e, _ in picked], dtype=float)
        cells = [name, {"epoch1": "epoch 1", "best_val": "best val epoch", "last": "last epoch", "auto": "best val (restored)"}[how]]
        cells.append(f"{epochs.mean():.2f} ({', '.join(f'{e:g}' for e in epochs)})")
        for metric in ("auc", "logloss"):
            for task in tasks:
                values = np.array([ev["test"][task][metric] for _, ev in picked])
                cells.append(_mean_std(values))
        cells.append(_mean_std(np.array([s["wall_time_s"] for s in summaries]), digits=0))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mean_std(values: np.ndarray, digits: int = 4) -> str:
    std = values.std(ddof=1) if len(values) > 1 else 0.0
    return f"{values.mean():.{digits}f} ± {std:.{digits}f}"


def decisions(runs: Dict[str, List[Path]]) -> str:
    """Each auto run's realised schedule and best step."""
    out = []
    for name, paths in runs.items():
        for run in paths:
            summary = read_summary(str(run))
            if "best" in summary:
                out.append(f"{run.name}: best at epoch {summary['best']['epoch']:.2f}; {summary['best']['schedule']}")
    return "\n".join(out)


def find_runs(folder: Path) -> Dict[str, List[Path]]:
    runs: Dict[str, List[Path]] = {}
    for summary in sorted(folder.glob("*/summary.json")):
        name = summary.parent.name.rsplit("-s", 1)[0]
        runs.setdefault(name, []).append(summary.parent)
    return runs


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    common = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strategy", action="append", help=f"NAME[=FLAGS] (repeatable); default: {', '.join(STRATEGIES)}")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--val_fraction", type=float, default=0.1)
    parser.add_argument("--out", default="", help="parent folder of the runs (default: runs/auto-quality-<time>)")
    parser.add_argument("--report", default="", help="only report the runs in this folder")
    parser.add_argument("--tasks", default="like,love")
    args = parser.parse_args(argv)
    tasks = args.tasks.split(",")
    if args.report:
        runs = find_runs(Path(args.report))
    else:
        strategies = {}
        for spec in args.strategy or list(STRATEGIES):
            name, _, flags = spec.partition("=")
            strategies[name] = flags or STRATEGIES[name]
        out = Path(args.out or REPO / "runs" / f"auto-quality-{time.strftime('%Y%m%d-%H%M%S')}")
        # The runs: one sweep (TorchX launches, 2 ranks each; a rerun skips finished runs).
        code = sweep_main(
            [str(out), *[f"{name}={flags}" for name, flags in strategies.items()], "--epochs", str(args.epochs),
             "--seeds", ",".join(map(str, args.seeds)), "-j", "1x2", "--",
             "--val_fraction", str(args.val_fraction), "--no-checkpoint", *common]
        )  # fmt: skip
        if code:
            raise SystemExit(code)
        runs = {name: [out / f"{name}-s{seed}" for seed in args.seeds] for name in strategies}
    print(report(runs, tasks))
    print()
    print(decisions(runs))


if __name__ == "__main__":
    main()
