"""Session fixtures shared across test modules."""

from pathlib import Path

import pytest

from tests.multiprocess import run_on_ranks


def _train_references(rank: int, world_size: int, tmp: str) -> None:
    from dlrm_multiepoch.distributed import init_distributed
    from dlrm_multiepoch.train.config import parse_config
    from dlrm_multiepoch.train.trainer import Trainer
    from tests.resume_helpers import E2E_FLAGS, resume_config

    env = init_distributed()
    Trainer(resume_config(tmp, "a", keep_checkpoints=10), env).train()
    Trainer(parse_config(E2E_FLAGS + ["--tensorboard_dir", tmp, "--run_name", "e2e"]), env).train()


@pytest.fixture(scope="session")
def uninterrupted_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two uninterrupted 2-rank runs that interrupted ones must reproduce, in one spawn.

    ``a``: ``resume_config`` (every checkpoint kept); ``e2e``: the app test's ``E2E_FLAGS``.
    """
    tmp = tmp_path_factory.mktemp("uninterrupted")
    run_on_ranks(_train_references, 2, str(tmp))
    return tmp
