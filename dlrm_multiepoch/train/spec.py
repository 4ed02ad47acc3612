"""What kind of run the :class:`~dlrm_multiepoch.train.trainer.Trainer` trains: the model and its loss, the split
it trains on, what it evaluates and what it leaves behind.

The loop, the pipelines, checkpoints, resume and logging are the same for every kind;
a spec swaps only these pieces (torchtitan's ``TrainSpec`` idea). The default is the
training app's supervised run; :class:`~dlrm_multiepoch.train.pretrain.PretrainSpec`
pre-trains the tables with a self-supervised loss.
"""

from typing import Any, Dict, List, Protocol

import numpy as np
import torch
from torch import nn

from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.distributed import DistEnv
from dlrm_multiepoch.import_path import is_import_path
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.models.factory import build_model
from dlrm_multiepoch.models.user_model import import_builder
from dlrm_multiepoch.names import TEST, TRAIN_SAMPLE, VAL
from dlrm_multiepoch.part import TrainPart
from dlrm_multiepoch.train.checkpoint import CheckpointInfo
from dlrm_multiepoch.train.config import TrainConfig
from dlrm_multiepoch.train.metrics_logger import MetricsLogger
from dlrm_multiepoch.train.run_folder import RunFolder

# Splits evaluated, in this order, where the data has them; only "val" drives decisions.
EVAL_SPLITS = (TEST, VAL, TRAIN_SAMPLE)
NOT_EVALUATED = ("train", "pretrain")  # any other split a dataset brings is evaluated after these


def evaluated_splits(data: InteractionData) -> List[str]:
    """The splits a supervised run evaluates: test, val, the train sample, then any other the dataset brings."""
    ordered = [s for s in EVAL_SPLITS if s in data.splits]
    return ordered + [s for s in data.splits if s not in NOT_EVALUATED and s not in ordered]


def add_train_sample(data: InteractionData, cfg: TrainConfig) -> None:
    """A fixed train sample, evaluated like the test split, shows memorisation (none with --train_eval_rows 0).

    Drawn without a permutation of all rows: memory stays flat as the split grows.
    """
    if cfg.metrics.train_eval_rows:
        train = data.splits["train"]
        size = min(cfg.metrics.train_eval_rows, len(train))
        rows = np.random.default_rng(cfg.seed).choice(len(train), size=size, replace=False)
        data.splits[TRAIN_SAMPLE] = train.take(np.sort(rows))


class FinishedRun(Protocol):
    """What :meth:`TrainSpec.finish` reads of the :class:`~dlrm_multiepoch.train.trainer.Trainer` that ran
    (described here, not imported: the trainer imports this module)."""

    cfg: TrainConfig
    env: DistEnv
    data: InteractionData
    model: nn.Module
    logger: MetricsLogger
    run: RunFolder

    @property
    def step(self) -> int: ...


class TrainSpec:
    """The supervised run of ``python -m dlrm_multiepoch.train``: ``--model``'s module on the ``train`` split, every labelled split
    evaluated. Subclass it and override what another kind of run changes.

    Example::

        class MyModelSpec(TrainSpec):
            def build_model(self, data, cfg, device):
                return MyDLRM(data, cfg, device)         # forward(batch) -> (loss, ModelOutput)

        Trainer(cfg, env, spec=MyModelSpec()).train()
    """

    def label(self, cfg: TrainConfig) -> str:
        """What is trained, in run names and the console: the ``--model`` name."""
        return cfg.model.model

    def check(self, cfg: TrainConfig) -> None:
        """Refuse settings this kind of run cannot apply, naming the flag (the supervised run applies all), before
        any data is read: here, a ``--model MODULE:NAME`` that does not import or is no builder."""
        if is_import_path(cfg.model.model):
            import_builder(cfg.model.model)

    def prepare(self, data: InteractionData, cfg: TrainConfig) -> str:
        """Add what the run needs to ``data`` (here: the train sample it evaluates); return the split it trains on."""
        add_train_sample(data, cfg)
        return "train"

    def build_model(self, data: InteractionData, cfg: ModelConfig, device: torch.device) -> nn.Module:
        """The module to shard, tables on the meta device: ``forward(batch) -> (loss, ModelOutput)``."""
        return build_model(data, cfg, device)

    def evaluated_splits(self, data: InteractionData) -> List[str]:
        """The splits evaluated at each epoch end and every ``--eval_every_n_steps``."""
        return evaluated_splits(data)

    def parts(self) -> List[TrainPart]:
        """This kind's own loop parts (hooks and checkpointed state), called after the remedies and the schedule."""
        return []

    def config_record(self, cfg: TrainConfig) -> Dict[str, Any]:
        """The settings saved with each checkpoint and compared on resume: ``cfg.to_dict()`` plus this kind's own."""
        return cfg.to_dict()

    def check_checkpoint(self, info: CheckpointInfo, flag: str = "--resume") -> None:
        """Refuse a checkpoint (given by ``flag``) this kind of run cannot continue: the supervised run's model is
        not the pre-training one."""
        if "pretrain" in info.state["config"]:
            raise ValueError(
                f"{flag} {info.path!r} is a pre-training run's checkpoint; fine-tune from its tables with "
                "--pretrained_tables instead"
            )

    def finish(self, trainer: FinishedRun) -> None:
        """The run ended (not paused): leave behind what it is for (the supervised run's model is its checkpoint)."""


TRAIN = TrainSpec()
