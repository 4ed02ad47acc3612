"""The ``dlrm-multiepoch`` console command: one subcommand per job, from the table below.

Usage::

    dlrm-multiepoch sweep runs/bx joint-1ep joint early delayed --seeds 0,1,2 -- --dataset bookcrossing
    dlrm-multiepoch compare runs/bx
    dlrm-multiepoch preprocess --dataset criteo --data_path day_0.tsv --output prepped/day_0
    dlrm-multiepoch SUBCOMMAND --help

A subcommand is a module with ``main(argv) -> int``, imported only when it runs (so
``compare`` starts without loading torch). Add one by adding a row to ``SUBCOMMANDS``.
"""

import importlib
import sys
from typing import Dict, List, NamedTuple, Optional


class Subcommand(NamedTuple):
    module: str  # holds ``main(argv: List[str]) -> int``
    help: str


SUBCOMMANDS: Dict[str, Subcommand] = {
    "sweep": Subcommand(
        "dlrm_multiepoch.sweep.command",
        "train strategies x seeds on one dataset, each run in its own folder (TorchX launches; restart-safe)",
    ),
    "search": Subcommand(
        "dlrm_multiepoch.search.command",
        "decide on validation which schedule to deploy: candidates share prefixes, losers are cut early",
    ),
    "compare": Subcommand(
        "dlrm_multiepoch.report.command",
        "compare an experiment's runs: table (Markdown, CSV), plots, TensorBoard HParams",
    ),
    "preprocess": Subcommand(
        "dlrm_multiepoch.data.command",
        "encode a dataset once into memory-mappable column files (streamed, bounded memory)",
    ),
}


def usage() -> str:
    width = max(len(name) for name in SUBCOMMANDS)
    rows = "\n".join(f"  {name:<{width}}  {sub.help}" for name, sub in SUBCOMMANDS.items())
    return f"usage: dlrm-multiepoch SUBCOMMAND [ARGS...]\n\nsubcommands:\n{rows}\n\n'dlrm-multiepoch SUBCOMMAND --help' for each one's options."


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"dlrm-multiepoch: unknown subcommand {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    return importlib.import_module(SUBCOMMANDS[name].module).main(rest)


if __name__ == "__main__":
    sys.exit(main())
