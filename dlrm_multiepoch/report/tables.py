"""The comparison as a Markdown report and a CSV table (one row per task and strategy).

Differences are shown in AUC points (1 pt = 0.01 AUC) and in percent of the baseline.

Example::

    print(to_markdown(comparison))
    write_csv(comparison, "runs/bx/compare/comparison.csv")
"""

import csv
from typing import Any, Dict, List, Optional

from dlrm_multiepoch.report.compare import Comparison, Stat, StrategyRow, TaskComparison, WindowFit


def fmt(stat: Optional[Stat], digits: int = 4) -> str:
    if stat is None:
        return "n/a"
    return f"{stat.mean:.{digits}f}" + (f" ± {stat.std:.{digits}f}" if stat.std is not None else "")


def fmt_delta(delta: Optional[float], base: Optional[float]) -> str:
    if delta is None or base is None:
        return "n/a"
    return f"{100 * delta:+.2f} pt ({100 * delta / base:+.2f}%)"


def _notes(task: TaskComparison, row: StrategyRow) -> str:
    notes = []
    if row.strategy == task.winner:
        notes.append("**winner**")
    if row.deployed_epoch is not None:
        notes.append(f"last = its restored best-validation weights (epoch {row.deployed_epoch:.2f} on average)")
    if row.one_epoch_drop is not None:
        epoch, change = row.one_epoch_drop
        notes.append(f"one-epoch drop ep {epoch}→{epoch + 1} ({100 * change:+.2f} pt)")
    return "; ".join(notes)


def task_markdown(task: TaskComparison) -> str:
    """One task's table and verdict."""
    base_1ep = task.joint_1ep.auc if task.joint_1ep else None
    base_best = task.joint_best.auc if task.joint_best else None
    best_label = f"joint-best (ep {task.joint_best.epoch})" if task.joint_best else "joint-best"
    seeds = sorted({r.seeds for r in task.rows})
    lines = [
        f"### {task.task}: test AUC and logloss (mean ± std over {'/'.join(map(str, seeds))} seed(s))",
        "",
        f"| strategy | seeds | epochs | best ep | AUC best | AUC last | logloss best | logloss last "
        f"| Δ last vs joint-1ep | Δ last vs {best_label} | train−test AUC | wall time | samples/s | notes |",
        "|" + "---|" * 14,
    ]
    for r in task.rows:
        lines.append(
            f"| {r.strategy} | {r.seeds} | {r.epochs} | {r.best_epoch} | {fmt(r.auc_best)} | {fmt(r.auc_last)} "
            f"| {fmt(r.logloss_best)} | {fmt(r.logloss_last)} | {fmt_delta(r.vs_joint_1ep, base_1ep)} "
            f"| {fmt_delta(r.vs_joint_best, base_best)} | {fmt(r.gap_last, 3)} "
            f"| {f'{r.wall_time_s:.0f} s' if r.wall_time_s is not None else 'n/a'} "
            f"| {f'{r.samples_per_s:,.0f}' if r.samples_per_s is not None else 'n/a'} | {_notes(task, r)} |"
        )
    lines += ["", verdict(task), "", curve_markdown(task)]
    return "\n".join(lines)


def curve_markdown(task: TaskComparison) -> str:
    """Test AUC after each epoch, per strategy (mean ± std over seeds)."""
    epochs = sorted({e for r in task.rows for e in r.curve})
    lines = [
        f"| {task.task}: test AUC after epoch | " + " | ".join(str(e) for e in epochs) + " |",
        "|" + "---|" * (len(epochs) + 1),
    ]
    for r in task.rows:
        lines.append(f"| {r.strategy} | " + " | ".join(fmt(r.curve.get(e)) if e in r.curve else "" for e in epochs) + " |")
    return "\n".join(lines)


def verdict(task: TaskComparison) -> str:
    """The winner in words: its margin over the runner-up against the seed spread, and against joint-best."""
    if task.winner is None:
        return f"{task.task}: no strategy to compare."
    win = task.row(task.winner)
    assert win is not None
    text = f"**{task.task}: {task.winner} wins** with last-epoch test AUC {fmt(win.auc_last)}"
    if task.runner_up is not None and task.margin is not None:
        text += f", {100 * task.margin:.2f} pt above {task.runner_up}"
        exceeds = task.margin_exceeds_spread
        if exceeds is None:
            text += " (one seed: the seed spread is unknown, run more seeds before trusting it)"
        else:
            text += f" ({'more' if exceeds else 'less'} than the seed spread, {100 * task.spread:.2f} pt)"  # type: ignore[operator]
    if task.joint_best is not None and win.vs_joint_best is not None:
        text += (
            f"; vs joint at its best epoch ({task.joint_best.epoch}, {task.joint_best.auc:.4f}): "
            f"{fmt_delta(win.vs_joint_best, task.joint_best.auc)}"
        )
    drops = [r.strategy for r in task.rows if r.one_epoch_drop is not None]
    if drops:
        text += f". One-epoch phenomenon (test AUC falls while train AUC rises) in: {', '.join(drops)}"
    return text + "."


