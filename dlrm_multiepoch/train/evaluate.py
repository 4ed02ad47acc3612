"""Evaluation: the metrics of :data:`~dlrm_multiepoch.metrics.METRICS` per task (and per slice of rows).

Each rank adds its scored rows to a fixed-size metric state, and one ``all_reduce``
sums the states: memory and communication do not grow with the split, and no rank
ever holds another rank's predictions. (TorchRec's ``AUCMetric`` and torchmetrics'
exact ``BinaryAUROC`` keep every prediction and gather them all; their state-sum
variants bin scores on a fixed threshold grid with no error bound.)

- logloss, NE, positive rate, rows: sums, exact up to float64 summation order.
- calibration-free NE (``cal_ne``): the NE of the best affine recalibration of the
  logits, fitted on the same histograms (:mod:`recalibrated`).
- AUC: from per-label histograms of the float32 logits over the top
  :data:`SCORE_BITS` bits of their order-preserving integer form (sign, exponent and
  11 mantissa bits: a bin spans 0.05% of its logit's magnitude). Rows in one bin count
  as ties, so the only error comes from positive/negative pairs sharing a bin with
  different scores; ``auc_error_bound`` reports its exact upper bound,
  ``0.5 * sum_b pos_b * neg_b / (P * N)``.
"""

import collections
import math
from typing import Callable, Deque, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F

from dlrm_multiepoch.metrics import METRIC_NAMES
from dlrm_multiepoch.step_output import StepOutput
from dlrm_multiepoch.train.recalibrated import recalibrated_ne

TaskMetrics = Dict[str, Dict[str, float]]
SCORE_BITS = 20
_SUMS = 3  # per (slice, task): BCE sum, rows, positives


def score_bins(logits: torch.Tensor, bits: int = SCORE_BITS) -> torch.Tensor:
    """Bin index in ``[0, 2**bits)`` of each float32 logit, monotone in the logit."""
    key = logits.float().contiguous().view(torch.int32).long()
    # Negative floats order backwards as integers: flip their magnitude bits.
    key = torch.where(key < 0, key ^ 0x7FFFFFFF, key) + (1 << 31)
    return key >> (32 - bits)


