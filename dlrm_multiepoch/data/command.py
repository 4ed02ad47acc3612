"""``dlrm-multiepoch preprocess``: encode a dataset once into a dataset folder.

Takes the training app's data flags (``DataConfig``) plus ``--output``; without it the
folder is the cache folder training finds by itself. Imports no torch.

Example::

    dlrm-multiepoch preprocess --dataset criteo --data_path day_0.tsv --output prepped/day_0
    dlrm-multiepoch preprocess --dataset criteo --data_path day_0,day_1,day_2 --preprocess_workers 3 \\
        --output prepped/days_0-2
"""

import argparse
from typing import List

from dlrm_multiepoch.command_faults import guarded
from dlrm_multiepoch.config_section import add_arguments, from_args, options_of
from dlrm_multiepoch.data.config import DataConfig


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dlrm-multiepoch preprocess",
        description="Encode a dataset once into memory-mappable column files (streamed, bounded memory).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False,
    )
    add_arguments(parser.add_argument_group("DataConfig"), options_of(DataConfig))
    parser.add_argument(
        "--output",
        default=None,
        help="folder to write (unset: the cache folder training finds by itself); train on it with "
        "--dataset <the same> --data_path <folder>",
    )
    return parser


def main(argv: List[str]) -> int:
    # A full disk or a read-only --output: one line (the folder appears only complete, so a rerun starts clean).
    return guarded("dlrm-multiepoch preprocess", lambda: _preprocess(argv), "then rerun the same command")


def _preprocess(argv: List[str]) -> int:
    from dlrm_multiepoch.data.load import prepare_dataset
    from dlrm_multiepoch.data.workers import WorkerDied
    from dlrm_multiepoch.data.store import open_dataset

    parser = build_parser()
    ns = parser.parse_args(argv)
    cfg = from_args(DataConfig, ns)
    try:
        folder = prepare_dataset(cfg, ns.output)
        data, meta = open_dataset(folder)
    except (ValueError, FileNotFoundError, WorkerDied) as e:
        parser.exit(2, f"dlrm-multiepoch preprocess: error: {e}\n")
    except KeyboardInterrupt:  # the workers stop too; the output folder appears only complete
        parser.exit(130, "dlrm-multiepoch preprocess: interrupted; nothing written\n")
    for note in meta["notes"]:
        print(note)
    print(data.summary())
    print(
        f"dataset folder: {folder}\ntrain on it: torchrun --nproc_per_node 2 -m dlrm_multiepoch.train --dataset {cfg.dataset} "
        f"--data_path {folder}"
    )
    return 0