def window_markdown(fit: WindowFit) -> str:
    lines = [
        f"### {fit.task}: final test AUC by update-window start (tables frozen before it, trained after)",
        "",
        "| window start (epoch) | final test AUC |",
        "|---|---|",
    ]
    lines += [f"| {w:g} | {fmt(stat)} |" for w, stat in sorted(fit.final_auc.items())]
    if fit.slope is not None:
        lines += [
            "",
            f"Fitted slope: {fmt(fit.slope)} AUC per epoch of delay ({100 * fit.slope.mean:+.2f} pt per epoch; "
            f"{len(fit.slopes)} seed(s)); a later window is "
            f"{'' if fit.monotone else 'not '}monotonically better on the mean.",
        ]
    return "\n".join(lines)


def to_markdown(comparison: Comparison) -> str:
    """The whole report: one section per task, the update-window fit, and the runs left out."""
    parts = [f"## Strategy comparison: {comparison.experiment_dir}"]
    parts += [task_markdown(t) for t in comparison.tasks if t.rows]
    if comparison.windows:
        parts.append("## Update-window sweep")
        parts += [window_markdown(f) for f in comparison.windows]
    if comparison.problems:
        parts.append(
            "Runs left out:\n" + "\n".join(f"- {p.name}: {p.reason} ({p.path})" for p in comparison.problems)
        )
    return "\n\n".join(parts) + "\n"


CSV_COLUMNS = [
    "task", "strategy", "seeds", "epochs", "best_epoch",
    "test_auc_best_mean", "test_auc_best_std", "test_auc_last_mean", "test_auc_last_std",
    "test_logloss_best_mean", "test_logloss_best_std", "test_logloss_last_mean", "test_logloss_last_std",
    "delta_auc_vs_joint_1ep", "delta_auc_pct_vs_joint_1ep", "delta_auc_vs_joint_best", "delta_auc_pct_vs_joint_best",
    "train_minus_test_auc_mean", "train_minus_test_auc_std", "wall_time_s", "samples_per_s",
    "one_epoch_drop_after_epoch", "one_epoch_drop_auc", "winner",
]  # fmt: skip


def csv_rows(comparison: Comparison) -> List[Dict[str, Any]]:
    rows = []
    for task in comparison.tasks:
        base_1ep = task.joint_1ep.auc if task.joint_1ep else None
        base_best = task.joint_best.auc if task.joint_best else None
        for r in task.rows:
            row: Dict[str, Any] = {"task": task.task, "strategy": r.strategy, "seeds": r.seeds, "epochs": r.epochs}
            row["best_epoch"] = r.best_epoch
            for key, stat in (
                ("test_auc_best", r.auc_best), ("test_auc_last", r.auc_last), ("test_logloss_best", r.logloss_best),
                ("test_logloss_last", r.logloss_last), ("train_minus_test_auc", r.gap_last),
            ):  # fmt: skip
                row[f"{key}_mean"] = stat.mean if stat else None
                row[f"{key}_std"] = stat.std if stat else None
            row["delta_auc_vs_joint_1ep"] = r.vs_joint_1ep
            row["delta_auc_pct_vs_joint_1ep"] = 100 * r.vs_joint_1ep / base_1ep if r.vs_joint_1ep is not None and base_1ep else None
            row["delta_auc_vs_joint_best"] = r.vs_joint_best
            row["delta_auc_pct_vs_joint_best"] = (
                100 * r.vs_joint_best / base_best if r.vs_joint_best is not None and base_best else None
            )
            row["wall_time_s"] = r.wall_time_s
            row["samples_per_s"] = r.samples_per_s
            row["one_epoch_drop_after_epoch"] = r.one_epoch_drop[0] if r.one_epoch_drop else None
            row["one_epoch_drop_auc"] = r.one_epoch_drop[1] if r.one_epoch_drop else None
            row["winner"] = r.strategy == task.winner
            rows.append(row)
    return rows


def write_csv(comparison: Comparison, path: str) -> None:
    """One row per task and strategy; empty cells where a figure does not exist (e.g. std of one seed)."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in csv_rows(comparison):
            writer.writerow({k: ("" if v is None else repr(v) if isinstance(v, float) else v) for k, v in row.items()})


def write_window_csv(comparison: Comparison, path: str) -> None:
    """Final test AUC per task, seed and window start, and each seed's fitted slope."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["task", "seed", "window_start", "final_test_auc", "seed_slope"])
        for fit in comparison.windows:
            for seed, points in sorted(fit.per_seed.items()):
                for w, auc in sorted(points.items()):
                    writer.writerow([fit.task, seed, repr(w), repr(auc), repr(fit.slopes[seed]) if seed in fit.slopes else ""])
