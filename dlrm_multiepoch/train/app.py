"""What both entry points (``apps/train.py``, ``apps/pretrain.py``) do around the Trainer: the process group,
the console's logging, and a clean shutdown."""

import logging

import torch.distributed as dist

from dlrm_multiepoch.distributed import DistEnv, init_distributed
from dlrm_multiepoch.train.config import TrainConfig
from dlrm_multiepoch.train.spec import TRAIN, TrainSpec
from dlrm_multiepoch.train.trainer import Trainer


def console_logging(env: DistEnv) -> None:
    """The console's logging for a training process: our transitions on rank 0, no library noise."""
    # Our modules log transitions (e.g. freeze-schedule windows) at INFO, on rank 0 only.
    logging.basicConfig(format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("dlrm_multiepoch").setLevel(logging.INFO if env.is_main else logging.WARNING)
    # TorchRec's pipeline traces the model: torch.fx warns about an API it uses, once per rank, nothing for users.
    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)


def run_trainer(cfg: TrainConfig, spec: TrainSpec = TRAIN) -> None:
    """Start the process group, train ``spec``'s run of ``cfg`` on every rank, and tear the group down.

    Example::

        run_trainer(parse_config(check_paths=True))     # apps/train.py under torchrun / TorchX
    """
    env = init_distributed()
    console_logging(env)
    try:
        Trainer(cfg, env, spec=spec).train()
        dist.barrier()  # no rank tears the group down while a peer's collective is in flight
    finally:
        dist.destroy_process_group()
