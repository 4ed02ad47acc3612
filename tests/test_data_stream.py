"""Data at scale: chunked preprocessing, per-rank streaming from column files, multi-hot
bags, TorchRec's Criteo npy folders, the source registry, and torch-free preprocessing."""

import importlib
import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pandas as pd
import pytest
import torch
import torch.distributed as dist
from torchrec.modules.embedding_modules import EmbeddingBagCollection

import dlrm_multiepoch.data.preprocess as preprocess_module
import dlrm_multiepoch.data.recipe as recipe_module
from dlrm_multiepoch.data import DataConfig, InteractionData, Ragged, Split, TableSpec, load_dataset, prepare_dataset
from dlrm_multiepoch.data.loader import BatchLoader
from dlrm_multiepoch.data.prefetch import Prefetcher
from dlrm_multiepoch.data.registry import BUILTIN, SOURCES, Source, get_source, register_source
from dlrm_multiepoch.data.shuffle import rank_rows
from dlrm_multiepoch.data.store import open_dataset
from dlrm_multiepoch.data.store_writer import write_dataset
from dlrm_multiepoch.distributed import init_distributed
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.models.dlrm import embedding_bag_configs
from dlrm_multiepoch.testing.ranks import run_on_ranks
from dlrm_multiepoch.train.config import TrainConfig
from dlrm_multiepoch.train.trainer import Trainer
from tests.test_data_batchloader import collect, make_data
from tests.data_inputs import make_criteo_tsv

REPO = Path(__file__).resolve().parents[1]


def arrays(data: InteractionData) -> Dict[str, np.ndarray]:
    """Every stored array of every split, by name (bags as values + offsets)."""
    out = {}
    for name, source in data.splits.items():
        split = source.read(0, len(source))
        for feature, column in split.sparse.items():
            if isinstance(column, Ragged):
                out[f"{name}/{feature}/values"], out[f"{name}/{feature}/offsets"] = column.values, column.offsets
            else:
                out[f"{name}/{feature}"] = column
        out[f"{name}/dense"] = split.dense
        out |= {f"{name}/label/{t}": v for t, v in split.labels.items()}
        if split.history is not None:
            out[f"{name}/history"] = split.history
    return out


