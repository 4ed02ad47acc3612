"""Factories and up-front checks for the :class:`~dlrm_multiepoch.train.trainer.Trainer`'s parts."""

from typing import List, Optional, Union

import numpy as np
from torchrec.distributed import DistributedModelParallel
from torchrec.optim.keyed import CombinedOptimizer

from dlrm_multiepoch.auto import AutoFreezeSchedule
from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.data.load import load_dataset
from dlrm_multiepoch.data.loader import BatchLoader
from dlrm_multiepoch.distributed import DistEnv
from dlrm_multiepoch.freeze import FreezeScheduleWrapper
from dlrm_multiepoch.train.checkpoint import CheckpointInfo
from dlrm_multiepoch.train.config import TrainConfig

TRAIN_SAMPLE = "train_sample"
VAL = "val"
# Splits evaluated, in this order, where the data has them; only "val" drives decisions.
EVAL_SPLITS = ("test", VAL, TRAIN_SAMPLE)
NOT_EVALUATED = ("train", "pretrain")  # any other split a dataset brings is evaluated after these

Freeze = Union[FreezeScheduleWrapper, AutoFreezeSchedule]


def load_data(cfg: TrainConfig, env: DistEnv) -> InteractionData:
    """Load the dataset on every rank (the cache's file lock lets one rank build it)."""
    data = load_dataset(cfg.data, log=print if env.is_main else lambda _: None)
    add_train_sample(data, cfg)
    return data


def add_train_sample(data: InteractionData, cfg: TrainConfig) -> None:
    """A fixed train sample, evaluated like the test split, shows memorisation (none with --train_eval_rows 0).

    Drawn without a permutation of all rows: memory stays flat as the split grows.
    """
    if cfg.metrics.train_eval_rows:
        train = data.splits["train"]
        size = min(cfg.metrics.train_eval_rows, len(train))
        rows = np.random.default_rng(cfg.seed).choice(len(train), size=size, replace=False)
        data.splits[TRAIN_SAMPLE] = train.take(np.sort(rows))


def build_loader(
    cfg: TrainConfig, data: InteractionData, split: str, env: DistEnv, shuffle: bool = False
) -> BatchLoader:
    """This rank's loader of ``split``: training batches (shuffled) or evaluation batches."""
    return BatchLoader(
        data,
        split,
        cfg.loader.batch_size if shuffle else cfg.loader.eval_batch_size,
        env.rank,
        env.world_size,
        shuffle=shuffle,
        seed=cfg.seed,
        block_rows=cfg.loader.shuffle_block_rows,
        buffer_rows=cfg.loader.shuffle_buffer_rows,
        prefetch_batches=cfg.loader.prefetch_batches,
        pin_memory=env.device.type == "cuda",
    )


def evaluated_splits(data: InteractionData) -> List[str]:
    ordered = [s for s in EVAL_SPLITS if s in data.splits]
    return ordered + [s for s in data.splits if s not in NOT_EVALUATED and s not in ordered]


def check_splits(data: InteractionData) -> None:
    """Refuse, before any training, a run whose train split or an evaluated split has no rows.

    An empty split would train a whole epoch and then fail in its evaluation. A split
    with fewer rows than ranks is fine: ranks without rows get weight-0 padding.
    """
    sizes = {name: len(split) for name, split in data.splits.items()}
    if sizes["train"] == 0:
        raise ValueError(f"the train split of {data.name} is empty (split sizes {sizes}); check --max_rows and the data")
    for name in evaluated_splits(data):
        if sizes[name] == 0:
            raise ValueError(
                f"the {name} split of {data.name} is empty (split sizes {sizes}), so it cannot be evaluated; "
                f"raise --test_fraction or use more rows (--max_rows, a larger --data_path)"
            )


def build_freeze(
    cfg: TrainConfig,
    model: DistributedModelParallel,
    optimizer: CombinedOptimizer,
    steps_per_epoch: int,
    tasks: List[str],
) -> Optional[Freeze]:
    """The freeze-schedule controller of ``--freeze_schedule``; None when everything trains."""
    if cfg.freeze.freeze_schedule == "joint":
        return None
    if cfg.freeze.is_auto:
        return AutoFreezeSchedule(model, steps_per_epoch, cfg.epochs, tasks, optimizer=optimizer, config=cfg.auto)
    try:
        return FreezeScheduleWrapper(model, cfg.freeze.schedule, steps_per_epoch, cfg.epochs, optimizer=optimizer)
    except ValueError as e:
        raise ValueError(f"--freeze_schedule {cfg.freeze.freeze_schedule!r}: {e}") from None


def check_resumable(info: CheckpointInfo, cfg: TrainConfig, world_size: int, flag: str = "--resume") -> None:
    """Refuse a resume that would skip or redo work: ``--epochs`` below what is done, or a moved data position.

    A mid-epoch data position is a number of steps into that epoch's order, which
    depends on the batch size and, with the block shuffle, on the number of ranks (each
    rank reads a contiguous share of the shuffled blocks): it continues only where both
    are the same. An end-of-epoch checkpoint continues anywhere. ``flag`` names the
    flag that gave the checkpoint (``--resume`` or ``--start_from``) in the messages.
    """
    if info.state.get("kind") == "best":
        raise ValueError(
            f"{flag} {info.path!r} is a best-validation checkpoint (weights to deploy, no data position); "
            "resume from a step_N checkpoint"
        )
    done = info.parts["progress"]
    epochs_done = done["epoch"] + (done["batch_in_epoch"] > 0)
    if epochs_done > cfg.epochs:
        raise ValueError(
            f"--epochs {cfg.epochs} is below what checkpoint {info.path} has trained (epoch {done['epoch'] + 1}"
            f"{', batch ' + str(done['batch_in_epoch']) if done['batch_in_epoch'] else ' done'}); "
            f"pass --epochs {epochs_done} or more"
        )
    saved_ranks = info.state.get("world_size", world_size)
    if done["batch_in_epoch"] and saved_ranks != world_size:
        raise ValueError(
            f"{flag} {info.path!r} was taken {done['batch_in_epoch']} batches into epoch {done['epoch'] + 1} on "
            f"{saved_ranks} ranks; the shuffled order of an epoch depends on the number of ranks, so that position "
            f"continues only on {saved_ranks} ranks. Resume on {saved_ranks} ranks, or from an end-of-epoch checkpoint"
        )
    saved_batch = info.state["config"]["batch_size"]
    if done["batch_in_epoch"] and saved_batch != cfg.loader.batch_size:
        raise ValueError(
            f"--batch_size {cfg.loader.batch_size}: checkpoint {info.path} was taken {done['batch_in_epoch']} batches into "
            f"an epoch at --batch_size {saved_batch}, a data position that only that batch size continues; "
            f"resume with --batch_size {saved_batch} (or from an end-of-epoch checkpoint)"
        )
