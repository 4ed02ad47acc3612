"""Loss terms of the multi-path model and the pre-training stage.

All take per-sample ``weights`` (0 marks the loader's padding rows) or validity masks,
so padding never contributes, and all return a scalar mean over what counts.
"""

import torch
import torch.nn.functional as F

from dlrm_multiepoch.models.dlrm import weighted_bce

__all__ = ["weighted_bce", "pairwise_ranking_loss", "in_batch_info_nce"]


def pairwise_ranking_loss(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """BPR-style logistic loss over every (positive, negative) pair of a task in the batch.

    For each task, ``softplus(-(s_pos - s_neg))`` averaged over all pairs of a positive
    and a negative real sample of that task, then averaged over tasks that have at
    least one pair. Using all pairs (not a sample) keeps it deterministic; at a few
    hundred rows per rank the ``[T, B, B]`` tensor is small.

    Args:
        logits: ``[B, T]``.
        labels: ``[B, T]`` of 0/1.
        weights: ``[B]``, 0 for padding rows.

    Example::

        loss = pairwise_ranking_loss(out.logits, labels, batch.weights)
    """
    scores = logits.t()  # [T, B]
    pos = (labels * weights[:, None]).t()
    neg = ((1.0 - labels) * weights[:, None]).t()
    pair_weight = pos[:, :, None] * neg[:, None, :]  # [T, B_pos, B_neg]
    margin = scores[:, :, None] - scores[:, None, :]
    per_task = (F.softplus(-margin) * pair_weight).sum(dim=(1, 2)) / pair_weight.sum(dim=(1, 2)).clamp_min(1.0)
    has_pairs = (pair_weight.sum(dim=(1, 2)) > 0).to(per_task.dtype)
    return (per_task * has_pairs).sum() / has_pairs.sum().clamp_min(1.0)


def in_batch_info_nce(
    query: torch.Tensor,
    target: torch.Tensor,
    target_ids: torch.Tensor,
    query_mask: torch.Tensor,
    target_mask: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    """InfoNCE of each query against its own target, the other rows' targets as negatives.

    Cosine similarities over ``temperature``; a softmax over the batch's targets. Other
    rows whose target is the same item are not counted as negatives (Zipf-popular items
    repeat within a batch; treating them as negatives would push an item away from
    itself).

    Args:
        query: ``[B, D]``.
        target: ``[B, D]``, row ``i`` is the positive of query ``i``.
        target_ids: ``[B]`` item ids of the targets.
        query_mask: ``[B]`` bool, rows whose loss counts.
        target_mask: ``[B]`` bool, rows whose target exists (others are never negatives
            and their query does not count either).
        temperature: softmax temperature, > 0.

    Example::

        loss = in_batch_info_nce(context, item_emb, item_ids, has_context, has_item, 0.1)
    """
    batch = query.shape[0]
    q = F.normalize(query, dim=-1)
    t = F.normalize(target, dim=-1)
    scores = (q @ t.t()) / temperature
    eye = torch.eye(batch, dtype=torch.bool, device=query.device)
    excluded = ((target_ids[:, None] == target_ids[None, :]) | ~target_mask[None, :]) & ~eye
    scores = scores.masked_fill(excluded, float("-inf"))
    per_row = F.cross_entropy(scores, torch.arange(batch, device=query.device), reduction="none")
    counted = (query_mask & target_mask).to(per_row.dtype)
    # The diagonal is never masked, so per_row is finite and rows that do not count
    # contribute exactly 0 (value and gradient).
    return (per_row * counted).sum() / counted.sum().clamp_min(1.0)
