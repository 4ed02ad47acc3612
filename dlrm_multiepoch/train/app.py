"""The training and pre-training apps' entry functions and what both do around the Trainer: the process
group, the console's logging, and a clean shutdown.

Launched as modules of the installed package, so any working directory works (TorchX's
``dist.ddp`` takes ``m=``, torchrun takes ``-m``)::

    torchrun --nproc_per_node 2 -m dlrm_multiepoch.train --epochs 3          # train_main
    torchrun --nproc_per_node 2 -m dlrm_multiepoch.pretrain --pretrain_output tables   # pretrain_main

``apps/train.py`` and ``apps/pretrain.py`` are the same entry functions as files, for
``torchrun apps/train.py`` in a checkout.
"""

import logging
import sys
from typing import Optional, Sequence

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from dlrm_multiepoch.distributed import DistEnv, init_distributed
from dlrm_multiepoch.launch_options import TRAIN_MODULE
from dlrm_multiepoch.train.config import TrainConfig, parse_config
from dlrm_multiepoch.train.spec import TRAIN, TrainSpec
from dlrm_multiepoch.train.trainer import Trainer

PRETRAIN_MODULE = "dlrm_multiepoch.pretrain"


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

        run_trainer(parse_config(check_paths=True))     # python -m dlrm_multiepoch.train under torchrun / TorchX
    """
    env = init_distributed()
    console_logging(env)
    try:
        Trainer(cfg, env, spec=spec).train()
        dist.barrier()  # no rank tears the group down while a peer's collective is in flight
    finally:
        dist.destroy_process_group()


# @record writes an uncaught exception to torchrun's error file, so TorchX and torchrun name the failing rank's error.
@record
def train_main(argv: Optional[Sequence[str]] = None) -> None:
    """The training app: ``python -m dlrm_multiepoch.train [FLAGS]`` (``--help`` lists them)."""
    run_trainer(parse_config(_argv(argv), check_paths=True, prog=f"python -m {TRAIN_MODULE}"))


@record
def pretrain_main(argv: Optional[Sequence[str]] = None) -> None:
    """The pre-training app: ``python -m dlrm_multiepoch.pretrain [FLAGS] --pretrain_output DIR``."""
    from dlrm_multiepoch.train.pretrain import parse_pretrain_config

    run_trainer(*parse_pretrain_config(_argv(argv), prog=f"python -m {PRETRAIN_MODULE}"))


def _argv(argv: Optional[Sequence[str]]) -> Sequence[str]:
    return sys.argv[1:] if argv is None else argv
