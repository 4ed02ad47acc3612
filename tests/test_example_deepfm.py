"""The user's own loop, end to end: ``examples/deepfm`` (the docs' two drop-in blocks verbatim) on 2 gloo ranks.

The example's DeepFM (an EBC of one-id bags, an EC sequence feature pooled in the model,
TorchRec's ``Batch``) is sharded with ``user`` and ``history`` on rank 0 only and
``category`` on rank 1 only, so every rank lacks some table's shard: the case in which
DCP's load planner falls back to its torch 2.3 key layout. Each loop trains 2 epochs
and saves a checkpoint after each with one ``dcp.save``; a fresh process state resumed
from the first with one ``dcp.load`` of the same dict ends bitwise where the
uninterrupted run ended (weights, fused and dense optimizer state, the automatic
schedule's decisions, ``summary.json``'s evaluations). The parts loop is interrupted
the way a crash would: its loader fails at the start of epoch 2, after epoch 1's
checkpoint. Its logs hold what the app logs (table LRs, freeze states, the skipped-batch
count, the overlap line). The parts loop's equality with the app's ``Trainer`` on the
same model is ``tests/test_dropin.py``'s (the app's ``Trainer`` trains the example's DeepFM by
``--model app_model:build``).
"""

import contextlib
import io
import json
import logging
from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch
import torch.distributed as dist

from dlrm_multiepoch.testing.ranks import run_on_ranks
from tests.doc_blocks import LOOP, PAGES, PARTS, doc_block, example_block, import_example
from tests.resume_helpers import scalars
from tests.sharding_helpers import differing_keys, snapshot

ROWS = ["--epochs", "2", "--train_rows", "512", "--val_rows", "128", "--batch_size", "64"]  # 4 steps an epoch on 2 ranks


def test_the_docs_blocks_are_the_examples_loops() -> None:
    for name in (LOOP, PARTS):
        assert doc_block(name) == example_block(name), f"{PAGES[name].name}'s {name!r} block and the example's differ"


class _Crash(RuntimeError):
    """What the interrupted run dies of."""


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _freeze_loop_resumes(tmp: str, rank: int) -> None:
    _, example = import_example()
    console = io.StringIO()
    with contextlib.redirect_stdout(console):
        full = example.main(["--loop", "freeze", "--checkpoint_dir", f"{tmp}/freeze", *ROWS])
    # What the user reads at the end (issue 38, row 11): the validation metrics, from rank 0 only.
    click = full["validation"]["click"]
    expected = f"after 2 epochs: validation click: auc {click['auc']:.4f}  logloss {click['logloss']:.4f}  ne {click['ne']:.4f}"
    assert console.getvalue().splitlines() == ([expected] if rank == 0 else []), console.getvalue()
    assert 0 < click["auc"] < 1 and click["logloss"] > 0
    model = full["model"]
    # The case the fix is for: this rank holds no shard of some table (DCP's planner then reads the old layout).
    empty = [k for k, v in model.state_dict().items() if hasattr(v, "local_shards") and not v.local_shards()]
    assert empty == (["ebc.embedding_bags.category.weight"] if rank == 0 else
                     ["ebc.embedding_bags.user.weight", "ec.embeddings.history.weight"]), empty  # fmt: skip
    end = snapshot(model, full["optimizer"])
    resumed = example.main(
        ["--loop", "freeze", "--checkpoint_dir", f"{tmp}/freeze-resumed", "--resume_from", f"{tmp}/freeze/epoch_0", *ROWS]
    )
    assert resumed["freeze"].global_step == full["freeze"].global_step == 8
    assert not differing_keys(end, snapshot(resumed["model"], resumed["optimizer"]))


def _parts_loop_resumes(tmp: str, rank: int) -> None:
    deepfm, example = import_example()
    lines, console = _Lines(), io.StringIO()
    logging.getLogger("dlrm_multiepoch").addHandler(lines)
    with contextlib.redirect_stdout(console):
        full = example.main(["--loop", "parts", "--checkpoint_dir", f"{tmp}/full", *ROWS])
    logging.getLogger("dlrm_multiepoch").removeHandler(lines)
    decisions = [d.to_dict() for d in full["freeze"].decisions]
    assert any(d["transition"] == "frozen->joint" for d in decisions), decisions  # the schedule acted

    class CrashingLoader(deepfm.Loader):  # the job dies at the start of epoch 2, after epoch 1's checkpoint
        def __iter__(self):
            if self.epoch == 1:
                raise _Crash()
            return super().__iter__()

    train, val = deepfm.splits(512, 128)
    model, dense_optimizer = example.build(rank, dist.get_world_size(), torch.device("cpu"))
    optimizer = example.CombinedOptimizer([model.fused_optimizer, dense_optimizer])
    rates = {f: 0.05 for f in list(deepfm.POOLED) + list(deepfm.SEQUENCE)}
    with pytest.raises(_Crash):
        example.parts_loop(
            model, optimizer, example.TASKS, CrashingLoader(train, 64, rank, 2), deepfm.Loader(val, 64, rank, 2, shuffle=False),
            2, torch.device("cpu"), rank, rates, f"{tmp}/crashed",
        )  # fmt: skip
    resumed = example.main(
        ["--loop", "parts", "--checkpoint_dir", f"{tmp}/crashed", "--resume_from", f"{tmp}/crashed/epoch_0", *ROWS]
    )
    assert [d.to_dict() for d in resumed["freeze"].decisions] == decisions
    assert not differing_keys(snapshot(full["model"], full["optimizer"]), snapshot(resumed["model"], resumed["optimizer"]))
    assert resumed["progress"].step == full["progress"].step == 8
    if rank == 0:
        _check_logs(tmp, full["logger"].summary, lines.lines + console.getvalue().splitlines())


def _check_logs(tmp: str, summary: Dict[str, Any], lines: List[str]) -> None:
    """What the app logs: evaluations in summary.json (the resumed run's too), LRs, freeze states, skipped batches."""
    written = json.loads(Path(f"{tmp}/full/logs/summary.json").read_text())
    resumed = json.loads(Path(f"{tmp}/crashed/logs/summary.json").read_text())
    assert len(written["evaluations"]) == len(summary["evaluations"]) >= 2
    assert resumed["evaluations"] == written["evaluations"] and resumed["best"] == written["best"]
    # lr/category too: its one shard lives on rank 1, the logger on rank 0 (issue 38, row 1).
    for tag in ("lr/user", "lr/history", "lr/category", "lr/item", "freeze/tables", "train/skipped_nonfinite_batches"):
        assert scalars(f"{tmp}/full/logs", tag), tag
    assert any(line.startswith("table LR: warmup 0.5") and "category" in line for line in lines), lines  # parts describe themselves
    overlap = [line for line in lines if "overlaps" in line]
    assert overlap == ["SemiSyncTrainPipeline: every lookup overlaps the previous backward (ebc, ec)"], lines


def _check(rank: int, world_size: int, tmp: str) -> None:
    _freeze_loop_resumes(tmp, rank)
    _parts_loop_resumes(tmp, rank)


def test_example_trains_saves_and_resumes_with_one_dcp_load_bitwise(tmp_path: Path) -> None:
    run_on_ranks(_check, 2, str(tmp_path))
