"""Pre-training stage: train the tables self-supervised, then save them sharded.

data (``pretrain`` split, or a slice of ``train``) → :class:`BatchLoader` →
:class:`CoOccurrencePretrain` → ``DistributedModelParallel`` → ``TrainPipelineSparseDist``
→ :func:`save_tables` (``torch.distributed.checkpoint``). Fine-tuning then loads the
tables with ``--pretrained_tables``.
"""

import itertools
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
from tqdm import tqdm

from dlrm_multiepoch.config_section import flag_values
from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.data.loader import BatchLoader
from dlrm_multiepoch.distributed import DistEnv
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.models.pretrain import build_pretrain_model
from dlrm_multiepoch.train.json_io import write_json
from dlrm_multiepoch.train.pretrained import SUMMARY_FILE, save_tables, table_state_dict
from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, shard_model

PRETRAIN_SPLIT = "pretrain"


@dataclass
class PretrainConfig:
    """How the tables are pre-trained (``apps/pretrain.py`` fills it from its flags).

    Args:
        output: checkpoint folder the tables are saved to.
        epochs: passes over the pre-training rows.
        train_fraction: for data without a ``pretrain`` split, the fraction of the
            ``train`` split (a seeded random slice) used instead.
        batch_size: global batch size.
        embedding_optimizer / embedding_learning_rate: fused table optimizer.
        learning_rate: Adam learning rate of the query tower.
        sharding_types: planner's allowed sharding types.
        seed: seed of init, shuffling and the train slice.
        log_every_n_steps: loss logging interval.
        limit_batches: stop each epoch after N steps (0: no limit).
        progress_bar: show a tqdm progress bar on rank 0.
    """

    # The fields with a "help" are apps/pretrain.py's own flags, --pretrain_<field>.
    output: str = field(metadata={"help": "checkpoint folder to write the tables to"})
    epochs: int = field(default=1, metadata={"help": "passes over the pre-training rows"})
    train_fraction: float = field(
        default=0.5,
        metadata={"help": "without a 'pretrain' split in the dataset: fraction of the train split pre-trained on"},
    )
    batch_size: int = 1024
    embedding_optimizer: str = "rowwise_adagrad"
    embedding_learning_rate: float = 0.05
    learning_rate: float = 1e-3
    sharding_types: List[str] = field(default_factory=lambda: ["table_wise", "row_wise", "column_wise"])
    seed: int = 0
    log_every_n_steps: int = 50
    limit_batches: int = 0
    progress_bar: bool = True

    def validate(self) -> None:
        if not self.output:
            raise ValueError("--pretrain_output must name the checkpoint folder to write")
        if self.epochs <= 0:
            raise ValueError(f"--pretrain_epochs must be positive, got {self.epochs}")
        if not 0.0 < self.train_fraction <= 1.0:
            raise ValueError(f"--pretrain_train_fraction must be in (0, 1], got {self.train_fraction}")
        if self.limit_batches < 0:
            raise ValueError(f"--limit_train_batches must be >= 0, got {self.limit_batches}")


def pretrain_split(data: InteractionData, train_fraction: float, seed: int) -> str:
    """Name of the split to pre-train on; adds a seeded slice of ``train`` if there is none.

    Only train rows are ever used, never test rows.
    """
    if PRETRAIN_SPLIT in data.splits:
        return PRETRAIN_SPLIT
    train = data.splits["train"]
    count = max(1, int(round(len(train) * train_fraction)))
    rows = np.sort(np.random.default_rng([seed, 7]).permutation(len(train))[:count])
    data.splits[PRETRAIN_SPLIT] = train.take(rows)
    return PRETRAIN_SPLIT


