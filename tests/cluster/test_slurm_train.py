"""The training component on a real Slurm, on one node and on two, and multi-node runs under ``local_cwd``.

Ranks compute the same whatever the node shape: a ``-j 2x1`` job (two Slurm nodes, one
rank each, torchrun's c10d rendezvous on the first node) must end bitwise equal to the
``-j 1x2`` reference, and so must a ``1x2`` run resumed from its mid-epoch checkpoint.
"""

from pathlib import Path
from typing import Tuple

import pytest

from tests.cluster.slurm_jobs import (
    EPOCHS,
    JOB_TIMEOUT_S,
    STEPS_PER_EPOCH,
    job_id,
    job_records,
    submitted_handle,
    summary_of,
    train_args,
)
from tests.resume_helpers import scalars
from tests.torchx_cli import torchx

CHECKPOINT_STEPS = [4, 8, 10, 12, 16, 20]  # every 4th step of the run and at each epoch's end


def _shards(checkpoint: Path) -> list:
    return sorted(p.name for p in checkpoint.glob("*.distcp"))


def _assert_same_run(run: Path, reference: Path, from_step: int = 0) -> None:
    """Same evaluations and, from ``from_step`` on, the same logged curves, bitwise."""
    assert summary_of(run)["evaluations"] == summary_of(reference)["evaluations"]
    for tag in ("train/loss", "test/like/auc", "test/love/logloss"):
        ours = scalars(str(run), tag)
        assert ours and ours == [(s, v) for s, v in scalars(str(reference), tag) if s > from_step], tag


def test_train_runs_to_the_end_and_fills_its_run_folder(reference_run: Tuple[Path, str]) -> None:
    run, handle = reference_run
    summary = summary_of(run)
    assert [e["epoch"] for e in summary["evaluations"]] == list(range(1, EPOCHS + 1))
    assert summary["job_id"] == job_id(handle)  # Slurm's job id, so a requeued job resumes its own run
    test_rows = summary["dataset"]["test"]
    assert all(e["test"][task]["rows"] == test_rows for e in summary["evaluations"] for task in ("like", "love"))
    assert sorted(int(p.name[len("step_") :]) for p in (run / "checkpoints").iterdir()) == CHECKPOINT_STEPS
    for step in CHECKPOINT_STEPS:  # one shard file per rank, and the state file written last
        assert _shards(run / "checkpoints" / f"step_{step}") == ["__0_0.distcp", "__1_0.distcp"]
        assert (run / "checkpoints" / f"step_{step}" / "trainer_state.json").is_file()
    assert scalars(str(run), "train/loss")[-1][0] == EPOCHS * STEPS_PER_EPOCH
    # What a user checks next, through the accounting TorchX reads (sacct).
    status = torchx("status", handle, cwd=run.parent).stdout
    assert "SUCCEEDED" in status, status
    log = torchx("log", "--streams", "stdout", f"{handle}/train/0", cwd=run.parent).stdout
    assert f"saved checkpoint {run}/checkpoints/step_{EPOCHS * STEPS_PER_EPOCH} " in log, log[-3000:]


@pytest.fixture(scope="module")
def two_node_run(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Path, str]:
    """The reference run as ``-j 2x1`` on the ``multi`` partition: two Slurm nodes, one rank each."""
    here = tmp_path_factory.mktemp("two_nodes")
    out = torchx(
        "run", "--wait", "-s", "slurm", "-cfg", "partition=multi", "dlrm_multiepoch.train", "-j", "2x1",
        "--cpu", "1", "--memMB", "4000", *train_args(here, "2x1"), cwd=here, timeout=JOB_TIMEOUT_S,
    )  # fmt: skip
    return here / "2x1", job_id(submitted_handle(out.stdout + out.stderr))


def test_two_nodes_on_slurm_equal_one_node(two_node_run: Tuple[Path, str], reference_run: Tuple[Path, str]) -> None:
    run, jid = two_node_run
    # One allocation per node group (a heterogeneous job), on two different nodes.
    nodes = [row[0] for row in job_records(jid, "NodeList")]
    assert len(nodes) == 2 and len(set(nodes)) == 2, nodes
    for step in CHECKPOINT_STEPS:  # each node's rank wrote its own shard
        assert _shards(run / "checkpoints" / f"step_{step}") == ["__0_0.distcp", "__1_0.distcp"]
    _assert_same_run(run, reference_run[0])


def test_two_node_checkpoint_resumes_on_one_node_mid_epoch(
    tmp_path: Path, two_node_run: Tuple[Path, str], reference_run: Tuple[Path, str]
) -> None:
    """2x1 -> 1x2 (local_cwd), from a checkpoint 6 steps into epoch 2: the rest of the run is the reference's."""
    step = 16
    checkpoint = two_node_run[0] / "checkpoints" / f"step_{step}"
    torchx("run", "-s", "local_cwd", "dlrm_multiepoch.train", "-j", "1x2",
           *train_args(tmp_path, "1x2", "--resume", str(checkpoint)), cwd=tmp_path, timeout=JOB_TIMEOUT_S)  # fmt: skip
    run = tmp_path / "1x2"
    resumed = summary_of(run)["resumed_from"]
    assert [(r["path"], r["step"], r["epoch"], r["batch"]) for r in resumed] == [(str(checkpoint), step, 1, 6)]
    _assert_same_run(run, reference_run[0], from_step=step)


def test_two_nodes_of_two_ranks_under_local_cwd(tmp_path: Path, two_node_run: Tuple[Path, str]) -> None:
    """``-j 2x2`` under local_cwd (two torchrun agents, rendezvous on localhost) continues the
    2-rank run's epoch-1 checkpoint on 4 ranks: resharded load, 4 shards saved, every test row evaluated."""
    checkpoint = two_node_run[0] / "checkpoints" / f"step_{STEPS_PER_EPOCH}"
    out = torchx("run", "-s", "local_cwd", "dlrm_multiepoch.train", "-j", "2x2", "--cpu", "1",
                 *train_args(tmp_path, "2x2", "--resume", str(checkpoint)), cwd=tmp_path, timeout=JOB_TIMEOUT_S)  # fmt: skip
    run = tmp_path / "2x2"
    summary = summary_of(run)
    assert summary["resumed_from"][0]["step"] == STEPS_PER_EPOCH
    assert "world size 2 -> 4" in out.stdout + out.stderr
    last = summary["evaluations"][-1]
    assert last["epoch"] == EPOCHS and last["step"] == EPOCHS * STEPS_PER_EPOCH
    assert all(last["test"][task]["rows"] == summary["dataset"]["test"] for task in ("like", "love"))
    final = run / "checkpoints" / f"step_{EPOCHS * STEPS_PER_EPOCH}"
    assert _shards(final) == [f"__{rank}_0.distcp" for rank in range(4)]
