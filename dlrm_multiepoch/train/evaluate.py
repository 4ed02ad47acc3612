"""Evaluation: AUC, logloss and normalised entropy per task over a whole split, and over
row slices of it (e.g. rows whose user id is unseen in training)."""

import math
from typing import Dict, Iterable, List, Mapping, Optional

import numpy as np
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


def _all_gather_cat(t: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized() and dist.get_world_size() > 1:
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, t)
        return torch.cat(parts)
    return t


def gather_outputs(outputs: List[ModelOutput], row_index: Optional[List[torch.Tensor]] = None) -> Dict[str, torch.Tensor]:
    """Concatenate this rank's outputs, gather all ranks' and drop padding rows.

    Every rank ran the same number of equal-size batches (the loader pads), so a plain
    ``all_gather`` of equal-shape tensors suffices. With ``row_index`` (the batches' row
    numbers in their split, in output order) the result also holds ``row_index``.
    """
    # One [N, 2 * tasks + 1] tensor on the outputs' device (where the backend gathers:
    # CPU for gloo, CUDA for nccl), moved to the host once.
    n_tasks = outputs[0].logits.shape[1]
    packed = torch.cat([torch.cat([o.logits, o.labels, o.weights[:, None]], dim=1).float() for o in outputs])
    packed = _all_gather_cat(packed).cpu()
    logits, labels, weights = packed[:, :n_tasks], packed[:, n_tasks : 2 * n_tasks], packed[:, -1]
    keep = weights > 0
    merged = {"logits": logits[keep], "labels": labels[keep]}
    if row_index is not None:
        # Row numbers can exceed float32's exact range: gathered on their own, as int64.
        rows = _all_gather_cat(torch.cat(row_index[: len(outputs)]).to(device=outputs[0].logits.device, dtype=torch.int64)).cpu()
        merged["row_index"] = rows[keep]
    return merged


def task_metrics(outputs: List[ModelOutput], tasks: List[str]) -> TaskMetrics:
    """Metrics per task over all ranks' outputs of one pass over a split."""
    return merged_task_metrics(gather_outputs(outputs), tasks)


def merged_task_metrics(merged: Mapping[str, torch.Tensor], tasks: List[str], rows: Optional[torch.Tensor] = None) -> TaskMetrics:
    """Metrics per task of gathered outputs, over all rows or the boolean ``rows`` mask."""
    logits, labels = merged["logits"], merged["labels"]
    if rows is not None:
        logits, labels = logits[rows], labels[rows]
    return {t: binary_metrics(logits[:, i], labels[:, i]) for i, t in enumerate(tasks)}


def slice_metrics(merged: Mapping[str, torch.Tensor], slices: Mapping[str, np.ndarray], tasks: List[str]) -> Dict[str, TaskMetrics]:
    """Metrics per task on each slice (``bool [split rows]``) of a split that is neither
    empty nor the whole split.

    ``merged`` must come from :func:`gather_outputs` with ``row_index``.
    """
    out: Dict[str, TaskMetrics] = {}
    for name, mask in slices.items():
        rows = torch.from_numpy(np.asarray(mask, dtype=bool))[merged["row_index"]]
        if bool(rows.any()) and not bool(rows.all()):
            out[name] = merged_task_metrics(merged, tasks, rows)
    return out


@torch.no_grad()
def run_eval_pass(progress, batches: Iterable, row_index: Optional[List[torch.Tensor]] = None) -> List[ModelOutput]:
    """Run ``progress`` (a train pipeline's, with the model in eval mode) over ``batches``.

    TorchRec pipelines skip backward and optimizer steps when the model is not
    training, so the same pipeline serves evaluation (as in TorchRec's dlrm_main).
    Pipelines read batches ahead but return outputs in batch order, so with a list
    ``row_index`` the batches' ``row_index`` tensors, appended as read, line up with the
    outputs (a pipeline may have read more than it returned).
    """

    def read(it: Iterable) -> Iterable:
        for batch in it:
            if row_index is not None:
                row_index.append(batch.row_index)
            yield batch

    it = iter(read(batches))
    outputs: List[ModelOutput] = []
    while True:
        try:
            outputs.append(progress(it))
        except StopIteration:
            return outputs
