"""Entry point that torchrun / TorchX launch: ``python apps/train.py --help``."""

import sys

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from dlrm_multiepoch.distributed import init_distributed
from dlrm_multiepoch.train.config import parse_config
from dlrm_multiepoch.train.trainer import Trainer


@record
def main(argv=None) -> None:
    cfg = parse_config(argv)
    env = init_distributed()
    try:
        Trainer(cfg, env).train()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
