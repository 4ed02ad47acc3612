"""Pre-train the embedding tables, then fine-tune from them: ``python apps/pretrain.py --help``.

Takes the training app's data, model, batch, optimizer, sharding, seed, logging and
progress-bar flags (the tables must fit the fine-tuning model; any other training flag is
refused by name, since pre-training would ignore it) plus the ``--pretrain_*`` flags
below, and saves the tables with ``torch.distributed.checkpoint`` to
``--pretrain_output``. Then::

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
from dlrm_multiepoch.train.build import load_data
from dlrm_multiepoch.train.checkpoint.compat import flat_config
from dlrm_multiepoch.train.config import TrainConfig, build_parser, parse_config
from dlrm_multiepoch.train.pretrain import PretrainConfig, TablePretrainer

# The training-app settings pre-training reads (TrainConfig.to_dict() paths; a trailing "." covers a section).
APPLIES = (
    "data.", "model.", "batch_size", "seed", "sharding_types", "log_every_n_steps", "limit_train_batches",
    "progress_bar", "optim.embedding_optimizer", "optim.embedding_learning_rate", "optim.learning_rate",
)  # fmt: skip


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


def ignored_flags(argv: Sequence[str]) -> List[str]:
    """The training-app flags given in ``argv`` that pre-training does not read.

    Example::

        ignored_flags(["--epochs", "3", "--history_length", "10"])   # ["--epochs"]
    """
    parser = build_parser()
    for action in parser._actions:  # only what argv gives lands in the namespace
        action.default = argparse.SUPPRESS
    given = vars(parser.parse_known_args(list(argv))[0])
    paths = {key.split(".")[-1]: key for key in flat_config(TrainConfig().to_dict())}
    applies = lambda path: any(path == a or (a.endswith(".") and path.startswith(a)) for a in APPLIES)  # noqa: E731
    return sorted(f"--{dest}" for dest in given if dest in paths and not applies(paths[dest]))


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
    ignored = ignored_flags(rest)
    if ignored:
        full.error(
            f"{', '.join(ignored)}: not used by pre-training (it reads the data, model, batch, optimizer, sharding, "
            "seed, logging and progress-bar flags and its own --pretrain_* flags); drop them"
        )
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
        progress_bar=cfg.metrics.progress_bar,
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
        log(f"model config for the tables: {cfg.to_dict()['model']}")
        TablePretrainer(data, cfg.model, pretrain, env, log, data_options=cfg.data.cache_options()).train()
        dist.barrier()  # no rank tears the group down while a peer's collective is in flight
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
