"""Pre-train the embedding tables, then fine-tune from them: ``python apps/pretrain.py --help``.

A run of the training app's :class:`~dlrm_multiepoch.train.trainer.Trainer` with the
pre-training model and loss (:class:`~dlrm_multiepoch.train.pretrain.PretrainSpec`): it
takes the training app's flags (data, model, batch, optimizer, sharding, ``--epochs``,
``--pipeline``, the run folder, checkpoint and ``--resume`` flags, logging, progress bar;
a flag it cannot apply is refused by name) plus the ``--pretrain_*`` flags below, and at
the end saves the tables with ``torch.distributed.checkpoint`` to ``--pretrain_output``.
Then::

    python apps/train.py --model multipath --history_length 10 --pretrained_tables <output>

Launch like the training app (torchrun / TorchX), e.g. on 2 CPU ranks::

    torchrun --nproc_per_node 2 apps/pretrain.py --dataset bookcrossing --history_length 10 \\
        --pretrain_output checkpoints/pretrained-bookcrossing
"""

import argparse
import sys
from typing import List, Optional, Sequence, Tuple

from torch.distributed.elastic.multiprocessing.errors import record

from dlrm_multiepoch.train.app import run_trainer
from dlrm_multiepoch.train.config import TrainConfig, build_parser, parse_config
from dlrm_multiepoch.train.pretrain import PretrainSpec


def _pretrain_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("pre-training")
    group.add_argument("--pretrain_output", required=True, help="checkpoint folder to write the tables to")
    group.add_argument(
        "--pretrain_train_fraction", type=float, default=0.5,
        help="without a 'pretrain' split in the dataset: fraction of the train split pre-trained on",
    )  # fmt: skip


def parse_pretrain_config(argv: Optional[Sequence[str]] = None) -> Tuple[TrainConfig, PretrainSpec]:
    """The training app's config and the pre-training spec; errors name the flag."""
    argv = list(sys.argv[1:] if argv is None else argv)
    full = build_parser()
    full.description = __doc__.splitlines()[0]
    _pretrain_flags(full)
    full.parse_args(argv)  # --help, unknown flags and types, over both flag sets
    own = argparse.ArgumentParser(add_help=False)
    _pretrain_flags(own)
    ns, rest = own.parse_known_args(argv)
    cfg = parse_config(rest, check_paths=True)
    try:
        spec = PretrainSpec(ns.pretrain_output, ns.pretrain_train_fraction)
        spec.check(cfg)
    except ValueError as e:
        full.error(str(e))
    return cfg, spec


@record
def main(argv: Optional[List[str]] = None) -> None:
    run_trainer(*parse_pretrain_config(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
