"""Pre-training: the :class:`~dlrm_multiepoch.train.trainer.Trainer` with the model and loss swapped.

data (``pretrain`` split, or a slice of ``train``) → :class:`CoOccurrencePretrain` →
``DistributedModelParallel`` → the ``--pipeline`` → at the end :func:`save_tables`
(``torch.distributed.checkpoint``) to ``--pretrain_output``. The run is an ordinary
Trainer run in every other way: its run folder, checkpoints, ``--resume``, progress bar
and TensorBoard scalars. Fine-tuning then loads the tables with ``--pretrained_tables``.
"""

import argparse
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from dlrm_multiepoch.config_section import IGNORED_BY_PRETRAINING
from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.json_io import write_json
from dlrm_multiepoch.json_state import pack_json_state, unpack_json_state
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.models.pretrain import build_pretrain_model
from dlrm_multiepoch.part import TrainPart, WindowLog
from dlrm_multiepoch.run_files import flat_config, path_matches
from dlrm_multiepoch.saved_state import check_state
from dlrm_multiepoch.train.checkpoint import CheckpointInfo
from dlrm_multiepoch.train.config import TrainConfig, build_parser, parse_config, record_paths
from dlrm_multiepoch.train.pretrained import SUMMARY_FILE, save_tables
from dlrm_multiepoch.train.spec import FinishedRun, TrainSpec

PRETRAIN_SPLIT = "pretrain"
# TrainConfig.to_dict() paths pre-training does not apply (a trailing "." covers a section: the fields with the
# IGNORED_BY_PRETRAINING role): it trains the tables at every step, evaluates nothing (no labels in its objective) and takes
# none of the table remedies. The model flags are the fine-tuning model's (they are checked together, e.g. the dense
# layers end with --embedding_dim); its tables, built from --embedding_dim and the data, are what the pre-training
# model trains.
NOT_APPLIED = record_paths(IGNORED_BY_PRETRAINING)


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


def not_applied(cfg: TrainConfig) -> List[str]:
    """The flags ``cfg`` sets away from their defaults that pre-training would not apply, e.g.
    ``["--eval_every_n_steps", "--freeze_schedule"]``."""
    now, default = flat_config(cfg.to_dict()), flat_config(TrainConfig().to_dict())
    return sorted(
        f"--{path.split('.')[-1]}"
        for path, value in now.items()
        if path_matches(path, NOT_APPLIED) and value != default[path]
    )


class LossHistory(TrainPart):
    """The mean training loss of each logging window, kept with the checkpoints (for ``pretrain.json``)."""

    def __init__(self) -> None:
        self.windows: List[Dict[str, float]] = []

    def after_window(self, losses: List[torch.Tensor], step: int, log: WindowLog) -> None:
        self.windows.append({"step": step, "loss": float(torch.stack(losses).mean())})

    def checkpoint_parts(self) -> Dict[str, Any]:
        return {"pretrain_loss": self}

    def state_dict(self) -> Dict[str, Any]:
        return pack_json_state({"windows": self.windows})

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        state = unpack_json_state("pre-training loss history", state)
        check_state("pre-training loss history", state, {"windows": list})
        self.windows = list(state["windows"])


