"""Entry point that torchrun / TorchX launch: ``python apps/train.py --help``."""

import logging
import sys

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from dlrm_multiepoch.distributed import init_distributed
from dlrm_multiepoch.train.config import parse_config
from dlrm_multiepoch.train.trainer import Trainer


@record
def main(argv=None) -> None:
    cfg = parse_config(argv, check_paths=True)
    env = init_distributed()
    # Our modules log transitions (e.g. freeze-schedule windows) at INFO, on rank 0 only.
    logging.basicConfig(format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("dlrm_multiepoch").setLevel(logging.INFO if env.is_main else logging.WARNING)
    try:
        Trainer(cfg, env).train()
        dist.barrier()  # no rank tears the group down while a peer's collective is in flight
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
