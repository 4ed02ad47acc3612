"""FrequencyAdaptiveLR on 2 gloo ranks: equal to a plain per-row-LR reference optimizer.

Tables are table-wise and row-wise sharded by TorchRec's planner with FBGEMM's fused
in-backward SGD, Adagrad and row-wise Adagrad (the app's ``apply_embedding_optimizer``).
Pooled tables sit in an ``EmbeddingBagCollection``; the row-wise table in an
``EmbeddingCollection`` (TorchRec 1.8 row-shards bags on CUDA only).
The reference trains full, unsharded copies of the tables on the global batch with
plain torch code: per-row learning rate ``lr * f(count)`` from global lookup counts.
"""

from typing import Dict, List, Tuple

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import nn
from torchrec.distributed import DistributedModelParallel
from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_multiepoch.optim.falr import FrequencyAdaptiveLR
from dlrm_multiepoch.optim.options import FALRConfig, parse_falr_ref
from dlrm_multiepoch.optim.shards import table_shards
from dlrm_multiepoch.saved_state import StateMismatch
from dlrm_multiepoch.testing.dlrm_job import shard
from dlrm_multiepoch.testing.ranks import run_on_ranks
from dlrm_multiepoch.train.sharding import apply_embedding_optimizer
from tests.sharding_helpers import load_full_tables

# name -> (rows, dim, sharding type, FALR on)
TABLES = {
    "tw": (30, 8, "table_wise", True),
    "rw": (41, 8, "row_wise", True),
    "narrow": (25, 4, "table_wise", True),
    "off": (20, 8, "table_wise", False),
}
LOCAL_BATCH = 6
STEPS = 4
LR = 0.3


SEQUENCE = "rw"  # the EmbeddingCollection's table


class Tower(nn.Module):
    """Pooled tables and one sequence table; ``forward`` returns the loss."""

    def __init__(self) -> None:
        super().__init__()
        bags = [(n, r, d) for n, (r, d, _, _) in TABLES.items() if n != SEQUENCE]
        self.ebc = EmbeddingBagCollection(
            tables=[EmbeddingBagConfig(name=n, embedding_dim=d, num_embeddings=r, feature_names=[f"f_{n}"]) for n, r, d in bags]
        )
        rows, dim = TABLES[SEQUENCE][:2]
        self.ec = EmbeddingCollection(
            tables=[EmbeddingConfig(name=SEQUENCE, embedding_dim=dim, num_embeddings=rows, feature_names=[f"f_{SEQUENCE}"])]
        )

    def forward(self, bags: KeyedJaggedTensor, seq: KeyedJaggedTensor, target: torch.Tensor) -> torch.Tensor:
        return _loss(self.ebc(bags).values(), self.ec(seq)[f"f_{SEQUENCE}"].values(), target)


