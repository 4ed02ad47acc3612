"""The training app as a module: ``python -m dlrm_multiepoch.train --help``; under torchrun, on 2 CPU ranks::

    torchrun --nproc_per_node 2 -m dlrm_multiepoch.train --epochs 3 --freeze_schedule delayed
"""

from dlrm_multiepoch.train.app import train_main

if __name__ == "__main__":
    train_main()
