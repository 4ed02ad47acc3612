"""Evaluation: AUC, logloss and normalised entropy per task over a whole split."""

import math
from typing import Dict, Iterable, List, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torchmetrics.functional.classification import binary_auroc

from dlrm_multiepoch.models.dlrm import ModelOutput

TaskMetrics = Dict[str, Dict[str, float]]


def binary_metrics(logits: torch.Tensor, labels: torch.Tensor) -> Dict[str, float]:
    """AUC, logloss (natural log) and NE (logloss over the entropy of the base rate)."""
    labels = labels.double()
    logloss = F.binary_cross_entropy_with_logits(logits.double(), labels).item()
    p = labels.mean().item()
    base = -(p * math.log(p) + (1 - p) * math.log(1 - p)) if 0.0 < p < 1.0 else float("nan")
    auc = binary_auroc(logits.double(), labels.long()).item() if 0.0 < p < 1.0 else float("nan")
    return {"auc": auc, "logloss": logloss, "ne": logloss / base, "positive_rate": p, "rows": float(labels.numel())}


def gather_outputs(outputs: List[ModelOutput]) -> Dict[str, torch.Tensor]:
    """Concatenate this rank's outputs, gather all ranks' and drop padding rows.

    Every rank ran the same number of equal-size batches (the loader pads), so a plain
    ``all_gather`` of equal-shape tensors suffices.
    """
    # One [N, 2 * tasks + 1] tensor on the outputs' device (where the backend gathers:
    # CPU for gloo, CUDA for nccl), moved to the host once.
    n_tasks = outputs[0].logits.shape[1]
    packed = torch.cat([torch.cat([o.logits, o.labels, o.weights[:, None]], dim=1).float() for o in outputs])
    if dist.is_initialized() and dist.get_world_size() > 1:
        parts = [torch.empty_like(packed) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, packed)
        packed = torch.cat(parts)
    packed = packed.cpu()
    logits, labels, weights = packed[:, :n_tasks], packed[:, n_tasks : 2 * n_tasks], packed[:, -1]
    keep = weights > 0
    return {"logits": logits[keep], "labels": labels[keep]}


def task_metrics(outputs: List[ModelOutput], tasks: List[str]) -> TaskMetrics:
    """Metrics per task over all ranks' outputs of one pass over a split."""
    merged = gather_outputs(outputs)
    return {t: binary_metrics(merged["logits"][:, i], merged["labels"][:, i]) for i, t in enumerate(tasks)}


@torch.no_grad()
def run_eval_pass(progress, batches: Iterable) -> List[ModelOutput]:
    """Run ``progress`` (a train pipeline's, with the model in eval mode) over ``batches``.

    TorchRec pipelines skip backward and optimizer steps when the model is not
    training, so the same pipeline serves evaluation (as in TorchRec's dlrm_main).
    """
    it = iter(batches)
    outputs: List[ModelOutput] = []
    while True:
        try:
            outputs.append(progress(it))
        except StopIteration:
            return outputs


def undefined_metrics(results: Dict[str, TaskMetrics]) -> Dict[Tuple[str, str], str]:
    """A message per ``(split, task)`` whose metrics are undefined (NaN), saying why.

    AUC and NE are undefined when a task's labels are all one class; every metric is
    when the model's outputs are not finite.

    Example::

        undefined_metrics({"test": {"love": {"auc": nan, "ne": nan, "logloss": 0.1, "positive_rate": 0.0, ...}}})
        # {("test", "love"): "test/love: all 87 labels are 0, so AUC and NE are undefined (...)"}
    """
    out = {}
    for split, per_task in results.items():
        for task, m in per_task.items():
            undefined = [name for name in ("auc", "logloss", "ne") if not math.isfinite(m[name])]
            if not undefined:
                continue
            p = m["positive_rate"]
            why = f"all {int(m['rows'])} labels are {int(p)}" if p in (0.0, 1.0) else "the model's outputs are not finite"
            out[(split, task)] = (
                f"{split}/{task}: {why}, so {', '.join(undefined)} undefined (TensorBoard gets NaN, summary.json null)"
            )
    return out
