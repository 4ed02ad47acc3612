"""BatchLoader: rank sharding covers every row once, pads with weight 0, builds valid KJTs.

The same on real gloo ranks: ``tests/test_data_stream.py`` (one spawn for all data checks)."""

import numpy as np
import pytest
import torch

from dlrm_multiepoch.data import HISTORY_FEATURE, HISTORY_PAD, BatchLoader, InteractionData, Split, TableSpec

ROWS = 1003  # not a multiple of the batch: exercises the short, padded last batch


def make_data(rows: int = ROWS) -> InteractionData:
    rng = np.random.default_rng(0)
    history = rng.integers(0, 50, (rows, 3))
    history[rng.random((rows, 3)) < 0.4] = HISTORY_PAD
    history = -np.sort(-history, axis=1)  # padding at the end, as build_history does
    split = Split(
        sparse={"user": rng.integers(0, 20, rows), "item": rng.integers(0, 50, rows)},
        dense=np.arange(rows, dtype=np.float32)[:, None],  # the row number, to trace rows
        labels={"like": (np.arange(rows) % 3 == 0).astype(np.float32)},
        history=history,
    )
    tables = [TableSpec("t_user", 20, ["user"]), TableSpec("t_item", 50, ["item", HISTORY_FEATURE])]
    return InteractionData("toy", tables, ["row"], ["like"], {"train": split})


def collect(data: InteractionData, rank: int, world_size: int, batch: int, epoch: int) -> tuple:
    loader = BatchLoader(data, "train", batch, rank, world_size, shuffle=True, seed=7)
    loader.set_epoch(epoch)
    rows, sizes, pads = [], [], 0
    split = data.splits["train"]
    for b in loader:
        real = b.weights == 1
        assert ((b.weights == 0) | real).all()
        ids = b.dense_features[:, 0].long()
        real_ids = ids[real].numpy()
        rows.append(ids[real])
        pads += int((~real).sum())
        sizes.append(b.batch_size)
        kjt = b.sparse_features.to_dict()
        torch.testing.assert_close(kjt["user"].values()[real], torch.from_numpy(split.sparse["user"][real_ids]))
        hist_len = kjt[HISTORY_FEATURE].lengths()
        expected_len = (split.history[real_ids] != HISTORY_PAD).sum(axis=1)
        np.testing.assert_array_equal(hist_len[real].numpy(), expected_len)
        assert (hist_len[~real] == 0).all() and (b.labels["like"][~real] == 0).all()
    return torch.cat(rows).tolist(), sizes, pads, len(loader)


@pytest.mark.parametrize("world_size,batch", [(2, 64), (4, 100), (1, 1003)])
def test_every_row_exactly_once_and_equal_steps(world_size: int, batch: int) -> None:
    data = make_data()
    per_rank = [collect(data, r, world_size, batch, epoch=1) for r in range(world_size)]
    seen = sorted(r for rows, *_ in per_rank for r in rows)
    assert seen == list(range(ROWS))
    # Every rank runs the same steps with the same per-step batch size.
    assert len({tuple(sizes) for _, sizes, _, _ in per_rank}) == 1
    steps = per_rank[0][3]
    assert steps == -(-ROWS // batch) == len(per_rank[0][1])
    # Only the short last batch pads, each rank to ceil(last / world_size) rows.
    last = ROWS - (steps - 1) * batch
    assert per_rank[0][1][-1] == -(-last // world_size)
    assert sum(p for *_, p, _ in per_rank) == world_size * -(-last // world_size) - last


def test_epochs_reshuffle_and_bad_batch_size() -> None:
    data = make_data()
    assert collect(data, 0, 2, 64, epoch=0)[0] != collect(data, 0, 2, 64, epoch=1)[0]
    with pytest.raises(ValueError, match="--batch_size 63 must be a positive multiple of the world size 2"):
        BatchLoader(data, "train", 63, 0, 2)
    with pytest.raises(KeyError, match="no split 'test'"):
        BatchLoader(data, "test", 64, 0, 2)
