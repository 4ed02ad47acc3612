"""The comparison as a Markdown report and a CSV table (one row per configuration group, task and strategy).

Differences are shown in AUC points (1 pt = 0.01 AUC) and in percent of the baseline, a
margin in another deciding metric (``compare --metric``) in that metric's units; undefined
figures as ``n/a`` (an empty CSV cell).

Example::

    print(to_markdown(comparison))
    write_csv(comparison, "runs/bx/compare/comparison.csv")
"""

import csv
from typing import Any, Dict, List, Optional

from dlrm_multiepoch.command_faults import shown
from dlrm_multiepoch.metrics import METRICS
from dlrm_multiepoch.report.compare import TEST, VAL, Comparison, StrategyRow, TaskComparison
from dlrm_multiepoch.report.runs import RunProblem
from dlrm_multiepoch.report.search_view import SearchView
from dlrm_multiepoch.report.stats import Stat
from dlrm_multiepoch.report.windows import WindowFit

SPLIT_NAME = {VAL: "validation", TEST: "test"}


def fmt(stat: Optional[Stat], digits: int = 4) -> str:
    if stat is None:
        return "n/a"
    return f"{stat.mean:.{digits}f}" + (f" ± {stat.std:.{digits}f}" if stat.std is not None else "")


def fmt_delta(delta: Optional[float], base: Optional[float]) -> str:
    if delta is None or base is None:
        return "n/a"
    return f"{100 * delta:+.2f} pt ({100 * delta / base:+.2f}%)"


def table_start(title: str, header: List[str]) -> List[str]:
    """A Markdown table's heading, header row and rule."""
    return [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]


def _deployed(row: StrategyRow) -> str:
    if row.deployed_epoch is not None:
        return f"best-val weights, ep {row.deployed_epoch:.2f}"
    return f"ep {row.epochs}"


def _label(task: TaskComparison) -> str:
    """How the table names the task's deciding metric (``AUC``, ``cal_ne``, ...)."""
    return METRICS[task.metric].label


def _by(task: TaskComparison, amount: float) -> str:
    """A difference in the deciding metric: AUC in points (1 pt = 0.01), any other metric in its own units."""
    return f"{100 * amount:.2f} pt" if task.metric == "auc" else f"{amount:.4f}"


def _notes(task: TaskComparison, row: StrategyRow) -> str:
    notes = []
    if row.strategy == task.winner:
        notes.append(f"**winner** (on {SPLIT_NAME[task.decided_on]})")
    elif row.strategy in task.unranked:
        notes.append(f"not ranked: no defined {SPLIT_NAME[task.decided_on]} {_label(task)}")
    if row.one_epoch_drop is not None:
        epoch, change = row.one_epoch_drop
        notes.append(f"one-epoch drop ep {epoch}→{epoch + 1} ({100 * change:+.2f} pt)")
    return "; ".join(notes)


def _joint_best_label(task: TaskComparison) -> str:
    if task.joint_best is None:
        return "joint-best"
    on = "val " if task.joint_best.on == VAL else ""
    return f"joint-best ({on}ep {task.joint_best.epoch})"


