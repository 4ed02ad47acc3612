"""``dlrm-multiepoch compare EXPERIMENT_DIR``: one table, one plot and TensorBoard HParams for a sweep.

Usage::

    dlrm-multiepoch compare runs/bx                 # print the table; write runs/bx/compare/*
    dlrm-multiepoch compare runs/bx --out report/   # write the files elsewhere
    dlrm-multiepoch compare runs/mine               # any folder of run folders (no sweep.json needed)
    dlrm-multiepoch compare runs/bx --metric cal_ne # pick on validation cal_ne (lower is better), and show it

Writes ``comparison.md``, ``comparison.csv``, ``test_auc.png`` (and, for an update-window
sweep, ``update_window.png`` and ``update_window.csv``) to ``EXPERIMENT_DIR/compare/``,
and HParams summaries next to the runs' event files. Each run is judged by the model it
deploys, the winner is picked on validation when the runs have a validation split (on
``--metric``: AUC, or in a search's folder the search's own metric), and
runs are averaged only with runs of the same configuration. Runs that are missing,
partial or corrupt, and folders that are not runs, are named under "Runs left out"; the
rest are compared.
"""

import argparse
import os
import sys
from typing import List, Optional

from dlrm_multiepoch.metrics import METRICS
from dlrm_multiepoch.report.compare import compare_experiment
from dlrm_multiepoch.report.hparams import write_hparams
from dlrm_multiepoch.report.plots import plot_curves, plot_windows
from dlrm_multiepoch.report.tables import to_markdown, write_csv, write_window_csv
from dlrm_multiepoch.run_files import COMPARE_DIR


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
    try:
        comparison = compare_experiment(args.experiment_dir, args.metric)
    except (FileNotFoundError, ValueError) as e:
        parser.error(str(e))
    if not comparison.runs:
        print(to_markdown(comparison))
        print(f"compare: no complete run to compare in {args.experiment_dir}", file=sys.stderr)
        return 1
    out = args.out or os.path.join(args.experiment_dir, COMPARE_DIR)
    os.makedirs(out, exist_ok=True)
    report = to_markdown(comparison)
    files = {"table (Markdown)": os.path.join(out, "comparison.md"), "table (CSV)": os.path.join(out, "comparison.csv")}
    with open(files["table (Markdown)"], "w") as f:
        f.write(report)
    write_csv(comparison, files["table (CSV)"])
    if any(task.rows for task in comparison.tasks):  # an update-window sweep alone has no strategy rows
        files["test AUC per epoch (PNG)"] = os.path.join(out, "test_auc.png")
        plot_curves(comparison, files["test AUC per epoch (PNG)"])
    if comparison.windows:
        files["update window (PNG)"] = os.path.join(out, "update_window.png")
        plot_windows(comparison, files["update window (PNG)"])
        files["update window (CSV)"] = os.path.join(out, "update_window.csv")
        write_window_csv(comparison, files["update window (CSV)"])
    if args.hparams:
        write_hparams(comparison)
    print(report)
    width = max(len(k) for k in files)
    for what, path in files.items():
        print(f"{what:<{width}}  {path}")
    print(f"{'TensorBoard logs':<{width}}  {args.experiment_dir}  (tensorboard --logdir {args.experiment_dir}; HPARAMS tab)")
    return 0
