"""The ``dlrm-multiepoch`` console command: one subcommand per job.

Subcommands live in :data:`SUBCOMMANDS` (name -> :class:`Subcommand`); each adds its
own flags and runs with the parsed namespace. A subcommand imports what it needs when
it runs, so ``dlrm-multiepoch preprocess`` starts without importing torch.

Example::

    dlrm-multiepoch preprocess --dataset criteo --data_path day_0.tsv --output prepped/day_0
"""

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from dlrm_multiepoch.flags import add_flags


@dataclass(frozen=True)
class Subcommand:
    """One ``dlrm-multiepoch <name>`` job.

    Args:
        help: one line for ``dlrm-multiepoch --help``.
        add_arguments: adds the subcommand's flags to its parser.
        run: runs it; returns the exit status.
    """

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _preprocess_arguments(parser: argparse.ArgumentParser) -> None:
    from dlrm_multiepoch.data.config import DataConfig

    add_flags(parser.add_argument_group("DataConfig"), DataConfig, dataclasses.fields(DataConfig))
    parser.add_argument(
        "--output",
        default=None,
        help="folder to write the dataset to (unset: the cache folder training finds by itself); train on it "
        "with --dataset <same> --data_path <folder>",
    )


def _preprocess(ns: argparse.Namespace) -> int:
    from dlrm_multiepoch.data.config import DataConfig
    from dlrm_multiepoch.data.load import prepare_dataset
    from dlrm_multiepoch.data.store import open_dataset

    cfg = DataConfig(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(DataConfig)})
    folder = prepare_dataset(cfg, ns.output)
    data, meta = open_dataset(folder)
    for note in meta["notes"]:
        print(note)
    print(data.summary())
    print(
        f"dataset folder: {folder}\ntrain on it: torchrun --nproc_per_node 2 apps/train.py --dataset {cfg.dataset} "
        f"--data_path {folder}"
    )
    return 0


SUBCOMMANDS: Dict[str, Subcommand] = {
    "preprocess": Subcommand(
        help="encode a dataset once into memory-mappable column files (streamed, bounded memory)",
        add_arguments=_preprocess_arguments,
        run=_preprocess,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dlrm-multiepoch", description="dlrm-multiepoch tools", allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in SUBCOMMANDS.items():
        sub = commands.add_parser(
            name, help=command.help, description=command.help, allow_abbrev=False,
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
        command.add_arguments(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        return SUBCOMMANDS[ns.command].run(ns)
    except (ValueError, FileNotFoundError) as e:
        parser.exit(2, f"dlrm-multiepoch {ns.command}: error: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
