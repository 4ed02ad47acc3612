"""Which validation metric should the automatic schedule follow? Measured on run curves.

Reads a sweep folder whose runs evaluated validation *and* test every few steps
(``--eval_every_n_steps``, e.g. 10 per epoch: the auto schedule's own cadence) and asks,
per candidate metric (``--auto_metric``: logloss, ne, auc, cal_ne), how good the test
AUC of the model it would pick is:

- ``pick``: the evaluation with the best validation objective over each run's budget
  (checkpoint selection: what keeping the best-validation weights gives), on every
  fixed-schedule run; ``regret`` is the best test AUC on the same curve minus the
  picked one (mean over tasks);
- ``early-stop``: the auto policy with no frozen phase and ``stop`` after the tables
  (the ``joint-early-stop`` preset) replayed on each ``joint`` run's validation curve,
  with each ``--auto_min_tables_epochs`` of ``--min_tables_epochs``:
  until it stops, that preset trains exactly the joint run's weights, so its deployed
  model is the joint run's evaluation at the policy's best step;
- ``auto``: the auto policy replayed on each ``window@1`` run (tables frozen for epoch
  1, then trained): the frozen phase ends at epoch 1 under the default cap on a 3-epoch
  budget, and the tables' phase follows the window@1 curve until it plateaus; the
  deployed model is the best evaluation up to there (the refreeze phase is left out).
  A replay whose frozen phase would have restored earlier weights is counted in
  ``diverged`` (the real run would leave the window@1 curve there).

Usage::

    python benchmarks/analysis/val_metric_choice.py /work/exp/valmetric/ml-time --epochs 3
"""

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dlrm_multiepoch.auto.config import AutoScheduleConfig  # noqa: E402
from dlrm_multiepoch.metrics import METRICS  # noqa: E402
from dlrm_multiepoch.auto.policy import DONE, JOINT, AutoSchedulePolicy  # noqa: E402

Evaluation = Dict[str, Dict[str, Dict[str, float]]]


def load_curves(folder: Path, budget: int) -> Dict[str, List[Tuple[int, List[dict]]]]:
    """Strategy -> [(seed, evaluations with val and test, within ``budget`` epochs)], from ``<name>-s<seed>``."""
    runs: Dict[str, List[Tuple[int, List[dict]]]] = defaultdict(list)
    for path in sorted(folder.glob("*-s*/summary.json")):
        m = re.fullmatch(r"(.+)-s(\d+)", path.parent.name)
        summary = json.loads(path.read_text())
        curve = [e for e in summary.get("evaluations", []) if "val" in e and "test" in e and e["epoch"] <= budget + 1e-9]
        if m and curve and float(curve[-1]["epoch"]) >= budget - 1e-9:
            runs[m.group(1)].append((int(m.group(2)), curve))
    return runs


def objective(evaluation: dict, metric: str, tasks: Sequence[str], split: str = "val") -> float:
    """Task mean of ``metric`` on ``split``, signed so that higher is better."""
    return METRICS[metric].sign * float(np.mean([evaluation[split][t][metric] for t in tasks]))


def test_aucs(evaluation: dict, tasks: Sequence[str]) -> np.ndarray:
    return np.array([evaluation["test"][t]["auc"] for t in tasks])


def pick(curve: List[dict], metric: str, tasks: Sequence[str]) -> Tuple[np.ndarray, float]:
    """Test AUCs at the best-validation evaluation, and the regret against the curve's best test AUC."""
    chosen = max(curve, key=lambda e: objective(e, metric, tasks))
    best = max(float(test_aucs(e, tasks).mean()) for e in curve)
    return test_aucs(chosen, tasks), best - float(test_aucs(chosen, tasks).mean())


