"""Rank-0 logging: TensorBoard scalars, console lines and a JSON summary per run."""

import os
from typing import Any, Dict, Mapping, Optional, Sequence, Set, Tuple

from torch.utils.tensorboard import SummaryWriter

from dlrm_multiepoch.json_io import json_safe, write_json
from dlrm_multiepoch.metrics import METRICS
from dlrm_multiepoch.json_state import pack_json_state, unpack_json_state
from dlrm_multiepoch.run_files import summary_path
from dlrm_multiepoch.saved_state import StateMismatch, check_state
from dlrm_multiepoch.step_output import StepOutput
from dlrm_multiepoch.train.evaluate import undefined_metrics
from dlrm_multiepoch.train.nonfinite import finite_mean


class MetricsLogger:
    """Writes scalars to ``<run_dir>`` (TensorBoard) and a ``summary.json`` beside them.

    Only the main rank writes; other ranks get a logger whose calls do nothing, so
    call sites need no rank checks. The summary is rewritten atomically after every
    evaluation, so a job killed in epoch 3 keeps epochs 1 and 2. It is strict JSON:
    undefined metrics (NaN) are stored as ``null``. The logger is ``Stateful``: its
    summary is saved with each checkpoint and restored on resume.

    Args:
        run_dir: folder of this run's event files and summary.
        enabled: False on non-main ranks.
        purge_step: when resuming, the first step not covered by the checkpoint:
            TensorBoard hides events the interrupted job logged from this step on, so
            the re-trained steps are not shown twice.

    Example::

        logger = MetricsLogger("runs/bookcrossing-joint", enabled=env.is_main)
        logger.scalars({"train/loss": 0.52}, step=100)
    """

    def __init__(self, run_dir: str, enabled: bool = True, purge_step: Optional[int] = None) -> None:
        self.run_dir = run_dir
        self.enabled = enabled
        self.summary: Dict[str, Any] = {"evaluations": []}
        self._warned: Set[Tuple[str, str]] = set()
        self._writer: Optional[SummaryWriter] = None
        if enabled:
            os.makedirs(run_dir, exist_ok=True)
            self._writer = SummaryWriter(log_dir=run_dir, purge_step=purge_step)

    def scalars(self, values: Dict[str, float], step: int) -> None:
        if self._writer is None:
            return
        for tag, value in values.items():
            self._writer.add_scalar(tag, value, global_step=step)

    def info(self, message: str) -> None:
        if self.enabled:
            print(message, flush=True)

    def text(self, tag: str, text: str, step: Optional[int] = None) -> None:
        if self._writer is not None:
            self._writer.add_text(tag, text, global_step=step)

    def record(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key`` in the summary (and persist it)."""
        self.summary[key] = json_safe(value)
        self._write_summary()

    def evaluation(self, entry: Dict[str, Any]) -> None:
        """Append one evaluation (epoch, step, metrics) to the summary and persist it."""
        self.summary["evaluations"].append(json_safe(entry))
        self._write_summary()

    def log_evaluation(self, results: Mapping[str, Mapping[str, Mapping[str, float]]], step: int, epoch: float) -> None:
        """An evaluation's metrics: scalars at ``step``, an entry of ``evaluations``, a console line per split
        and task, and a warning (once per split and task) for each undefined metric."""
        self.scalars({"eval/epoch": epoch} | metric_scalars(results), step)
        self.evaluation({"epoch": epoch, "step": step, **results})
        for key, warning in undefined_metrics(dict(results)).items():
            if key not in self._warned:
                self._warned.add(key)
                self.info(f"WARNING: {warning}")
        self.info(format_metrics(f"eval after epoch {epoch:g} (step {step}):", results))

    def restore(self, summary: Dict[str, Any]) -> None:
        """Continue the summary of a resumed run: its evaluations come first, this run's records win.

        Example::

            logger.restore(checkpoint_state["summary"])  # summary.json keeps epochs 1..N
        """
        evaluations = list(summary.get("evaluations", [])) + self.summary["evaluations"]
        self.summary = {**summary, **self.summary, "evaluations": evaluations}
        self._write_summary()

    def state_dict(self) -> Dict[str, Any]:
        """The summary, packed so that ``dcp.load`` finds it on any sharding (:mod:`dlrm_multiepoch.json_state`)."""
        return pack_json_state(self.summary)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue the saved summary (packed or plain); StateMismatch names an evaluation without its epoch and
        step."""
        state = unpack_json_state("metrics summary", state)
        check_state("metrics summary", state, {"evaluations": list})
        for i, entry in enumerate(state["evaluations"]):
            try:
                check_state(f"metrics summary: evaluation {i}", entry, {"epoch": (int, float), "step": int})
            except StateMismatch as e:
                raise StateMismatch(f"{e} (of {len(state['evaluations'])} saved evaluations)") from None
        self.restore(dict(state))

    def _write_summary(self) -> None:
        if self.enabled:
            write_json(summary_path(self.run_dir), self.summary)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()


def metric_scalars(results: Mapping[str, Mapping[str, Mapping[str, float]]]) -> Dict[str, float]:
    """``{split: {task: {metric: value}}}`` -> TensorBoard scalars ``split/task/metric``, for the metrics of
    :data:`~dlrm_multiepoch.metrics.METRICS`."""
    return {
        f"{split}/{task}/{name}": value
        for split, per_task in results.items()
        for task, metrics in per_task.items()
        for name, value in metrics.items()
        if name in METRICS
    }


def format_metrics(title: str, results: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    """Console lines: one per split and task, each metric of :data:`~dlrm_multiepoch.metrics.METRICS` it holds."""
    lines = [title]
    for split, per_task in results.items():
        for task, m in per_task.items():
            shown = "  ".join(f"{name} {metric.show(m[name])}" for name, metric in METRICS.items() if name in m)
            lines.append(f"  {split:>12} {task:>6}: {shown}")
    return "\n".join(lines)


def train_scalars(window: Sequence[StepOutput], epoch: int, seconds: float, world_size: int) -> Dict[str, float]:
    """TensorBoard's train scalars of a logging window: mean (finite) loss, per named loss where the outputs
    have ``losses`` (the app's ``ModelOutput``: one per task), samples/s, epoch."""
    # Local real samples times ranks: exact except in an epoch's last, padded step.
    samples = sum(float(o.weights.sum()) for o in window) * world_size
    values = {"train/loss": finite_mean([o.loss for o in window]), "train/samples_per_sec": samples / max(seconds, 1e-9)}
    values["train/epoch"] = epoch
    for name in getattr(window[0], "losses", {}):
        values[f"train/loss_{name}"] = finite_mean([o.losses[name] for o in window])
    return values