class PretrainSpec(TrainSpec):
    """Self-supervised pre-training of the multi-path model's tables (:class:`CoOccurrencePretrain`).

    It trains on the dataset's ``pretrain`` split (or a seeded ``train_fraction`` slice of
    ``train``), evaluates nothing, and at the end saves the tables sharded to ``output``
    with a ``pretrain.json`` beside them (the data options that decided the encoding, so a
    fine-tuning run with other ones is told which).

    One instance per run: it holds the run's loss history (checkpointed with the run).

    Args:
        output: checkpoint folder the tables are saved to (``--pretrain_output``).
        train_fraction: without a ``pretrain`` split, the fraction of ``train`` pre-trained on.

    Example::

        env = init_distributed()
        cfg = parse_config(["--dataset", "bookcrossing", "--history_length", "10", "--epochs", "2"])
        Trainer(cfg, env, spec=PretrainSpec("checkpoints/pretrained")).train()
    """

    def __init__(self, output: str, train_fraction: float = 0.5) -> None:
        if not output:
            raise ValueError("--pretrain_output must name the checkpoint folder to write")
        if not 0.0 < train_fraction <= 1.0:
            raise ValueError(f"--pretrain_train_fraction must be in (0, 1], got {train_fraction}")
        self.output, self.train_fraction = output, train_fraction
        self.history = LossHistory()
        self.split = PRETRAIN_SPLIT

    def label(self, cfg: TrainConfig) -> str:
        return "pretrain"

    def check(self, cfg: TrainConfig) -> None:
        refused = not_applied(cfg)
        if refused:
            raise ValueError(
                f"{', '.join(refused)}: not used by pre-training (it trains the tables at every step with its own "
                "loss, evaluates nothing and applies no table remedy); drop them"
            )

    def prepare(self, data: InteractionData, cfg: TrainConfig) -> str:
        self.split = pretrain_split(data, self.train_fraction, cfg.seed)
        return self.split

    def build_model(self, data: InteractionData, cfg: ModelConfig, device: torch.device) -> nn.Module:
        return build_pretrain_model(data, cfg, device)

    def evaluated_splits(self, data: InteractionData) -> List[str]:
        return []

    def parts(self) -> List[TrainPart]:
        return [self.history]

    def config_record(self, cfg: TrainConfig) -> Dict[str, Any]:
        own = {"pretrain_output": self.output, "pretrain_train_fraction": self.train_fraction}
        return {**cfg.to_dict(), "pretrain": own}

    def check_checkpoint(self, info: CheckpointInfo, flag: str = "--resume") -> None:
        saved = info.state["config"].get("pretrain")
        if saved is None:
            raise ValueError(f"{flag} {info.path!r} is a training run's checkpoint, not a pre-training run's")
        if saved["pretrain_train_fraction"] != self.train_fraction:
            raise ValueError(
                f"--pretrain_train_fraction {self.train_fraction}: checkpoint {info.path} pre-trained on a "
                f"{saved['pretrain_train_fraction']} slice of train; resume with that fraction"
            )

    def finish(self, trainer: FinishedRun) -> None:
        tables = save_tables(trainer.model, self.output)  # collective
        summary = {
            "tables": tables,
            "split": self.split,
            "rows": len(trainer.data.splits[self.split]),
            "steps": trainer.step,
            "train_seconds": trainer.logger.summary.get("wall_time_s"),
            "loss": self.history.windows,
            "run_dir": trainer.run.path,
            "model": trainer.cfg.to_dict()["model"],
            "data": trainer.cfg.data.cache_options(),
            "world_size": trainer.env.world_size,
        }
        if trainer.env.is_main:
            write_json(os.path.join(self.output, SUMMARY_FILE), summary)
        trainer.logger.info(f"saved pre-trained tables {tables} to {self.output} after {trainer.step} steps")


def _pretrain_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("pre-training")
    group.add_argument("--pretrain_output", required=True, help="checkpoint folder to write the tables to")
    group.add_argument(
        "--pretrain_train_fraction", type=float, default=0.5,
        help="without a 'pretrain' split in the dataset: fraction of the train split pre-trained on",
    )  # fmt: skip


def parse_pretrain_config(
    argv: Sequence[str], prog: Optional[str] = None
) -> Tuple[TrainConfig, PretrainSpec]:
    """The pre-training app's flags: the training app's config and the pre-training spec; errors name the flag.

    Example::

        cfg, spec = parse_pretrain_config(["--history_length", "10", "--pretrain_output", "tables/bx-h10"])
    """
    full = build_parser(prog)
    full.description = "Pre-train the embedding tables (then fine-tune with --pretrained_tables)."
    _pretrain_flags(full)
    full.parse_args(argv)  # --help, unknown flags and types, over both flag sets
    own = argparse.ArgumentParser(add_help=False)
    _pretrain_flags(own)
    ns, rest = own.parse_known_args(argv)
    cfg = parse_config(rest, check_paths=True, prog=prog)
    try:
        spec = PretrainSpec(ns.pretrain_output, ns.pretrain_train_fraction)
        spec.check(cfg)
    except ValueError as e:
        full.error(str(e))
    return cfg, spec
