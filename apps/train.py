"""Entry point that torchrun / TorchX launch: ``python apps/train.py --help``."""

import sys

from torch.distributed.elastic.multiprocessing.errors import record

from dlrm_multiepoch.train.app import run_trainer
from dlrm_multiepoch.train.config import parse_config


@record
def main(argv=None) -> None:
    run_trainer(parse_config(argv, check_paths=True))


if __name__ == "__main__":
    main(sys.argv[1:])
