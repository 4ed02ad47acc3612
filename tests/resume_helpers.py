"""Configs and state comparisons shared by the resume, restart and world-size tests.

``resume_config`` trains a 3000-row MovieLens sample on 2 gloo ranks: 10 steps per
epoch at global batch 256, a checkpoint every 4 steps. The planner shards
``user``/``item`` table-wise (fused row-wise Adagrad) and replicates the small tables
(trained by the dense Adam). The freeze schedule switches after epoch 1 (tables train
in epoch 1 and are frozen in epoch 2; the over arch the other way round), so the
fused Adagrad momentum, the Adam moments (present for the tables and dense arch,
absent for the still-frozen over arch before the switch) and the freeze state all
have to round-trip.

``E2E_FLAGS`` are the training app's flags in the torchrun test (semi-sync pipeline,
evaluation and a checkpoint every 5 steps).
"""

from typing import Any, Dict, List, Set, Tuple

import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.train.config import TrainConfig
from tests.sharding_helpers import local_tensors

STEPS_PER_EPOCH = 10  # 2400 train rows of the 3000-row MovieLens sample, global batch 256
SCHEDULE = "tables=train@[0,1) frozen@[1,end); module:over_arch.*=frozen@[0,1) train@[1,end)"

E2E_FLAGS = [
    "--dataset", "movielens", "--max_rows", "6000", "--epochs", "2", "--batch_size", "512",
    "--eval_every_n_steps", "5", "--checkpoint_every_n_steps", "5", "--train_eval_rows", "1000",
    "--log_every_n_steps", "2", "--no-progress_bar", "--freeze_schedule", "tables=frozen@[0,1) train@[1,end)",
    "--pipeline", "semi_sync", "--pipeline_staleness_interval", "1",
    # The remedies ride along: their state must survive the restart too (their exactness
    # is tested in tests/test_optim_*.py).
    "--falr", "log", "--reinit", "table:t_item@1", "--id_dropout", "0.05", "--min_count", "1,t_user=2",
    "--table_lr", "t_item=0.1", "--table_lr_warmup", "2step",
]  # fmt: skip


def resume_config(tmp: str, run_name: str, **overrides: Any) -> TrainConfig:
    settings: Dict[str, Any] = dict(
        epochs=2,
        batch_size=256,
        eval_batch_size=1024,
        train_eval_rows=500,
        log_every_n_steps=3,
        progress_bar=False,
        sharding_types="data_parallel,table_wise",
        freeze_schedule=SCHEDULE,
        checkpoint_every_n_steps=4,
    )
    return TrainConfig.from_flags(
        data=DataConfig(dataset="movielens", max_rows=3000),
        model=ModelConfig(embedding_dim=8, dense_arch_layer_sizes="16,8", over_arch_layer_sizes="16"),
        tensorboard_dir=tmp,
        run_name=run_name,
        **(settings | overrides),
    )


def assert_bitwise_equal(a: Any, b: Any, what: str) -> None:
    ta, tb = local_tensors(a), local_tensors(b)
    assert sorted(ta) == sorted(tb), f"{what}: keys differ: {sorted(set(ta) ^ set(tb))}"
    for key in ta:
        assert [o for o, _ in ta[key]] == [o for o, _ in tb[key]], f"{what}: {key} is sharded differently"
        for (_, x), (_, y) in zip(ta[key], tb[key]):
            assert torch.equal(x, y), f"{what}: {key} differs"


def assert_matches_full(state: Any, full: Any, what: str) -> Set[str]:
    """Every local shard of ``state`` equals its slice of the full tensors in ``full``; returns the keys seen.

    ``full`` is a checkpoint read back whole (``dcp_to_torch_save``), so this checks that a
    load on another world size put every saved value where it belongs, bitwise. A rank
    holds only its own tables' entries: the union of the returned keys over ranks must
    cover ``full``.
    """
    pieces, whole = local_tensors(state), local_tensors(full)
    assert set(pieces) <= set(whole), f"{what}: keys not in the checkpoint: {sorted(set(pieces) - set(whole))}"
    for key, shards in pieces.items():
        reference = whole[key][0][1]
        for offsets, tensor in shards:
            index = tuple(slice(o, o + n) for o, n in zip(offsets, tensor.shape))
            assert torch.equal(tensor, reference[index] if index else reference), f"{what}: {key} differs"
    return set(pieces)


def scalars(run_dir: str, tag: str) -> List[Tuple[int, float]]:
    acc = EventAccumulator(run_dir)
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]
