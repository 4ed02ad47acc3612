"""The cluster tests need the Slurm that ``make test-cluster`` starts; without it they fail, never skip.

Plain ``pytest`` (``make test``) does not collect this folder (``norecursedirs`` in
pyproject.toml); ``make test-cluster`` runs ``pytest tests/cluster`` against the cluster
it started and stops.
"""

import os
import subprocess
from pathlib import Path
from typing import Tuple

import pytest

from tests.cluster.slurm_jobs import JOB_TIMEOUT_S, submitted_handle, train_args
from tests.torchx_cli import torchx


@pytest.fixture(scope="session", autouse=True)
def slurm() -> str:
    """The running test cluster's config (``SLURM_CONF``); fails the session when none answers."""
    conf = os.environ.get("SLURM_CONF", "")
    if not os.path.isfile(conf):
        pytest.fail("tests/cluster need a running Slurm: run `make test-cluster` (SLURM_CONF names none)", False)
    probe = subprocess.run(["sinfo", "-h", "-o", "%P %T"], capture_output=True, text=True)
    if probe.returncode != 0 or "idle" not in probe.stdout:
        pytest.fail(f"the Slurm of {conf} does not answer with idle nodes:\n{probe.stdout}{probe.stderr}", False)
    # Every job inherits this environment (sbatch exports it): one thread per rank, so the
    # same ranks compute bitwise the same on any node shape.
    os.environ["OMP_NUM_THREADS"] = "1"
    return conf


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Path, str]:
    """The run the others must reproduce, and its app handle: ``torchx run --wait -s slurm
    dlrm_multiepoch.train -j 1x2``, 2 epochs, uninterrupted (in the debug partition)."""
    here = tmp_path_factory.mktemp("reference")
    # --wait: torchx follows the job through sacct and exits 1 unless it SUCCEEDED.
    out = torchx("run", "--wait", "-s", "slurm", "dlrm_multiepoch.train", "-j", "1x2", *train_args(here, "ref"),
                 cwd=here, timeout=JOB_TIMEOUT_S)  # fmt: skip
    return here / "ref", submitted_handle(out.stdout + out.stderr)