class TablePretrainer:
    """Builds the pre-training run from a :class:`PretrainConfig` and runs it.

    Call on every rank of the default process group.

    Args:
        data: the dataset; its ``pretrain`` split (or a slice of ``train``) is used.
        model_cfg: table sizes (``embedding_dim``) and ``contrastive_temperature``; use
            the fine-tuning run's, so the saved tables fit it.
        cfg: the loop's settings.
        env: from :func:`~dlrm_multiepoch.distributed.init_distributed`.
        log: progress messages (pass a no-op on non-zero ranks).
        data_options: the data flags that decided the encoding (``DataConfig.cache_options()``),
            recorded in ``pretrain.json`` so that a fine-tuning run with other ones is told which.

    Example::

        env = init_distributed()
        summary = TablePretrainer(data, ModelConfig(embedding_dim=16), PretrainConfig("ckpt/pre"), env).train()
    """

    model: DistributedModelParallel
    pipeline: TrainPipelineSparseDist
    loader: BatchLoader

    def __init__(
        self,
        data: InteractionData,
        model_cfg: ModelConfig,
        cfg: PretrainConfig,
        env: DistEnv,
        log: Callable[[str], None] = print,
        data_options: Optional[Dict[str, Any]] = None,
    ) -> None:
        cfg.validate()
        self.data, self.model_cfg, self.cfg, self.env, self.log = data, model_cfg, cfg, env, log
        self.data_options = data_options or {}
        self.split = pretrain_split(data, cfg.train_fraction, cfg.seed)
        torch.manual_seed(cfg.seed)
        model = build_pretrain_model(data, model_cfg, env.device)
        apply_embedding_optimizer(model, cfg.embedding_optimizer, cfg.embedding_learning_rate)
        self.model = shard_model(model, env, cfg.sharding_types)
        self.pipeline = TrainPipelineSparseDist(self.model, build_optimizer(self.model, cfg.learning_rate), env.device)
        self.loader = BatchLoader(
            data, self.split, cfg.batch_size, env.rank, env.world_size, shuffle=True, seed=cfg.seed
        )
        self.steps_per_epoch = len(self.loader) if not cfg.limit_batches else min(len(self.loader), cfg.limit_batches)

    def _log_window(self, epoch: int, step: int, window: List[torch.Tensor]) -> Dict[str, float]:
        entry = {"epoch": epoch + 1, "step": step, "loss": float(torch.stack(window).mean())}
        self.log(f"pretrain epoch {epoch + 1} step {step}: contrastive loss {entry['loss']:.4f}")
        return entry

    def train(self) -> Dict[str, Any]:
        """Pre-train, save the tables to ``cfg.output`` and return a summary.

        The summary (tables, rows, steps, mean loss per logging window) is also written
        by rank 0 to ``<output>/pretrain.json``.
        """
        cfg = self.cfg
        self.log(
            f"pre-training tables {sorted(table_state_dict(self.model))} on {len(self.data.splits[self.split]):,} "
            f"{self.split!r} rows: {cfg.epochs} epoch(s) x {self.steps_per_epoch} steps at global batch "
            f"{cfg.batch_size}, {self.env.world_size} rank(s)"
        )
        history: List[Dict[str, float]] = []
        step = 0
        start = time.perf_counter()
        self.model.train()
        for epoch in range(cfg.epochs):
            self.loader.set_epoch(epoch)
            batches = itertools.islice(iter(self.loader), self.steps_per_epoch)
            window: List[torch.Tensor] = []
            show = self.env.is_main and cfg.progress_bar
            bar = tqdm(total=self.steps_per_epoch, desc=f"pretrain epoch {epoch + 1}", disable=not show)
            while True:
                try:
                    loss = self.pipeline.progress(batches)
                except StopIteration:
                    break
                step += 1
                bar.update(1)
                window.append(loss)  # a host sync only when logging
                if len(window) == cfg.log_every_n_steps:
                    history.append(self._log_window(epoch, step, window))
                    window = []
            bar.close()
            if window:  # the epoch's last, short window
                history.append(self._log_window(epoch, step, window))
        seconds = time.perf_counter() - start
        tables = save_tables(self.model, cfg.output)
        summary = {
            "tables": tables,
            "split": self.split,
            "rows": len(self.data.splits[self.split]),
            "steps": step,
            "train_seconds": seconds,
            "loss": history,
            "config": asdict(cfg),
            "model": flag_values(self.model_cfg),
            "data": self.data_options,
            "world_size": self.env.world_size,
        }
        if self.env.is_main:
            write_json(os.path.join(cfg.output, SUMMARY_FILE), summary)
        self.log(f"saved pre-trained tables {tables} to {cfg.output} after {step} steps ({seconds:.1f}s training)")
        return summary