def events(n: int = 600, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    tags = [["a", "b", "c", "d", "e"][: int(k)] for k in rng.integers(0, 4, n)]
    return pd.DataFrame(
        {
            "uid": rng.integers(0, 40, n),
            "iid": [f"i{x}" for x in rng.zipf(1.5, n) % 90],
            "stars": rng.integers(1, 6, n).astype(float),
            "ts": rng.integers(0, 10**6, n),
            "price": np.where(rng.random(n) < 0.1, np.nan, rng.random(n) * 100),
            "tags": [list(rng.permutation(t)) for t in tags],
        }
    )


def test_preprocessing_in_chunks_is_bitwise_encoding_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tsv = tmp_path / "day.tsv"
    make_criteo_tsv(tsv, rows=400, malformed=True)
    frame = events()
    csv, parquet = tmp_path / "events.csv", tmp_path / "events.parquet"
    frame.assign(tags=["|".join(t) for t in frame["tags"]]).to_csv(csv, index=False)
    frame.to_parquet(parquet, index=False)
    common = dict(
        dataset="interactions", user_col="uid", item_col="iid", label_col="stars", task_thresholds="like:4",
        dense_cols="price", multi_hot_cols="tags", multi_hot_pooling="mean", min_count=2,
    )  # fmt: skip
    configs = {
        "criteo": DataConfig(dataset="criteo", data_path=str(tsv), criteo_hash_size=300, min_count=2),
        "csv": DataConfig(**common, data_path=str(csv), timestamp_col="ts", history_length=3),
        "parquet": DataConfig(**common, data_path=str(parquet), max_rows=500),
    }
    for name, cfg in configs.items():
        encoded = []
        for chunk_mb, block, stat in ((64.0, 1 << 17, 1 << 22), (0.004, 97, 61)):  # one chunk vs ~4 KB chunks
            monkeypatch.setattr(preprocess_module, "BLOCK_ROWS", block)
            monkeypatch.setattr(recipe_module, "STAT_BLOCK", stat)
            cache = str(tmp_path / f"cache-{chunk_mb}")
            chunked = replace(cfg, cache_dir=cache, preprocess_chunk_mb=chunk_mb)
            encoded.append(arrays(load_dataset(chunked, lambda s: None)))
        assert encoded[0].keys() == encoded[1].keys(), name
        for key in encoded[0]:
            a, b = encoded[0][key], encoded[1][key]
            assert a.dtype == b.dtype and np.array_equal(a, b), f"{name}: {key} differs"
    # CSV text lists and Parquet lists give the same bags; empty lists are empty bags.
    data = load_dataset(replace(configs["csv"], cache_dir=str(tmp_path / "c"), timestamp_col=None, history_length=0))
    pq_data = load_dataset(replace(configs["parquet"], cache_dir=str(tmp_path / "c"), max_rows=None))
    assert data.multi_hot == ["tags"] and data.table_of("tags").pooling_mode == "mean"
    for split in ("train", "test"):
        a, b = (d.splits[split].read(0, len(d.splits[split])).sparse["tags"] for d in (data, pq_data))
        np.testing.assert_array_equal(a.values, b.values)
        np.testing.assert_array_equal(a.offsets, b.offsets)
    bags = data.splits["train"].read(0, len(data.splits["train"])).sparse["tags"]
    assert bags.lengths().min() == 0 and bags.lengths().max() == 3


def stored_data(tmp_path: Path, rows: int = 1003) -> InteractionData:
    """An on-disk dataset whose dense column is the row number, with a multi-hot feature."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 4, rows)
    split = Split(
        sparse={
            "user": rng.integers(0, 20, rows),
            "tags": Ragged.from_lengths(rng.integers(0, 9, lengths.sum()), lengths),
        },
        dense=np.arange(rows, dtype=np.float32)[:, None],
        labels={"like": (np.arange(rows) % 3 == 0).astype(np.float32)},
    )
    tables = [TableSpec("t_user", 20, ["user"]), TableSpec("t_tags", 9, ["tags"], pooling="sum")]
    data = InteractionData("toy", tables, ["row"], ["like"], {"train": split}, multi_hot=["tags"])
    write_dataset(tmp_path / "stored", data, notes=[], extra={})
    return open_dataset(tmp_path / "stored")[0]


def stream(
    data: InteractionData, rank: int, world: int, epoch: int, start_step: int = 0, prefetch_batches: int = 2
) -> Tuple[List[int], List[int], int]:
    """(row numbers in order, batch sizes, rows read from disk) of one rank's epoch."""
    loader = BatchLoader(
        data, "train", 60, rank, world, shuffle=True, seed=3, block_rows=50, buffer_rows=150,
        prefetch_batches=prefetch_batches,
    )  # fmt: skip
    loader.set_epoch(epoch, start_step)
    source, read = loader.split, []
    original = source.read
    source.read = lambda a, b: (read.append(b - a), original(a, b))[1]  # count what is read
    rows, sizes = [], []
    truth = source.take(np.arange(len(source)))
    for batch in loader:
        real = (batch.weights == 1).numpy()
        ids = batch.dense_features[:, 0].long().numpy()[real]
        rows += ids.tolist()
        sizes.append(batch.batch_size)
        kjt = batch.sparse_features.to_dict()
        np.testing.assert_array_equal(kjt["tags"].lengths().numpy()[real], truth.sparse["tags"].lengths()[ids])
        np.testing.assert_array_equal(kjt["tags"].values().numpy(), truth.sparse["tags"].take(ids).values)
        assert (kjt["tags"].lengths().numpy()[~real] == 0).all() and (kjt["user"].values().numpy()[~real] == 0).all()
    del source.read
    return rows, sizes, sum(read)


def test_stored_split_streams_every_row_once_reading_only_its_share(tmp_path: Path) -> None:
    data = stored_data(tmp_path)
    for world in (1, 2, 3):
        per_rank = [stream(data, r, world, epoch=1) for r in range(world)]
        assert sorted(r for rows, _, _ in per_rank for r in rows) == list(range(1003))
        assert len({tuple(sizes) for _, sizes, _ in per_rank}) == 1  # same steps, same batch sizes
        # Padding rule: 17 steps; the last global batch of 43 rows split 15/14/14 (3 ranks), padded to 15.
        assert len(per_rank[0][1]) == 17 and per_rank[0][1][-1] == -(-43 // world)
        for r, (rows, _, read) in enumerate(per_rank):
            assert read == len(rows) == rank_rows(1003, 60, world)[r]  # reads its share, nothing more
    first, again = stream(data, 0, 2, 5), stream(data, 0, 2, 5, prefetch_batches=0)
    assert first == again  # seeded: the prefetch thread changes nothing
    assert stream(data, 0, 2, 6)[0] != first[0]  # a new epoch, a new order
    resumed = stream(data, 0, 2, 5, start_step=7)  # a resumed epoch yields the same remaining batches
    assert resumed[0] == first[0][7 * 30 :] and resumed[2] < first[2]
    with pytest.raises(ValueError, match="--shuffle_block_rows must be positive"):
        BatchLoader(data, "train", 60, block_rows=0)


def test_multi_hot_bags_reach_the_model_pooled(tmp_path: Path) -> None:
    data = stored_data(tmp_path)
    loader = BatchLoader(data, "train", 64, shuffle=False, prefetch_batches=0)
    batch = next(iter(loader))
    rows = data.splits["train"].read(0, 64).sparse["tags"]
    for pooling in ("sum", "mean"):
        tables = [replace(t, pooling=pooling) if t.name == "t_tags" else t for t in data.tables]
        torch.manual_seed(0)
        ebc = EmbeddingBagCollection(tables=embedding_bag_configs(tables, 4))
        pooled = ebc(batch.sparse_features)["tags"]
        weight = ebc.embedding_bags["t_tags"].weight.detach()
        for r in range(64):
            bag = weight[torch.from_numpy(rows.values[rows.offsets[r] : rows.offsets[r + 1]]).long()]
            want = bag.sum(0) if pooling == "sum" or len(bag) == 0 else bag.mean(0)
            torch.testing.assert_close(pooled[r], want)


def write_torchrec_days(folder: Path, days: int = 3, rows: int = 400) -> None:
    """Day files as TorchRec's ``BinaryCriteoUtils.tsv_to_npys`` writes them."""
    from torchrec.datasets.criteo import BinaryCriteoUtils

    folder.mkdir()
    for day in range(days):
        tsv = folder / f"day_{day}.tsv"
        make_criteo_tsv(tsv, rows=rows, seed=day)
        out = [str(folder / f"day_{day}_{kind}.npy") for kind in ("dense", "sparse", "labels")]
        BinaryCriteoUtils.tsv_to_npys(str(tsv), *out)
        tsv.unlink()


def _two_ranks(rank: int, world_size: int, tmp: str) -> None:
    """Every data check that needs real ranks, in one spawn (spawning costs seconds)."""
    # The loader, in memory and from column files, covers every row once across ranks.
    in_memory, stored = make_data(), open_dataset(Path(tmp) / "stored")[0]
    for data, (rows, sizes, *_) in (
        (in_memory, collect(in_memory, rank, world_size, 64, epoch=2)),
        (stored, stream(stored, rank, world_size, epoch=2)),
    ):
        everything = [None] * world_size
        dist.all_gather_object(everything, (rows, sizes))
        assert sorted(r for rows, _ in everything for r in rows) == list(range(len(data.splits["train"])))
        assert everything[0][1] == everything[1][1], "ranks disagree on batch sizes"
    # A folder of TorchRec's Criteo day files trains.
    cfg = TrainConfig.from_flags(
        data=DataConfig(dataset="criteo", data_path=os.path.join(tmp, "days"), criteo_hash_size=500),
        model=ModelConfig(embedding_dim=4, dense_arch_layer_sizes="8,4", over_arch_layer_sizes="8"),
        epochs=1, batch_size=128, eval_batch_size=256, train_eval_rows=300, progress_bar=False, checkpoint=False,
        tensorboard_dir=tmp, run_name="run",
    )  # fmt: skip
    trainer = Trainer(cfg, init_distributed())
    test = trainer.data.splits["test"]
    assert len(trainer.data.splits["train"]) == 800 and len(test) == 200  # days 0-1; the 2nd half of day 2
    summary = trainer.train()
    (evaluation,) = summary["evaluations"]
    assert evaluation["test"]["label"]["rows"] == 200 and 0.0 <= evaluation["test"]["label"]["auc"] <= 1.0
    # The test rows are TorchRec's own arrays, ids modulo the table size.
    day = np.load(os.path.join(tmp, "days", "day_2_sparse.npy"))[200:]
    np.testing.assert_array_equal(test.read(0, 200).sparse["cat_3"], day[:, 3] % 500)
    # An epoch cut short (--limit_train_batches, an early stop) leaves the prefetch thread
    # inside torch's C++ code; the rank must still exit with 0 (run_on_ranks checks).
    next(Prefetcher(_slow_torch_batches(), depth=1))


def _slow_torch_batches():
    x = torch.randn(400, 400)
    while True:
        for _ in range(10):
            x = torch.tanh(x @ x)
        yield x


def test_two_gloo_ranks_stream_every_row_once_and_train_on_torchrec_criteo_days(tmp_path: Path) -> None:
    write_torchrec_days(tmp_path / "days")
    stored_data(tmp_path)
    run_on_ranks(_two_ranks, 2, str(tmp_path))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["dataset"] == {"train": 800, "test": 200, "train_sample": 300}
    with pytest.raises(ValueError, match=r"needs day_0 \.\. day_K files .* found days \[0\]"):
        only = tmp_path / "one"
        write_torchrec_days(only, days=1, rows=10)
        load_dataset(DataConfig(dataset="criteo", data_path=str(only)), log=lambda s: None)


def test_registered_source_is_loadable(tmp_path: Path) -> None:
    table = tmp_path / "mine.csv"
    events(200).drop(columns="tags").assign(click=lambda f: (f["stars"] > 3).astype(int)).to_csv(table, index=False)
    interactions = get_source("interactions")  # the built-in sources load on first lookup

    def prepare(cfg, path, output, log, meta):  # a source that renames columns, then reuses interactions
        renamed = replace(cfg, user_col="uid", item_col="iid", label_col="click")
        return interactions.prepare(renamed, path, output, log, meta)

    register_source(Source("mine", prepare=prepare, locate=interactions.locate))
    try:
        data = load_dataset(DataConfig(dataset="mine", data_path=str(table), cache_dir=str(tmp_path)), lambda s: None)
        assert data.tasks == ["label"] and len(data.splits["train"]) == 160
    finally:
        del SOURCES["mine"]


def test_the_registrys_builtin_list_is_the_one_list_of_datasets() -> None:
    # A built-in dataset is its module and one line of BUILTIN: that module's SOURCE is a source of its name,
    # the one a lookup gets; no other module of the package defines one or registers one.
    for name, builtin in BUILTIN.items():
        assert get_source(name) is importlib.import_module(builtin.module).SOURCE
        assert SOURCES[name].name == name
    texts = {f"dlrm_multiepoch.data.{p.stem}": p.read_text() for p in (REPO / "dlrm_multiepoch" / "data").glob("*.py")}
    assert {module for module, text in texts.items() if re.search(r"^SOURCE = ", text, re.M)} == {b.module for b in BUILTIN.values()}
    assert not [module for module, text in texts.items() if re.search(r"^register_source\(", text, re.M)]
    builtin = SOURCES["movielens"]  # a registration of a built-in name replaces the built-in source
    try:
        mine = register_source(Source("movielens", builtin.prepare, builtin.locate))
        assert get_source("movielens") is mine
    finally:
        SOURCES["movielens"] = builtin
    with pytest.raises(ValueError, match="--history_length needs user and item columns; --dataset criteo has none"):
        DataConfig(dataset="criteo", history_length=3).validate()
    with pytest.raises(ValueError, match="--dataset 'nosuch' is unknown; choices: bookcrossing, movielens, interactions, criteo"):
        DataConfig(dataset="nosuch").validate()


def test_preprocess_command_imports_no_torch(tmp_path: Path) -> None:
    tsv = tmp_path / "day.tsv"
    make_criteo_tsv(tsv, rows=50)
    script = (
        "import sys\n"
        "from dlrm_multiepoch.cli import main\n"
        f"assert main(['preprocess', '--dataset', 'criteo', '--data_path', {str(tsv)!r}, '--output', "
        f"{str(tmp_path / 'out')!r}]) == 0\n"
        "import dlrm_multiepoch.data.shuffle, dlrm_multiepoch.data.torchrec_criteo\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchrec', 'fbgemm_gpu'))\n"
        "assert not loaded, loaded\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "train on it: torchrun --nproc_per_node 2 -m dlrm_multiepoch.train --dataset criteo --data_path" in proc.stdout
    data = load_dataset(DataConfig(dataset="criteo", data_path=str(tmp_path / "out")), log=lambda s: None)
    assert len(data.splits["train"]) == 40
    with pytest.raises(ValueError, match="holds a preprocessed 'criteo' dataset; pass --dataset criteo"):
        load_dataset(DataConfig(dataset="movielens", data_path=str(tmp_path / "out")), log=lambda s: None)
    again = DataConfig(dataset="criteo", data_path=str(tsv), cache_dir=str(tmp_path))
    assert prepare_dataset(again, str(tmp_path / "out")) == tmp_path / "out"  # same options: nothing to do
    with pytest.raises(ValueError, match=r"other options or input \(differing: criteo_hash_size\)"):
        prepare_dataset(replace(again, criteo_hash_size=77), str(tmp_path / "out"))


def test_prefetcher_stops_when_dropped_and_passes_errors_on() -> None:
    import gc
    import itertools
    import threading

    before = threading.active_count()
    ahead = Prefetcher(itertools.count(), depth=2)
    assert list(itertools.islice(ahead, 3)) == [0, 1, 2]
    del ahead  # an epoch cut short: the thread must not live on
    gc.collect()
    for _ in range(50):
        if threading.active_count() == before:
            break
        threading.Event().wait(0.05)
    assert threading.active_count() == before

    def failing():
        yield 1
        raise OSError("disk gone")

    it = Prefetcher(failing())
    assert next(it) == 1
    with pytest.raises(OSError, match="disk gone"):
        next(it)