def replay(
    curve: List[dict], metric: str, tasks: Sequence[str], budget: int, cap: float, min_tables: float
) -> Tuple[dict, bool]:
    """The auto policy on a curve's validation evaluations: the evaluation at its best step, and whether it diverged.

    With ``cap`` 0 (no frozen phase) the replay stops when the policy stops; otherwise at
    the end of the tables' phase.
    """
    steps_per_epoch = round(curve[-1]["step"] / curve[-1]["epoch"])
    config = AutoScheduleConfig(
        auto_metric=metric, auto_frozen_cap=cap, auto_after_tables="stop", auto_min_tables_epochs=min_tables
    )
    policy = AutoSchedulePolicy(steps_per_epoch, budget, list(tasks), config)
    by_step = {e["step"]: e for e in curve}
    diverged = False
    for e in curve:
        decision = policy.observe(e["step"], {t: e["val"][t] for t in tasks})
        if decision.transition.endswith(f"->{JOINT}") and decision.restore_best:
            diverged = True
        if decision.phase == DONE:
            break
    return by_step[policy.best_step], diverged


def _ms(values: List[float]) -> str:
    a = np.array(values, dtype=float)
    return f"{a.mean():.4f} ± {a.std(ddof=1) if len(a) > 1 else 0.0:.4f}"


def report(folder: Path, budget: int, metrics: Sequence[str], min_tables_epochs: Sequence[float]) -> str:
    runs = load_curves(folder, budget)
    if not runs:
        raise SystemExit(f"{folder}: no runs with validation and test evaluations over {budget} epochs")
    tasks = sorted(next(iter(runs.values()))[0][1][0]["test"])
    first = next(iter(runs.values()))[0][1][-1]
    lines = [
        f"{folder}: fixed-schedule runs {', '.join(f'{k} x{len(v)}' for k, v in runs.items() if 'auto' not in k)}; "
        + "positive rate val / test: "
        + ", ".join(f"{t} {first['val'][t]['positive_rate']:.3f} / {first['test'][t]['positive_rate']:.3f}" for t in tasks),
        "",
        "| metric | rule | runs | " + " | ".join(f"test AUC {t}" for t in tasks) + " | regret (AUC) | diverged |",
        "|---|---|---|" + "---|" * len(tasks) + "---|---|",
    ]
    fixed = [c for name, seeds in runs.items() if name not in ("auto", "joint-early-stop") and "auto" not in name
             for _, c in seeds]  # fmt: skip
    for metric in metrics:
        picks = [pick(c, metric, tasks) for c in fixed]
        lines.append(_row(metric, "pick (all fixed runs)", [p for p, _ in picks], [r for _, r in picks], None, tasks))
        for rule, name, cap in (("early-stop (joint)", "joint", 0.0), ("auto (window@1)", "window@1", 0.5)):
            for min_tables in min_tables_epochs:
                if name not in runs:
                    continue
                got = [replay(c, metric, tasks, budget, cap, min_tables) for _, c in runs[name]]
                label = f"{rule}, tables >= {min_tables:g} epoch"
                aucs = [test_aucs(e, tasks) for e, _ in got]
                lines.append(_row(metric, label, aucs, None, sum(d for _, d in got), tasks))
    oracle = [max(c, key=lambda e: float(test_aucs(e, tasks).mean())) for c in fixed]
    lines.append(_row("(test AUC)", "oracle pick", [test_aucs(e, tasks) for e in oracle], [0.0] * len(oracle), None, tasks))
    return "\n".join(lines)


def _row(metric: str, rule: str, aucs: List[np.ndarray], regrets: Optional[List[float]], diverged, tasks) -> str:
    a = np.array(aucs)
    cells = [metric, rule, str(len(a))] + [_ms(list(a[:, i])) for i in range(len(tasks))]
    cells.append(_ms(regrets) if regrets is not None else "")
    cells.append("" if diverged is None else str(diverged))
    return "| " + " | ".join(cells) + " |"


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="sweep folders (runs with --eval_every_n_steps)")
    parser.add_argument("--epochs", type=int, default=3, help="the budget: evaluations after it are ignored")
    parser.add_argument("--metrics", default=",".join(METRICS), help="candidate metrics, comma-separated")
    parser.add_argument(
        "--min_tables_epochs", default="0,1", help="--auto_min_tables_epochs values of the replays, comma-separated"
    )  # fmt: skip
    args = parser.parse_args(argv)
    mins = [float(v) for v in args.min_tables_epochs.split(",")]
    for folder in args.folders:
        print(report(folder, args.epochs, args.metrics.split(","), mins))
        print()


if __name__ == "__main__":
    main()