def task_markdown(task: TaskComparison) -> str:
    """One task's table and verdict."""
    base_1ep = task.joint_1ep.auc if task.joint_1ep else None
    base_best = task.joint_best.auc if task.joint_best else None
    with_val = task.val != "absent"
    # Another deciding metric than AUC gets its own columns, before the AUC ones.
    label, other = _label(task), task.metric != "auc"
    seeds = sorted({r.seeds for r in task.rows})
    what = "test AUC and logloss of the deployed models"
    what += f", and their validation {label} that picks" if with_val else f", picked on test {label}" if other else ""
    best = "best val ep" if task.decided_on == VAL else "best ep"
    header = ["strategy", "seeds", "epochs", "deployed"] + ([f"val {label}"] if with_val else [])
    header += ([f"test {label}"] if other else []) + (["val AUC"] if other and with_val else [])
    header += ["test AUC", "test logloss", best, "test AUC at best ep", "Δ test vs joint-1ep"]
    header += [f"Δ test vs {_joint_best_label(task)}", "train−test AUC", "wall time", "samples/s", "notes"]
    lines = table_start(f"{task.task}: {what} (mean ± std over {'/'.join(map(str, seeds))} seed(s))", header)
    for r in task.rows:
        cells = [r.strategy, str(r.seeds), str(r.epochs), _deployed(r)] + ([fmt(r.val_metric)] if with_val else [])
        cells += ([fmt(r.test_metric)] if other else []) + ([fmt(r.val_auc)] if other and with_val else [])
        cells += [fmt(r.test_auc), fmt(r.test_logloss), str(r.best_epoch) if r.best_epoch is not None else "n/a"]
        cells += [fmt(r.auc_best), fmt_delta(r.vs_joint_1ep, base_1ep), fmt_delta(r.vs_joint_best, base_best)]
        cells += [fmt(r.gap, 3), f"{r.wall_time_s:.0f} s" if r.wall_time_s is not None else "n/a"]
        cells += [f"{r.samples_per_s:,.0f}" if r.samples_per_s is not None else "n/a", _notes(task, r)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", verdict(task), "", curve_markdown(task, TEST)]
    if with_val:
        lines += ["", curve_markdown(task, VAL)]
    return "\n".join(lines)


def curve_markdown(task: TaskComparison, split: str = TEST) -> str:
    """AUC on ``split`` after each whole epoch, per strategy (mean ± std over seeds)."""
    curves = {r.strategy: (r.curve if split == TEST else r.val_curve, r.seeds) for r in task.rows}
    epochs = sorted({e for c, _ in curves.values() for e in c})
    lines = [
        f"| {task.task}: {SPLIT_NAME[split]} AUC after epoch | " + " | ".join(str(e) for e in epochs) + " |",
        "|" + "---|" * (len(epochs) + 1),
    ]
    fewer = False
    for name, (curve, seeds) in curves.items():
        cells = []
        for e in epochs:
            stat = curve.get(e)
            short = stat is not None and stat.n < seeds  # only some seeds reached (or recorded) this epoch
            fewer |= short
            cells.append("" if e not in curve else fmt(stat) + (f" ({stat.n} of {seeds} seeds)" if short else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if fewer:
        lines.append("\nA cell marked (n of N seeds) is the mean of the seeds that reached that epoch only.")
    return "\n".join(lines)


def decision_note(task: TaskComparison) -> str:
    """Which split picked the winner, and why a pick on test is optimistic."""
    label = _label(task)
    if task.decided_on == VAL:
        return (
            f"Picked on validation: the validation {label} of the model each run deploys; test figures are reported "
            "beside it and never used to pick."
        )
    why = {
        "absent": f"these runs have no validation {label} for this task (no validation split)",
        "undefined": f"validation {label} is undefined for this task (its validation labels are of one class, or it "
        "has no rows)",
    }[task.val]
    return (
        f"Picked on test, because {why}: the split that picks the winner also scores it, so its test {label} and "
        "margin are optimistic (the pick favours whichever strategy was lucky on these test rows). Add "
        "--val_fraction (e.g. 0.1) to the sweep's common flags to pick on validation."
    )


def verdict(task: TaskComparison) -> str:
    """The winner in words: its margin over the runner-up against the seed spread, its test AUC, against joint-best."""
    on, label = SPLIT_NAME[task.decided_on], _label(task)
    if task.no_winner is not None:
        return f"{task.task}: no winner: {task.no_winner}."
    if task.winner is None:
        if not task.rows:
            return f"{task.task}: no strategy to compare."
        nor = f", nor a defined validation {label}" if task.val == "undefined" else ""
        return f"{task.task}: no winner: no strategy has a defined {on} {label}{nor} (labels of one class, or no rows)."
    win = task.row(task.winner)
    assert win is not None
    text = f"**{task.task}: {task.winner} wins on {on}** with {on} {label} {fmt(win.figure(task.decided_on))}"
    if task.runner_up is not None and task.margin is not None:
        direction = "above" if METRICS[task.metric].sign > 0 else "below"
        text += f", {_by(task, task.margin)} {direction} {task.runner_up}"
        exceeds = task.margin_exceeds_spread
        if exceeds is None:
            text += " (one seed: the seed spread is unknown, run more seeds before trusting it)"
        else:
            spread = _by(task, task.spread)  # type: ignore[arg-type]
            text += f" ({'more' if exceeds else 'less'} than the seed spread, {spread})"
    if task.decided_on == VAL or task.metric != "auc":
        text += f"; its test AUC {fmt(win.test_auc)}"
    if task.joint_best is not None and win.vs_joint_best is not None:
        at = "validation epoch" if task.joint_best.on == VAL else "epoch"
        text += (
            f"; test AUC vs joint at its best {at} ({task.joint_best.epoch}, {task.joint_best.auc:.4f}): "
            f"{fmt_delta(win.vs_joint_best, task.joint_best.auc)}"
        )
    text += f". {decision_note(task)}"
    if task.unranked:
        text += f" Not ranked (no defined {on} {label}): {', '.join(task.unranked)}."
    drops = [r.strategy for r in task.rows if r.one_epoch_drop is not None]
    if drops:
        text += " One-epoch phenomenon (test AUC falls beyond the seed spread while train AUC rises) in: "
        text += f"{', '.join(drops)}."
    return text


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
    """The whole report: per configuration group, one section per task and the update-window fit; then the runs left out."""
    parts = [f"## Strategy comparison: {shown(comparison.experiment_dir)}"]
    if comparison.search is not None:
        parts += [search_markdown(comparison.search), "## Every branch trained to its end, per task"]
    groups = comparison.groups
    if len(groups) > 1:
        differ = sorted({f for g in groups for f in g.differs})
        parts.append(
            f"**These runs differ in {', '.join(differ)}**, not only in their strategies: they are compared in "
            f"{len(groups)} separate groups and never averaged across them."
        )
    for group in groups or [None]:
        label = group.label if group is not None else ""
        if len(groups) > 1:
            parts.append(f"## Group {label}: runs {', '.join(r.name for r in group.runs)}")  # type: ignore[union-attr]
        if group is not None and group.strategy_flags:
            parts.append(f"Strategies differ in: {', '.join(group.strategy_flags)}.")
        parts += [task_markdown(t) for t in comparison.tasks if t.rows and t.group == label]
        fits = [f for f in comparison.windows if f.group == label]
        if fits:
            parts.append("## Update-window sweep")
            parts += [window_markdown(f) for f in fits]
    if comparison.cut:
        parts.append("Branches the search cut:\n" + "\n".join(_problem(p) for p in comparison.cut))
    if comparison.problems:
        parts.append("Runs left out:\n" + "\n".join(_problem(p) for p in comparison.problems))
    return "\n\n".join(parts) + "\n"


def _problem(p: RunProblem) -> str:
    return f"- {p.name}: {p.reason} ({shown(p.path)})"


def search_markdown(view: SearchView) -> str:
    """The search's decision: each candidate's state per seed, the model it deploys and its validation figure."""
    if not view.readable:
        return (
            f"**The schedule search's record is damaged** ({view.damage}): what it decided cannot be read, so its "
            "branches are compared below as runs, with no winner named (the branches it cut show as partial "
            "runs). Rerun the same `dlrm-multiepoch search` command: it rebuilds search.json from the run folders "
            "(what was trained is kept)."
        )
    tasks = sorted({t for row in view.rows for t in row.test_auc})
    header = ["candidate", *[f"seed {s}" for s in view.seeds], "deploys (epoch)", f"val {view.metric}"]
    header += [f"test AUC {t}" for t in tasks]
    title = f"The schedule search: what each candidate deploys, on validation {view.metric} (mean ± std over seeds)"
    lines = table_start(title, header)
    for row in view.rows:
        status = [f"**{row.status[s]}**" if row.status.get(s) == "deployed" else row.status.get(s, "") for s in view.seeds]
        deploys = ", ".join("—" if row.epochs.get(s) is None else f"{row.epochs[s]:g}" for s in view.seeds)
        cells = [row.candidate, *status, deploys, fmt(row.val), *[fmt(row.test_auc.get(t)) for t in tasks]]
        lines.append("| " + " | ".join(cells) + " |")
    by_branch: Dict[str, List[int]] = {}
    for seed, (branch, _, _) in sorted(view.deployed.items()):
        by_branch.setdefault(branch, []).append(seed)
    verdicts = []
    for branch, seeds in by_branch.items():
        figures = ", ".join(
            f"seed {s}: after epoch {view.deployed[s][1]:g}, validation {view.metric} {view.deployed[s][2]:.4f}"
            for s in seeds
        )
        verdicts.append(f"**The search deployed {branch}** in seed(s) {', '.join(map(str, seeds))} ({figures})")
    verdicts += [f"Seed {s}: no decision: {why}" for s, why in sorted(view.undecided.items())]
    verdicts += [
        f"Seed {s}: not deployed: {p['branch']} after epoch {p['epoch']:g} ({p['problem']})"
        for s, passed in sorted(view.passed_over.items()) for p in passed
    ]  # fmt: skip
    note = (
        "It decides on this validation objective over the tasks (--auto_metric, --auto_task_weights), among what "
        "each candidate deploys as a preset (joint at its best validation epoch, auto its best weights, the others "
        "their last epoch); test AUC is reported, never used."
    )
    damage = [f"Its search.json is damaged ({view.damage}): rerun the search to rebuild it."] if view.damage else []
    return "\n".join(lines + ["", ". ".join(verdicts) + ". " + note, *damage])


CSV_COLUMNS = [
    "group", "task", "strategy", "seeds", "epochs", "deployed_epoch", "decided_on", "metric",
    "val_metric_last_mean", "val_metric_last_std", "test_metric_last_mean", "test_metric_last_std",
    "val_auc_last_mean", "val_auc_last_std", "test_auc_last_mean", "test_auc_last_std",
    "test_logloss_last_mean", "test_logloss_last_std", "best_epoch_on", "best_epoch",
    "test_auc_best_mean", "test_auc_best_std", "test_logloss_best_mean", "test_logloss_best_std",
    "delta_auc_vs_joint_1ep", "delta_auc_pct_vs_joint_1ep", "delta_auc_vs_joint_best", "delta_auc_pct_vs_joint_best",
    "train_minus_test_auc_mean", "train_minus_test_auc_std", "wall_time_s", "samples_per_s",
    "one_epoch_drop_after_epoch", "one_epoch_drop_auc", "winner",
]  # fmt: skip


def csv_rows(comparison: Comparison) -> List[Dict[str, Any]]:
    """One dict per group, task and strategy; ``*_last``: the deployed model (best-validation weights or last epoch)."""
    rows = []
    for task in comparison.tasks:
        base_1ep = task.joint_1ep.auc if task.joint_1ep else None
        base_best = task.joint_best.auc if task.joint_best else None
        for r in task.rows:
            row: Dict[str, Any] = {"group": task.group, "task": task.task, "strategy": r.strategy, "seeds": r.seeds}
            row |= {"epochs": r.epochs, "deployed_epoch": r.deployed_epoch, "decided_on": task.decided_on}
            row |= {"metric": task.metric}
            row |= {"best_epoch_on": r.best_on, "best_epoch": r.best_epoch}
            for key, stat in (
                ("val_metric_last", r.val_metric), ("test_metric_last", r.test_metric),
                ("val_auc_last", r.val_auc), ("test_auc_last", r.test_auc), ("test_logloss_last", r.test_logloss),
                ("test_auc_best", r.auc_best), ("test_logloss_best", r.logloss_best), ("train_minus_test_auc", r.gap),
            ):  # fmt: skip
                row[f"{key}_mean"] = stat.mean if stat else None
                row[f"{key}_std"] = stat.std if stat else None
            for name, delta, base in (("joint_1ep", r.vs_joint_1ep, base_1ep), ("joint_best", r.vs_joint_best, base_best)):
                row[f"delta_auc_vs_{name}"] = delta
                row[f"delta_auc_pct_vs_{name}"] = 100 * delta / base if delta is not None and base else None
            row["wall_time_s"] = r.wall_time_s
            row["samples_per_s"] = r.samples_per_s
            row["one_epoch_drop_after_epoch"] = r.one_epoch_drop[0] if r.one_epoch_drop else None
            row["one_epoch_drop_auc"] = r.one_epoch_drop[1] if r.one_epoch_drop else None
            row["winner"] = r.strategy == task.winner
            rows.append(row)
    return rows


def write_csv(comparison: Comparison, path: str) -> None:
    """One row per group, task and strategy; empty cells where a figure does not exist (std of one seed, n/a)."""
    with open(path, "w", newline="", errors="backslashreplace") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in csv_rows(comparison):
            writer.writerow({k: ("" if v is None else repr(v) if isinstance(v, float) else v) for k, v in row.items()})


def write_window_csv(comparison: Comparison, path: str) -> None:
    """Final test AUC per group, task, seed and window start, and each seed's fitted slope."""
    with open(path, "w", newline="", errors="backslashreplace") as f:
        writer = csv.writer(f)
        writer.writerow(["group", "task", "seed", "window_start", "final_test_auc", "seed_slope"])
        for fit in comparison.windows:
            for seed, points in sorted(fit.per_seed.items()):
                for w, auc in sorted(points.items()):
                    slope = repr(fit.slopes[seed]) if seed in fit.slopes else ""
                    writer.writerow([fit.group, fit.task, seed, repr(w), repr(auc), slope])
