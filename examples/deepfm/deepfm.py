"""The user's side of the example: a DeepFM-style TorchRec model, TorchRec's ``Batch`` and synthetic data.

Nothing here comes from dlrm-multiepoch: this is what a TorchRec user already has before
adding the project's parts (``train_deepfm.py``). The model:

- an ``EmbeddingBagCollection`` of three tables with one id per bag (``user``, ``item``,
  ``category``);
- an ``EmbeddingCollection`` sequence feature (``history``: the user's recent items),
  mean-pooled in the model;
- the dense features projected to the embedding width;
- a factorization-machine term over the five fields plus an MLP, one logit, BCE.

The data plants a user x item signal (a label is likelier where the user's and the item's
hidden vectors agree), so validation AUC moves while training.

Example::

    model = DeepFM(POOLED, SEQUENCE)                    # tables on the meta device
    loss, out = model(batch)                            # batch: torchrec.datasets.utils.Batch
"""

from typing import Dict, Iterator, List, NamedTuple, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig, JaggedTensor, KeyedJaggedTensor
from torchrec.datasets.utils import Batch

# Row 0 of every table is spare: no id uses it, so id dropout can send dropped ids there (its unknown_id=0).
POOLED = {"user": 64, "item": 96, "category": 9}  # feature -> rows; one id per bag, pooled by the EBC
SEQUENCE = {"history": 96}  # a sequence of item ids, looked up by the EC, mean-pooled by the model
HISTORY = 4  # at most this many items in a history
NUM_DENSE = 4


class DeepFMOutput(NamedTuple):
    """What the model returns beside its loss (detached): the fields the project's parts read."""

    loss: torch.Tensor  # the step's loss
    logits: torch.Tensor  # [B], one task
    labels: torch.Tensor  # [B], 0/1
    weights: torch.Tensor  # [B], 1 for every row


