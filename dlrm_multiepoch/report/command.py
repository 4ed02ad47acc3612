"""``dlrm-multiepoch compare EXPERIMENT_DIR``: one table, one plot and TensorBoard HParams for a sweep.

Usage::

    dlrm-multiepoch compare runs/bx                 # print the table; write runs/bx/compare/*
    dlrm-multiepoch compare runs/bx --out report/   # write the files elsewhere
    dlrm-multiepoch compare runs/mine               # any folder of run folders (no sweep.json needed)
    dlrm-multiepoch compare runs/bx --metric cal_ne # pick on validation cal_ne (lower is better), and show it

Prints the table, then writes ``comparison.md``, ``comparison.csv``, ``test_auc.png`` (and,
for an update-window sweep, ``update_window.png`` and ``update_window.csv``) to
``EXPERIMENT_DIR/compare/`` (or ``--out``), and HParams summaries next to the runs' event
files (in ``--out``'s ``hparams/`` when the run folders are read-only: a read-only
experiment folder is compared with ``--out`` elsewhere; without it the table is printed and
one line says what was not written). Each run is judged by the model it
deploys, the winner is picked on validation when the runs have a validation split (on
``--metric``: AUC, or in a search's folder the search's own metric), and
runs are averaged only with runs of the same configuration. Runs that are missing,
partial or corrupt, and folders that are not runs, are named under "Runs left out"; the
rest are compared.
"""

import argparse
import os
import sys
from typing import Callable, Dict, List, Optional, Tuple

from dlrm_multiepoch.command_faults import check_folder, guarded, naming, shown
from dlrm_multiepoch.metrics import METRICS
from dlrm_multiepoch.report.compare import compare_experiment
from dlrm_multiepoch.report.hparams import write_hparams
from dlrm_multiepoch.report.plots import plot_curves, plot_windows
from dlrm_multiepoch.report.tables import to_markdown, write_csv, write_window_csv
from dlrm_multiepoch.run_files import COMPARE_DIR

HPARAMS_DIR = "hparams"  # under --out, when the run folders are read-only


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dlrm-multiepoch compare",
        description=__doc__.split("\n\n", 1)[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("experiment_dir", help="folder of run folders (a sweep's experiment folder)")
    parser.add_argument("--out", default="", help="folder for the report files (default: EXPERIMENT_DIR/compare)")
    parser.add_argument(
        "--metric",
        choices=list(METRICS),
        help="validation metric that picks each task's winner and best epoch, shown beside AUC "
        f"({'; '.join(f'{m.name}: {m.help}' for m in METRICS.values())}); default: auc, or a search's own metric",
    )
    parser.add_argument("--no-hparams", dest="hparams", action="store_false", help="do not write HParams summaries")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return guarded("compare", lambda: _compare(parser, args), "then rerun the same command")


def _compare(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Print the table, then write the report files (``--out``) and the HParams; exit 1 when some cannot be."""
    exp = args.experiment_dir
    try:
        if args.out:
            check_folder(args.out, "--out")
        comparison = compare_experiment(exp, args.metric)
    except (FileNotFoundError, ValueError) as e:
        parser.error(str(e))
    report = to_markdown(comparison)
    print(report)  # first: whatever cannot be written after, the table is on the console
    if not comparison.runs:
        print(f"compare: no complete run to compare in {shown(exp)}", file=sys.stderr)
        return 1
    out = args.out or os.path.join(exp, COMPARE_DIR)
    try:
        check_folder(out, "the report folder")
    except ValueError as e:
        print(f"compare: {e}; the table is above (pass --out FOLDER to write its files elsewhere)", file=sys.stderr)
        return 1
    os.makedirs(out, exist_ok=True)
    writers: Dict[str, Tuple[str, Callable[[str], None]]] = {
        "table (Markdown)": ("comparison.md", lambda path: _write_text(path, report)),
        "table (CSV)": ("comparison.csv", lambda path: write_csv(comparison, path)),
    }
    if any(task.rows for task in comparison.tasks):  # an update-window sweep alone has no strategy rows
        writers["test AUC per epoch (PNG)"] = ("test_auc.png", lambda path: plot_curves(comparison, path))
    if comparison.windows:
        writers["update window (PNG)"] = ("update_window.png", lambda path: plot_windows(comparison, path))
        writers["update window (CSV)"] = ("update_window.csv", lambda path: write_window_csv(comparison, path))
    files = {}
    for what, (name, write) in writers.items():
        files[what] = os.path.join(out, name)
        with naming(files[what]):  # a full disk fails a write() without a path: this one
            write(files[what])
    logs, note = exp, f"tensorboard --logdir {exp}; HPARAMS tab"
    read_only = [p for p in [exp, *(r.path for r in comparison.runs)] if not os.access(p, os.W_OK | os.X_OK)]
    if args.hparams and read_only:  # the sessions go beside the runs, or, where those are read-only, to --out
        if not args.out:
            print(f"compare: {shown(read_only[0])} is read-only: no HParams written (pass --out FOLDER: they go to "
                  "FOLDER/hparams)", file=sys.stderr)  # fmt: skip
            return 1
        logs = os.path.join(out, HPARAMS_DIR)
        note = f"tensorboard --logdir {logs}; HPARAMS tab: {shown(read_only[0])} is read-only"
        write_hparams(comparison, logs)
    elif args.hparams:
        write_hparams(comparison)
    width = max(len(k) for k in files)
    for what, path in files.items():
        print(f"{what:<{width}}  {shown(path)}")
    print(f"{'TensorBoard logs':<{width}}  {shown(logs)}  ({shown(note)})")
    return 0


def _write_text(path: str, text: str) -> None:
    with open(path, "w", errors="backslashreplace") as f:  # paths in it may hold bytes that are not UTF-8
        f.write(text)
