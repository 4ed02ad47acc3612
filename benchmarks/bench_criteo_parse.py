"""Criteo TSV parsing: the vectorised chunk parser against the previous whole-file one.

Contender: ``dlrm_multiepoch.data.criteo.read_criteo_chunks`` (64 MB chunks; fields
decoded column by column with 64-bit word arithmetic, ``dlrm_multiepoch.data.fields``).
Baseline: the parser this project used before (kept here, as it was): the whole file
through ``pandas.read_csv(dtype=str)``, ``pandas.to_numeric`` per dense column, and a
Python ``int(value, 16)`` per distinct categorical value. Both produce the same hashed
ids and dense integers (checked). Rounds alternate between the two in one process;
medians and their ratio are printed, with the peak RSS each reached (in child
processes, so one does not inherit the other's).

Usage::

    python benchmarks/bench_criteo_parse.py --rows 300000 --rounds 3    # the documented run (default: 100,000 rows)
"""

import argparse
import csv
import io
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
HASH_SIZE = 100_000

from benchmarks.tools.claims import claim  # noqa: E402


def previous_parse(path: Path) -> np.ndarray:
    """The previous implementation's parse of a Criteo TSV (hashed ids, ``[rows, 26]``)."""
    raw = path.read_bytes()
    frame = pd.read_csv(io.BytesIO(raw), sep="\t", header=None, names=list(range(40)), dtype=str,
                        skip_blank_lines=False, quoting=csv.QUOTE_NONE, engine="c")  # fmt: skip
    for j in range(13):
        pd.to_numeric(frame[1 + j], errors="coerce").to_numpy(dtype=np.float64)
    sparse = np.zeros((len(frame), 26), dtype=np.int64)
    for j in range(26):
        codes, uniques = pd.factorize(frame[14 + j], use_na_sentinel=True)
        ids = np.zeros(len(uniques) + 1, dtype=np.int64)
        for i, value in enumerate(uniques):  # one Python call per distinct value
            ids[i] = 1 + int(value, 16) % (HASH_SIZE - 1)
        sparse[:, j] = ids[codes]
    return sparse


def new_parse(path: Path) -> np.ndarray:
    from dlrm_multiepoch.data.criteo import SPARSE_FEATURES, ScanStats, read_criteo_chunks

    chunks = list(read_criteo_chunks(path, HASH_SIZE, ScanStats(), 64 << 20))
    return np.concatenate([np.stack([c.hashed[f] for f in SPARSE_FEATURES], axis=1) for c in chunks])


def child(which: str, path: Path) -> None:
    start = time.perf_counter()
    ids = (new_parse if which == "new" else previous_parse)(path)
    seconds = time.perf_counter() - start
    np.save(path.with_suffix(f".{which}.npy"), ids[:: max(1, len(ids) // 100_000)])
    print(seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Quick defaults for `make bench`; docs/BENCHMARKS.md gives the sizes of the documented figures.
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", default=str(REPO / ".cache" / "bench_criteo_parse"))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--path", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, Path(args.path))
        return
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"criteo_{args.rows}.tsv"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if not path.exists():
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "tools" / "make_synthetic_criteo.py"),
                        "--rows", str(args.rows), "--out", str(path)], check=True, env=env)  # fmt: skip
    times = {"new": [], "previous": []}
    rss = {"new": 0.0, "previous": 0.0}
    for _ in range(args.rounds):
        for which in ("new", "previous"):
            out = subprocess.run([sys.executable, __file__, "--child", which, "--path", str(path)],
                                 check=True, env=env, capture_output=True, text=True).stdout.split()  # fmt: skip
            times[which].append(float(out[0]))
            rss[which] = max(rss[which], float(out[1]))
    same = np.array_equal(np.load(path.with_suffix(".new.npy")), np.load(path.with_suffix(".previous.npy")))
    new, old = statistics.median(times["new"]), statistics.median(times["previous"])
    print(f"{args.rows:,} rows, {path.stat().st_size / 2**20:.0f} MB, {args.rounds} rounds, medians; same ids: {same}")
    print("| parser | seconds | rows/s | peak RSS |")
    print("|---|---|---|---|")
    previous = "previous (pandas + Python int per distinct value)"
    print(f"| {previous} | {old:.1f} | {args.rows / old:,.0f} | {rss['previous']:,.0f} MB |")
    print(f"| vectorised, 64 MB chunks | {new:.1f} | {args.rows / new:,.0f} | {rss['new']:,.0f} MB |")
    print(f"speed-up: {old / new:.1f}x")
    claim("Criteo TSV parsing: previous / vectorised time", old / new)


if __name__ == "__main__":
    main()