def _loss(pooled: torch.Tensor, seq: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((pooled - target) ** 2).sum() + (0.5 * seq**2 + seq).sum()


def _global_batch(step: int) -> Tuple[Dict[str, List[np.ndarray]], torch.Tensor]:
    """Bags per feature for the 2 x LOCAL_BATCH samples of ``step`` (0-3 ids each, repeats
    within and across bags; the id range grows so later steps bring new rows)."""
    rng = np.random.default_rng(step)
    bags: Dict[str, List[np.ndarray]] = {}
    for name, (rows, _, _, _) in TABLES.items():
        high = min(rows, 6 + 8 * step)
        bags[name] = [rng.integers(0, high, rng.integers(0, 4)) for _ in range(2 * LOCAL_BATCH)]
    width = sum(d for n, (_, d, _, _) in TABLES.items() if n != SEQUENCE)
    target = torch.from_numpy(rng.standard_normal((2 * LOCAL_BATCH, width)).astype(np.float32))
    return bags, target


def _kjt(bags: Dict[str, List[np.ndarray]], rows: slice, names: List[str]) -> KeyedJaggedTensor:
    lengths, values = [], []
    for name in names:
        for bag in bags[name][rows]:
            lengths.append(len(bag))
            values.extend(bag.tolist())
    return KeyedJaggedTensor.from_lengths_sync(
        keys=[f"f_{n}" for n in names], values=torch.tensor(values, dtype=torch.int64), lengths=torch.tensor(lengths)
    )


def _inputs(bags: Dict[str, List[np.ndarray]], rows: slice) -> Tuple[KeyedJaggedTensor, KeyedJaggedTensor]:
    return _kjt(bags, rows, [n for n in TABLES if n != SEQUENCE]), _kjt(bags, rows, [SEQUENCE])


def _reference_step(
    weights: Dict[str, torch.Tensor], states: Dict[str, torch.Tensor], counts: Dict[str, torch.Tensor],
    bags: Dict[str, List[np.ndarray]], target: torch.Tensor, optimizer: str, config: FALRConfig, eps: float,
) -> None:  # fmt: skip
    """One step of the per-row-LR optimizer on full tables, global batch (in place)."""
    params = {n: w.clone().requires_grad_(True) for n, w in weights.items()}
    pooled = []
    for name in TABLES:
        ids = torch.from_numpy(np.concatenate(bags[name])).long()
        if name == SEQUENCE:
            seq = F.embedding(ids, params[name])
            continue
        offsets = torch.tensor([0] + [len(b) for b in bags[name][:-1]]).cumsum(0)
        pooled.append(F.embedding_bag(ids, params[name], offsets, mode="sum"))
    # TorchRec divides table gradients by the world size (comm_ops gradient division), as
    # DDP averages dense ones: the global loss is the mean of the 2 ranks' losses.
    (_loss(torch.cat(pooled, dim=1), seq, target) / 2).backward()
    for name, (rows, dim, _, on) in TABLES.items():
        counts[name] += torch.bincount(torch.from_numpy(np.concatenate(bags[name])).long(), minlength=rows).int()
        g = params[name].grad
        if on:
            m = config.multiplier(counts[name], torch.tensor(config.ref or counts[name].max().item()))
            lr = (LR * m * (counts[name] > 0))[:, None]
        else:
            lr = LR
        with torch.no_grad():
            if optimizer == "sgd":
                weights[name] -= lr * g
            elif optimizer == "adagrad":
                states[name] += g * g
                weights[name] -= lr * g / (states[name].sqrt() + eps)
            else:
                states[name] += (g * g).mean(1)
                weights[name] -= lr * g / (states[name].sqrt()[:, None] + eps)


def _build(rank: int, optimizer: str) -> Tuple[DistributedModelParallel, Dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = Tower()
    full = {k: v.detach().clone() for k, v in model.state_dict().items()}
    apply_embedding_optimizer(model, optimizer, LR)
    dmp = shard(model, 2, {n: kind for n, (_, _, kind, _) in TABLES.items()})
    load_full_tables(dmp, full)
    return dmp, {k.split(".")[-2]: v.clone() for k, v in full.items()}


def _check_against_reference(rank: int, world_size: int, tmp: str) -> None:
    cases = [
        ("sgd", FALRConfig("log")),
        ("adagrad", FALRConfig("power", power=0.5, floor=0.1)),
        ("rowwise_adagrad", FALRConfig("log", floor=0.05, ref=5)),
    ]
    for optimizer, config in cases:
        dmp, weights = _build(rank, optimizer)
        shards = table_shards(dmp)
        assert {s.name for s in shards if s.row_split} == {"rw"}, [(s.name, s.local_rows, s.config.num_embeddings, s.row_offset, type(s.kernel).__name__) for s in shards]
        falr = FrequencyAdaptiveLR(dmp, config, tables=[n for n, t in TABLES.items() if t[3]])
        eps = shards[0].tbe.optimizer_args.eps
        states = {n: torch.zeros(r, d) if optimizer == "adagrad" else torch.zeros(r) for n, (r, d, _, _) in TABLES.items()}
        counts = {n: torch.zeros(r, dtype=torch.int32) for n, (r, _, _, _) in TABLES.items()}
        for step in range(STEPS):
            bags, target = _global_batch(step)
            local = slice(rank * LOCAL_BATCH, (rank + 1) * LOCAL_BATCH)
            dmp(*_inputs(bags, local), target[local]).backward()
            _reference_step(weights, states, counts, bags, target, optimizer, config, eps)
        for s in shards:
            rows = slice(s.row_offset, s.row_offset + s.local_rows)
            torch.testing.assert_close(s.weight(), weights[s.name][rows], rtol=1e-5, atol=1e-6, msg=lambda m: f"{optimizer} {s.name} {m}")
            if optimizer != "sgd":
                torch.testing.assert_close(s.optimizer_states()[0], states[s.name][rows], rtol=1e-5, atol=1e-7)
            if TABLES[s.name][3]:
                assert torch.equal(falr.counts(s.name), counts[s.name][rows]), (optimizer, s.name)
        if optimizer == "rowwise_adagrad":  # counters survive a DCP save and load
            dcp.save({"falr": falr}, checkpoint_id=tmp)
            falr.remove()
            fresh = FrequencyAdaptiveLR(dmp, config, tables=falr.tables)
            assert all(int(fresh.counts(n).sum()) == 0 for n in fresh.tables)
            with pytest.raises(StateMismatch, match=r"frequency-adaptive LR: the saved state has no counters for table"):
                fresh.load_state_dict({})  # refused by name before any table is loaded
            dcp.load({"falr": fresh}, checkpoint_id=tmp)
            for n in fresh.tables:
                rows = [s for s in shards if s.name == n]
                for s in rows:
                    assert torch.equal(fresh.counts(n), counts[n][s.row_offset : s.row_offset + s.local_rows])
            fresh.remove()
        dist.barrier()


def test_falr_equals_per_row_lr_reference_on_two_ranks(tmp_path):
    run_on_ranks(_check_against_reference, 2, str(tmp_path / "ckpt"))


def test_falr_config_errors_name_the_flag():
    with pytest.raises(ValueError, match="--falr must be one of"):
        FALRConfig("sqrt")
    with pytest.raises(ValueError, match="--falr_floor"):
        FALRConfig(floor=1.5)
    with pytest.raises(ValueError, match="--falr_ref"):
        parse_falr_ref("biggest")
    assert parse_falr_ref("max") is None and parse_falr_ref("100") == 100
    m = FALRConfig("log", floor=0.2).multiplier(torch.tensor([1, 3, 7]), torch.tensor(7))
    torch.testing.assert_close(m, torch.tensor([max(0.2, np.log(2) / np.log(8)), np.log(4) / np.log(8), 1.0]).float())
