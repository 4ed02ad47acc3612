"""Pre-train the embedding tables, then fine-tune from them: ``python apps/pretrain.py --help``.

Takes the training app's flags (same dataset, ``--embedding_dim``, ``--history_length``,
``--batch_size``, optimizer and sharding flags: the tables must fit the fine-tuning
model) plus the ``--pretrain_*`` flags below, and saves the tables with
``torch.distributed.checkpoint`` to ``--pretrain_output``. Then::

    python apps/train.py --model multipath --history_length 10 --pretrained_tables <output>

Launch like the training app (torchrun / TorchX), e.g. on 2 CPU ranks::

    torchrun --nproc_per_node 2 apps/pretrain.py --dataset bookcrossing --history_length 10 \\
        --pretrain_output checkpoints/pretrained-bookcrossing
"""

import argparse
import dataclasses
import logging
import sys
from typing import List, Optional, Sequence, Tuple

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from dlrm_multiepoch.distributed import init_distributed
from dlrm_multiepoch.train.config import TrainConfig, build_parser, parse_config
from dlrm_multiepoch.train.pretrain import PretrainConfig, TablePretrainer
from dlrm_multiepoch.train.build import load_data


def _pretrain_flags(parser: argparse.ArgumentParser) -> None:
    """``--pretrain_<field>`` for each :class:`PretrainConfig` field that has a help text."""
    group = parser.add_argument_group("pre-training")
    for f in _own_fields():
        required = f.default is dataclasses.MISSING
        group.add_argument(
            f"--pretrain_{f.name}", type=f.type, required=required, default=None if required else f.default,
            help=f.metadata["help"],
        )  # fmt: skip


def _own_fields() -> List[dataclasses.Field]:
    return [f for f in dataclasses.fields(PretrainConfig) if "help" in f.metadata]


def parse_pretrain_config(argv: Optional[Sequence[str]] = None) -> Tuple[TrainConfig, PretrainConfig]:
    """The training app's config plus the pre-training loop's; errors name the flag."""
    argv = list(sys.argv[1:] if argv is None else argv)
    full = build_parser()
    full.description = __doc__.splitlines()[0]
    _pretrain_flags(full)
    full.parse_args(argv)  # --help, unknown flags and types, over both flag sets
    own = argparse.ArgumentParser(add_help=False)
    _pretrain_flags(own)
    ns, rest = own.parse_known_args(argv)
    cfg = parse_config(rest)
    pretrain = PretrainConfig(
        **{f.name: getattr(ns, f"pretrain_{f.name}") for f in _own_fields()},
        batch_size=cfg.loader.batch_size,
        embedding_optimizer=cfg.optim.embedding_optimizer,
        embedding_learning_rate=cfg.optim.embedding_learning_rate,
        learning_rate=cfg.optim.learning_rate,
        sharding_types=cfg.pipeline.sharding_type_list,
        seed=cfg.seed,
        log_every_n_steps=cfg.metrics.log_every_n_steps,
        limit_batches=cfg.loader.limit_train_batches,
    )
    try:
        pretrain.validate()
    except ValueError as e:
        full.error(str(e))
    return cfg, pretrain


@record
def main(argv: Optional[List[str]] = None) -> None:
    cfg, pretrain = parse_pretrain_config(argv)
    env = init_distributed()
    logging.basicConfig(format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("dlrm_multiepoch").setLevel(logging.INFO if env.is_main else logging.WARNING)
    log = print if env.is_main else (lambda _: None)
    try:
        data = load_data(cfg, env)
        log(f"model config for the tables: {dataclasses.asdict(cfg.model)}")
        TablePretrainer(data, cfg.model, pretrain, env, log, data_options=cfg.data.cache_options()).train()
        dist.barrier()  # no rank tears the group down while a peer's collective is in flight
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