class BinaryMetrics:
    """Streaming per-task binary metrics over one pass, summed across ranks.

    Args:
        tasks: task names, in logit column order.
        slices: names of row slices reported besides all rows (e.g. ``["seen", "unseen"]``);
            :meth:`update` then takes each row's slice index.
        bits: histogram resolution of the AUC (``2**bits`` bins per task and label).
        device: where the state lives before the first update (default: the logits'
            device; CPU if no batch arrives).

    Example::

        metrics = BinaryMetrics(["like", "love"])
        for out in eval_outputs(pipeline.progress, loader):   # out: a StepOutput
            metrics.update(out.logits, out.labels, out.weights)   # [B, 2], [B, 2], [B]
        results = metrics.compute()     # collective: every rank gets the same numbers
        results["like"]["auc"]
    """

    def __init__(
        self,
        tasks: Sequence[str],
        slices: Sequence[str] = (),
        bits: int = SCORE_BITS,
        device: Optional[torch.device] = None,
    ) -> None:
        self.tasks = list(tasks)
        self.slices = list(slices)
        self.bits = bits
        self.device = device
        self._hist: Optional[torch.Tensor] = None  # [groups, tasks, 2 labels, 2**bits] float64 weights
        self._sums: Optional[torch.Tensor] = None  # [groups, tasks, _SUMS] float64

    @property
    def groups(self) -> int:
        return 1 + len(self.slices)

    def update(
        self,
        logits: torch.Tensor,
        labels: torch.Tensor,
        weights: Optional[torch.Tensor] = None,
        slice_ids: Optional[torch.Tensor] = None,
        slice_masks: Optional[torch.Tensor] = None,
    ) -> None:
        """Add one batch: ``[B, tasks]`` logits and 0/1 labels (``[B]`` with one task), ``[B]`` weights
        (0 = padding; None: every row 1), optionally ``[B]`` slice indices into ``slices`` (one slice
        per row) or ``[B, slices]`` boolean ``slice_masks`` (a row may be in several slices).

        Raises:
            ValueError: shapes other than these, naming the one expected.
        """
        logits, labels, weights = self._checked(logits, labels, weights)
        self._allocate(logits.device)
        logits, labels, weights = logits.detach(), labels.detach().double(), weights.detach().double()
        groups = [(0, None)]
        if slice_ids is not None:
            groups += [(1 + s, slice_ids == s) for s in range(len(self.slices))]
        elif slice_masks is not None:
            groups += [(1 + s, slice_masks[:, s]) for s in range(len(self.slices))]
        bce = F.binary_cross_entropy_with_logits(logits.double(), labels, reduction="none")
        bins = score_bins(logits, self.bits)
        offsets = labels.long() * (1 << self.bits)  # label 1 histograms follow label 0's
        for g, rows in groups:
            w = weights if rows is None else weights * rows.double()
            for t in range(len(self.tasks)):
                self._sums[g, t, 0] += (bce[:, t] * w).sum()
                self._sums[g, t, 1] += w.sum()
                self._sums[g, t, 2] += (labels[:, t] * w).sum()
                self._hist[g, t].view(-1).index_add_(0, bins[:, t] + offsets[:, t], w)

    def _checked(
        self, logits: torch.Tensor, labels: torch.Tensor, weights: Optional[torch.Tensor]
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``[B, tasks]`` logits and labels and ``[B]`` weights, or ValueError naming the shapes expected."""
        tasks = len(self.tasks)
        given = {"logits": list(logits.shape), "labels": list(labels.shape)}  # as passed, for the messages
        if logits.dim() == 1 and tasks == 1:  # one task's logits, as most models return them
            logits, labels = logits[:, None], labels.reshape(-1, 1) if labels.dim() == 1 else labels
        rows = logits.shape[0] if logits.dim() else 0
        one = " or [B]" if tasks == 1 else ""
        if logits.dim() != 2 or logits.shape[1] != tasks:
            raise ValueError(
                f"BinaryMetrics({self.tasks}).update: logits of shape {given['logits']}; expected [B, {tasks}]{one} "
                f"(one column per task, in the order {self.tasks})"
            )
        if labels.shape != logits.shape:
            raise ValueError(
                f"BinaryMetrics({self.tasks}).update: labels of shape {given['labels']}; expected the logits' shape "
                f"{given['logits']}"
            )
        if weights is None:
            return logits, labels, torch.ones(rows, device=logits.device)
        if weights.shape != (rows,):
            raise ValueError(
                f"BinaryMetrics({self.tasks}).update: weights of shape {list(weights.shape)}; expected [{rows}] "
                "(one per row, 0 for padding)"
            )
        return logits, labels, weights

    def _allocate(self, device: torch.device) -> None:
        if self._hist is None:
            shape = (self.groups, len(self.tasks))
            # Weighted counts (validation rows may weigh other than 1: --val_unseen_share); integers stay exact.
            self._hist = torch.zeros(shape + (2, 1 << self.bits), dtype=torch.float64, device=device)
            self._sums = torch.zeros(shape + (_SUMS,), dtype=torch.float64, device=device)

    def _reduced(self) -> List[torch.Tensor]:
        self._allocate(self.device or torch.device("cpu"))  # a rank that saw no batch adds zeros
        hist, sums = self._hist.clone(), self._sums.clone()
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(hist)
            dist.all_reduce(sums)
        return [hist.cpu(), sums.cpu()]

    def compute(self) -> TaskMetrics:
        """Metrics of all rows, per task (a collective call)."""
        return self.compute_all()[0]

    def compute_all(self) -> List[TaskMetrics]:
        """Metrics of all rows, then of each slice (one collective call)."""
        hist, sums = self._reduced()
        return [
            {task: _task_metrics(hist[g, t], sums[g, t]) for t, task in enumerate(self.tasks)}
            for g in range(self.groups)
        ]


def _task_metrics(hist: torch.Tensor, sums: torch.Tensor) -> Dict[str, float]:
    bce, rows, positives = (float(v) for v in sums)
    neg, pos = hist[0].double(), hist[1].double()
    n_pos, n_neg = float(pos.sum()), float(neg.sum())
    p = positives / rows if rows else float("nan")
    base = -(p * math.log(p) + (1 - p) * math.log(1 - p)) if 0.0 < p < 1.0 else float("nan")
    logloss = bce / rows if rows else float("nan")
    auc = bound = cal_ne = float("nan")
    if n_pos and n_neg:
        cal_ne = recalibrated_ne(neg, pos)
        below = torch.cumsum(neg, 0) - neg
        auc = float((pos * (below + 0.5 * neg)).sum()) / (n_pos * n_neg)
        bound = 0.5 * float((pos * neg).sum()) / (n_pos * n_neg)
    return {
        "auc": auc,
        "logloss": logloss,
        "ne": logloss / base,
        "cal_ne": cal_ne,
        "positive_rate": p,
        "rows": rows,
        "auc_error_bound": bound,
    }


@torch.no_grad()
def eval_outputs(progress: Callable[[Iterator], StepOutput], batches: Iterable) -> Iterator[StepOutput]:
    """Run ``progress`` (a train pipeline's, with the model in eval mode) over ``batches``,
    yielding each step's output (your model's, a :class:`~dlrm_multiepoch.step_output.StepOutput`).

    TorchRec pipelines skip backward and optimizer steps when the model is not
    training, so the same pipeline serves evaluation (as in TorchRec's dlrm_main).
    """
    it = iter(batches)
    while True:
        try:
            out = progress(it)
        except StopIteration:
            return
        yield out


def undefined_metrics(results: Dict[str, TaskMetrics]) -> Dict[Tuple[str, str], str]:
    """A message per ``(split, task)`` whose metrics are undefined (NaN), saying why.

    AUC and NE are undefined when a task's labels are all one class; every metric is
    on a slice without rows, and when the model's outputs are not finite.

    Example::

        undefined_metrics({"test": {"love": {"auc": nan, "ne": nan, "logloss": 0.1, "positive_rate": 0.0, ...}}})
        # {("test", "love"): "test/love: all 87 labels are 0, so AUC and NE are undefined (...)"}
    """
    out = {}
    for split, per_task in results.items():
        for task, m in per_task.items():
            undefined = [name for name in METRIC_NAMES if name in m and not math.isfinite(m[name])]
            if not undefined:
                continue
            p = m["positive_rate"]
            if not m["rows"]:  # an empty slice (e.g. no unseen users on a random split)
                why = "it has no rows"
            elif p in (0.0, 1.0):
                why = f"all {int(m['rows'])} labels are {int(p)}"
            else:
                why = "the model's outputs are not finite"
            out[(split, task)] = (
                f"{split}/{task}: {why}, so {', '.join(undefined)} undefined (TensorBoard gets NaN, summary.json null)"
            )
    return out


ALL_ROWS = ""
SEEN = "seen"  # rows in none of the data's slices


def slice_masks(codes: torch.Tensor, slices: Sequence[str]) -> torch.Tensor:
    """``[B, len(slices) + 1]`` booleans from slice codes: bit ``i`` = slice ``i``, then
    :data:`SEEN` (no bit set)."""
    bits = torch.arange(len(slices), device=codes.device)
    masks = (codes[:, None] >> bits) & 1 == 1
    return torch.cat([masks, (codes == 0)[:, None]], dim=1)


def evaluate_slices(
    progress: Callable[[Iterator], StepOutput],
    batches: Iterable,
    tasks: Sequence[str],
    device: Optional[torch.device] = None,
    slices: Sequence[str] = (),
) -> Dict[str, TaskMetrics]:
    """Per-task metrics of all rows (key :data:`ALL_ROWS`) and, with ``slices`` (the
    data's slice names, bit order of the batches' ``slices`` codes), of each slice and of
    :data:`SEEN` rows, in one pass (a collective call).

    Pipelines read batches ahead but return outputs in batch order, so the codes of
    the batches read are queued and taken as their outputs come.
    """
    names = [*slices, SEEN] if slices else []
    metrics = BinaryMetrics(tasks, slices=names, device=device)
    codes: Deque[Optional[torch.Tensor]] = collections.deque()

    def read(it: Iterable) -> Iterator:
        for batch in it:
            codes.append(batch.slices)
            yield batch

    for out in eval_outputs(progress, read(batches)):
        code = codes.popleft()
        masks = slice_masks(code.to(out.weights.device), slices) if names and code is not None else None
        metrics.update(out.logits, out.labels, out.weights, slice_masks=masks)
    return dict(zip([ALL_ROWS, *names], metrics.compute_all()))


class SplitEvaluator:
    """Metrics of named splits and of each row slice of them (``test.unseen_user``, ...), in eval mode.

    Args:
        model: the model (put in eval mode for the pass, back in train mode after).
        progress: what runs a batch, e.g. the train pipeline's ``progress``.
        loaders: split name -> its evaluation batches.
        tasks: the model's tasks.
        device: compute device.
        slices: the data's slice names.
        unsliced: splits whose slices are not reported (a train sample is seen by definition).

    Example::

        evaluate = SplitEvaluator(dmp, pipeline.progress, {"test": test_loader}, ["like"], device)
        results = evaluate(["test"])        # {"test": {"like": {"auc": ...}}, "test.unseen_user": ...}
    """

    def __init__(
        self,
        model: torch.nn.Module,
        progress: Callable[[Iterator], StepOutput],
        loaders: Dict[str, Iterable],
        tasks: Sequence[str],
        device: Optional[torch.device] = None,
        slices: Sequence[str] = (),
        unsliced: Sequence[str] = (),
    ) -> None:
        self.model, self.progress, self.loaders, self.tasks = model, progress, loaders, tasks
        self.device, self.slices, self.unsliced = device, slices, set(unsliced)

    def __call__(self, splits: Sequence[str]) -> Dict[str, TaskMetrics]:
        self.model.eval()
        results: Dict[str, TaskMetrics] = {}
        for split in splits:
            slices = self.slices if split not in self.unsliced else []
            per_slice = evaluate_slices(self.progress, self.loaders[split], self.tasks, self.device, slices)
            for name, metrics in per_slice.items():
                results[split if name == ALL_ROWS else f"{split}.{name}"] = metrics
        self.model.train()
        return results