class DeepFM(nn.Module):
    """DeepFM over TorchRec's ``Batch``: ``forward(batch) -> (loss, DeepFMOutput)``.

    Args:
        pooled: feature -> rows of its table (one id per bag, pooled by the EBC).
        sequence: feature -> rows of its table (looked up by the EC, mean-pooled here).
        num_dense: dense features per row.
        dim: embedding width.
        hidden: the MLP's hidden width.
        device: where the tables are created (``meta``: DistributedModelParallel materialises them).
    """

    def __init__(
        self, pooled: Dict[str, int], sequence: Dict[str, int], num_dense: int = NUM_DENSE, dim: int = 8,
        hidden: int = 16, device: torch.device = torch.device("meta"),
    ) -> None:  # fmt: skip
        super().__init__()
        self.pooled, self.sequence = list(pooled), list(sequence)
        bags = [EmbeddingBagConfig(name=f, embedding_dim=dim, num_embeddings=n, feature_names=[f]) for f, n in pooled.items()]
        seqs = [EmbeddingConfig(name=f, embedding_dim=dim, num_embeddings=n, feature_names=[f]) for f, n in sequence.items()]
        self.ebc = EmbeddingBagCollection(tables=bags, device=device)
        self.ec = EmbeddingCollection(tables=seqs, device=device)
        self.dense_proj = nn.Linear(num_dense, dim)
        fields = len(pooled) + len(sequence) + 1  # the pooled tables, the mean-pooled sequences, the dense projection
        self.mlp = nn.Sequential(nn.Linear(fields * dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, batch: Batch) -> Tuple[torch.Tensor, DeepFMOutput]:
        pooled = self.ebc(batch.sparse_features)  # the EBC and the EC each read their own features
        sequences = self.ec(batch.sparse_features)
        fields = [pooled[f] for f in self.pooled] + [_mean(sequences[f]) for f in self.sequence]
        fields = torch.stack(fields + [self.dense_proj(batch.dense_features)], 1)  # [B, fields, dim]
        fm = 0.5 * (fields.sum(1).pow(2) - fields.pow(2).sum(1)).sum(1)
        logits = fm + self.mlp(fields.flatten(1)).squeeze(1)
        labels = batch.labels.float()
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        return loss, DeepFMOutput(loss.detach(), logits.detach(), labels, torch.ones_like(labels))


def _mean(sequence: JaggedTensor) -> torch.Tensor:
    """``[B, dim]``: each row's mean embedding (zeros for an empty sequence).

    Written with tensor ops only: TorchRec's pipelines trace the model (torch.fx), so no
    Python value may come from a tensor (sizes included).
    """
    offsets, lengths = sequence.offsets(), sequence.lengths()
    running = F.pad(sequence.values().cumsum(0), (0, 0, 1, 0))  # running[i]: the sum of the first i rows
    return (running[offsets[1:]] - running[offsets[:-1]]) / lengths.clamp(min=1).unsqueeze(1)


class SyntheticRows(NamedTuple):
    """All rows of a split, as columns."""

    ids: Dict[str, torch.Tensor]  # POOLED feature -> [N] ids
    history: torch.Tensor  # [N, HISTORY] item ids, -1 = none
    dense: torch.Tensor  # [N, NUM_DENSE]
    labels: torch.Tensor  # [N]


def synthetic_rows(n: int, seed: int) -> SyntheticRows:
    """``n`` rows whose labels follow a planted user x item affinity (and one dense feature)."""
    g = torch.Generator().manual_seed(seed)
    taste = torch.randn(POOLED["user"], 4, generator=torch.Generator().manual_seed(7))  # the same for every split
    trait = torch.randn(POOLED["item"], 4, generator=torch.Generator().manual_seed(8))
    user = torch.randint(1, POOLED["user"], (n,), generator=g)
    item = torch.randint(1, POOLED["item"], (n,), generator=g)
    history = torch.randint(1, SEQUENCE["history"], (n, HISTORY), generator=g)
    history[torch.rand(n, HISTORY, generator=g) < 0.3] = -1  # 0 to HISTORY items each
    dense = torch.randn(n, NUM_DENSE, generator=g)
    score = 1.5 * (taste[user] * trait[item]).sum(1) + 0.5 * dense[:, 0]
    labels = (torch.rand(n, generator=g) < torch.sigmoid(score)).float()
    ids = {"user": user, "item": item, "category": 1 + item % (POOLED["category"] - 1)}
    return SyntheticRows(ids, history, dense, labels)


def make_batch(rows: SyntheticRows, index: torch.Tensor) -> Batch:
    """TorchRec's ``Batch`` of the rows ``index``: a KJT of the pooled features (one id each) and the history."""
    history = rows.history[index]
    kept = history >= 0
    values = torch.cat([rows.ids[f][index] for f in POOLED] + [history[kept]])
    ones = torch.ones(len(index) * len(POOLED), dtype=torch.int64)
    lengths = torch.cat([ones, kept.sum(1)])
    kjt = KeyedJaggedTensor(keys=list(POOLED) + list(SEQUENCE), values=values, lengths=lengths)
    return Batch(dense_features=rows.dense[index], sparse_features=kjt, labels=rows.labels[index])


class Loader:
    """One rank's batches of a split: ``len()`` steps, a seeded shuffle per epoch (``set_epoch``).

    Each step every rank takes its ``batch_size`` rows of a global batch of ``batch_size *
    world_size``; the rows that do not fill a global batch are left out.
    """

    def __init__(self, rows: SyntheticRows, batch_size: int, rank: int, world_size: int, shuffle: bool = True) -> None:
        self.rows, self.batch_size, self.rank, self.world_size, self.shuffle = rows, batch_size, rank, world_size, shuffle
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.rows.labels) // (self.batch_size * self.world_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[Batch]:
        n = len(self.rows.labels)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.epoch)) if self.shuffle else torch.arange(n)
        step_rows = self.batch_size * self.world_size
        for step in range(len(self)):
            start = step * step_rows + self.rank * self.batch_size
            yield make_batch(self.rows, order[start : start + self.batch_size])


def splits(train_rows: int, val_rows: int) -> List[SyntheticRows]:
    """The train and validation rows (different seeds, the same planted signal)."""
    return [synthetic_rows(train_rows, seed=1), synthetic_rows(val_rows, seed=2)]
