"""Models ``tests/test_user_model.py`` names by import path (``--model tests.user_models:NAME``): a small
TorchRec model over the app's ``Batch`` and builders whose model returns the wrong thing."""

import torch
from torch import nn
from torchrec import EmbeddingBagCollection

from dlrm_multiepoch import Batch, InteractionData, ModelConfig, ModelOutput
from dlrm_multiepoch.models.dlrm import embedding_bag_configs, weighted_bce


class TinyModel(nn.Module):
    """An EBC of the dataset's tables and one linear head: ``forward(batch) -> (loss, ModelOutput)``.

    A class is a builder too (``--model tests.user_models:TinyModel``): it is called as
    ``TinyModel(data, cfg, device)``.

    Args:
        wrong: ``"eval"``: returns ``(loss, logits)`` in every mode; ``"train"``: in training only.
    """

    def __init__(self, data: InteractionData, cfg: ModelConfig, device: torch.device, wrong: str = "") -> None:
        super().__init__()
        self.tasks, self.wrong = list(data.tasks), wrong
        self.ebc = EmbeddingBagCollection(embedding_bag_configs(data.tables, cfg.embedding_dim), device=torch.device("meta"))
        width = len(data.feature_names) * cfg.embedding_dim + len(data.dense_names)
        self.head = nn.Linear(width, len(data.tasks), device=device)

    def forward(self, batch: Batch):
        logits = self.head(torch.cat([self.ebc(batch.sparse_features).values(), batch.dense_features], 1))
        labels = torch.stack([batch.labels[t] for t in self.tasks], 1)
        loss = weighted_bce(logits, labels, batch.weights[:, None].expand_as(labels))
        if self.wrong == "eval" or (self.wrong == "train" and self.training):
            return loss, logits
        return loss, ModelOutput(loss.detach(), {}, logits.detach(), labels, batch.weights)


def returns_logits(data: InteractionData, cfg: ModelConfig, device: torch.device) -> nn.Module:
    return TinyModel(data, cfg, device, wrong="eval")


def returns_logits_in_training(data: InteractionData, cfg: ModelConfig, device: torch.device) -> nn.Module:
    return TinyModel(data, cfg, device, wrong="train")


def returns_a_dict(data: InteractionData, cfg: ModelConfig, device: torch.device) -> dict:
    return {"model": TinyModel(data, cfg, device)}


def takes_two(data: InteractionData, cfg: ModelConfig) -> nn.Module:
    raise AssertionError("never called: its signature is refused")


NOT_A_BUILDER = 3
