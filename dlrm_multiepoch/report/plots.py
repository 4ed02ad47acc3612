"""PNG plots of a comparison: test AUC per epoch per strategy, and the update-window fit.

One panel per task, each ``PANEL_PX`` pixels; the seed spread (± one std) is shaded.

Example::

    plot_curves(comparison, "runs/bx/compare/test_auc.png")
"""

from typing import Tuple

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from dlrm_multiepoch.report.compare import Comparison  # noqa: E402

PANEL_PX: Tuple[int, int] = (560, 420)
DPI = 100


def _figure(panels: int):
    width, height = PANEL_PX
    fig, axes = plt.subplots(1, panels, figsize=(width * panels / DPI, height / DPI), dpi=DPI, squeeze=False)
    return fig, axes[0]


def plot_curves(comparison: Comparison, path: str) -> None:
    """Test AUC per epoch, one line per strategy (mean over seeds, ± std shaded), one panel per task
    (and configuration group). Undefined epochs are left out of a line.

    A star marks the model a run ends holding when that is not its last epoch's (the
    automatic schedule's restored best-validation weights, at their mean epoch).
    """
    tasks = [t for t in comparison.tasks if t.rows]
    fig, axes = _figure(max(len(tasks), 1))
    for ax, task in zip(axes, tasks):
        for row in task.rows:
            epochs = [e for e in sorted(row.curve) if row.curve[e] is not None]
            mean = np.array([row.curve[e].mean for e in epochs])  # type: ignore[union-attr]
            std = np.array([row.curve[e].std or 0.0 for e in epochs])  # type: ignore[union-attr]
            (line,) = ax.plot(epochs, mean, marker="o", label=row.strategy, linewidth=1.5)
            if row.seeds > 1:
                ax.fill_between(epochs, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)
            if row.deployed_epoch is not None and row.test_auc is not None:  # restored best-validation weights
                ax.plot([row.deployed_epoch], [row.test_auc.mean], marker="*", markersize=11, color=line.get_color())
        if task.joint_best is not None:
            at = "validation epoch" if task.joint_best.on == "val" else "epoch"
            ax.axhline(task.joint_best.auc, color="grey", linestyle=":", linewidth=1, label=f"joint at its best {at}")
        seeds = max(r.seeds for r in task.rows)
        group = f"[{task.group}] " if task.group else ""
        ax.set_title(f"{group}{task.task}: test AUC ({seeds} seed{'s' if seeds > 1 else ''}, ± std shaded)", fontsize=10)
        ax.set_xlabel("epoch")
        ax.set_ylabel("test AUC")
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    if tasks:
        axes[-1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_windows(comparison: Comparison, path: str) -> None:
    """Final test AUC against update-window start: seeds as points, the mean, and the fitted line with its slope."""
    fig, axes = _figure(max(len(comparison.windows), 1))
    for ax, fit in zip(axes, comparison.windows):
        for seed, points in sorted(fit.per_seed.items()):
            ws = sorted(points)
            ax.scatter(ws, [points[w] for w in ws], s=14, alpha=0.6, label=f"seed {seed}")
        ws = np.array(sorted(fit.final_auc))
        means = np.array([fit.final_auc[w].mean for w in ws])
        ax.plot(ws, means, color="black", marker="o", linewidth=1.5, label="mean")
        if len(ws) > 1:
            slope, intercept = np.polyfit(ws, means, 1)
            label = f"fit: {100 * slope:+.2f} pt/epoch"
            if fit.slope is not None and fit.slope.std is not None:
                label += f" (seeds: {100 * fit.slope.mean:+.2f} ± {100 * fit.slope.std:.2f})"
            ax.plot(ws, intercept + slope * ws, color="red", linestyle="--", linewidth=1, label=label)
        group = f"[{fit.group}] " if fit.group else ""
        ax.set_title(f"{group}{fit.task}: final test AUC by update-window start", fontsize=10)
        ax.set_xlabel("epoch the tables start training")
        ax.set_ylabel("final test AUC")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
