"""The sweep's console follower: one short line per end-of-epoch evaluation of the run in progress.

It reads the run's ``summary.json`` (rewritten by the training app after every
evaluation) and prints validation and test AUC per task, short enough for a terminal;
the row slices (``test.unseen_user``, ...), the train sample, logloss and NE are in
the run's log, TensorBoard and ``dlrm-multiepoch compare``. An undefined AUC (an empty
split, labels of one class: ``null`` in the summary) prints as ``n/a``.

Example::

    follower = EvaluationFollower("runs/bx/joint-s0", print)
    follower.poll()   # "    epoch 1: val like 0.7012 love 0.6634 | test like 0.7408 love 0.7956"
"""

import math
from typing import Any, Callable, Dict, Mapping

from dlrm_multiepoch.run_files import read_summary, whole_epoch_evaluations

# The splits the console shows, in this order (the rest stays in TensorBoard and the table).
SHOWN_SPLITS = ("val", "test")


class EvaluationFollower:
    """Prints each new whole-epoch evaluation of a run's ``summary.json`` as one line
    (and the restored best-validation model, for the automatic schedule).

    Args:
        run_dir: the run's folder (it may not exist yet).
        emit: receives each line.
    """

    def __init__(self, run_dir: str, emit: Callable[[str], None]):
        self.run_dir = run_dir
        self.emit = emit
        # A resumed run's earlier epochs are not news.
        self.seen = {e["epoch"] for e in whole_epoch_evaluations(self._read())}
        self.best_shown = False

    def _read(self) -> Dict[str, Any]:
        try:
            return read_summary(self.run_dir)
        except (OSError, ValueError):  # damaged, or caught mid-replace
            return {}

    def poll(self) -> None:
        """Emit the evaluations that appeared since the last call."""
        summary = self._read()
        # A branch's evaluations up to the checkpoint it started from are its parent's: not news either.
        started = summary.get("started_from")
        inherited = started.get("step") if isinstance(started, dict) else None
        # Mid-epoch evaluations (--eval_every_n_steps, the auto schedule's) stay in the log.
        for e in whole_epoch_evaluations(summary):
            epoch = e["epoch"]
            if epoch in self.seen or _at_or_before(e.get("step"), inherited):
                continue
            self.seen.add(epoch)
            self.emit(f"    epoch {epoch:g}: {auc_line(e)}")
        best = summary.get("best")
        if isinstance(best, dict) and not self.best_shown:
            self.best_shown = True
            epoch = best.get("epoch")
            at = f"epoch {epoch:.2f}" if isinstance(epoch, (int, float)) else "epoch unknown"
            self.emit(f"    kept its best-validation weights ({at}): {auc_line(best)}")


def _at_or_before(step: Any, limit: Any) -> bool:
    numbers = all(isinstance(v, int) and not isinstance(v, bool) for v in (step, limit))
    return numbers and step <= limit


def auc_line(evaluation: Mapping[str, Any]) -> str:
    """``val like 0.7012 love n/a | test like 0.7408 love 0.7956`` from one evaluation's per-split metrics.

    Example::

        auc_line({"test": {"like": {"auc": 0.74}, "love": {"auc": None}}})   # "test like 0.7400 love n/a"
    """
    parts = []
    for split in SHOWN_SPLITS:
        per_task = evaluation.get(split)
        if isinstance(per_task, dict) and per_task:
            parts.append(f"{split} " + " ".join(f"{task} {_auc(m)}" for task, m in per_task.items()))
    return " | ".join(parts) or "no validation or test evaluation"


def _auc(metrics: Any) -> str:
    value = metrics.get("auc") if isinstance(metrics, dict) else None
    if isinstance(value, (int, float)) and math.isfinite(value):
        return f"{value:.4f}"
    return "n/a"
