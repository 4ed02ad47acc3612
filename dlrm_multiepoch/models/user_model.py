"""Your own model under the training app, named by import path: ``--model my_models:build``.

``my_models.build`` is a :class:`ModelBuilder`: called on every rank with the dataset's layout,
the model flags and the dense device, it returns the module to shard, whose
``forward(batch)`` takes the app's :class:`~dlrm_multiepoch.data.batch.Batch` and returns
``(loss, output)``, the output a :class:`~dlrm_multiepoch.step_output.StepOutput`. A model over
its own batch type goes behind a :class:`~dlrm_multiepoch.models.batch_adapter.BatchAdapter`.
docs/YOUR_MODEL.md has the whole route (examples/deepfm/app_model.py is one).

Example::

    build = import_builder("my_models:build")      # ValueError naming --model: not importable, not a builder
    model = build_user_model("my_models:build", data, cfg.model, device)
"""

import inspect
from typing import Protocol

import torch
from torch import nn

from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.import_path import import_object
from dlrm_multiepoch.models.config import ModelConfig

FLAG = "--model"


class ModelBuilder(Protocol):
    """What ``--model MODULE:NAME`` names: a function (or class) building your training module.

    Args:
        data: the dataset's layout: ``data.tables`` (each a ``TableSpec``: ``name``,
            ``num_embeddings``, ``feature_names``: the KJT keys it serves), ``data.dense_names``,
            ``data.tasks`` (one logit column each, in this order).
        cfg: the model flags (``cfg.embedding_dim``, the layer sizes, ...): read those you use.
        device: where dense layers go; create embedding tables on ``torch.device("meta")``
            (``DistributedModelParallel`` materialises them sharded).

    Returns:
        the module to shard: ``forward(batch) -> (loss, output)`` over the app's ``Batch``.

    Example::

        def build(data: InteractionData, cfg: ModelConfig, device: torch.device) -> nn.Module:
            return BatchAdapter(MyModel(data.tables, cfg.embedding_dim), to_my_batch)
    """

    def __call__(self, data: InteractionData, cfg: ModelConfig, device: torch.device, /) -> nn.Module: ...


def import_builder(path: str) -> ModelBuilder:
    """The builder ``path`` names, imported; refused naming ``--model`` when it is not a callable taking
    ``(data, cfg, device)``."""
    builder = import_object(FLAG, path)
    expected = "a builder build(data, cfg, device) -> nn.Module (docs/YOUR_MODEL.md)"
    if not callable(builder):
        raise ValueError(f"{FLAG} {path!r} is an object of type {type(builder).__name__}, not {expected}")
    try:
        signature = inspect.signature(builder)
    except (TypeError, ValueError):  # no signature to read (a builtin): calling it will tell
        return builder  # type: ignore[return-value]
    try:
        signature.bind(None, None, None)
    except TypeError as e:
        takes = ", ".join(signature.parameters)
        raise ValueError(f"{FLAG} {path!r} takes ({takes}), not (data, cfg, device): {e}; expected {expected}") from None
    return builder  # type: ignore[return-value]


def build_user_model(path: str, data: InteractionData, cfg: ModelConfig, device: torch.device) -> nn.Module:
    """The module the builder at ``path`` returns for ``data``; refused naming ``--model`` when it is not an
    ``nn.Module``."""
    model = import_builder(path)(data, cfg, device)
    if not isinstance(model, nn.Module):
        raise ValueError(
            f"{FLAG} {path!r} returned an object of type {type(model).__name__}; a builder returns the torch.nn.Module to train"
        )
    return model
