"""Preprocessing rows/s against ``--preprocess_workers``, on Criteo-shaped day files.

Writes ``--files`` synthetic Criteo TSVs of ``--rows_per_file`` rows each
(``benchmarks/tools/make_synthetic_criteo.py``, seeds 0, 1, ...; kept under ``--work``
for reruns), then runs ``dlrm-multiepoch preprocess --dataset criteo --data_path
day_0,...`` in a child process per worker count, ``--repeats`` rounds, the worker counts
alternating within each round (order rotated per round). Per run: wall time (rows/s =
rows / wall), the passes the command logs with their wall and CPU seconds (scan, which
the workers share; fit and write, which run once in the main process; the rest:
start-up, input digests, renaming), CPU seconds of the child and its workers, and the
peak RSS of the largest of those processes. It prints the median of each over the
rounds and the speed-up over the first worker count, checks that every run wrote the
same folder (byte for byte), and a model of an idle machine with a core per worker
(the scan's CPU seconds divided over min(workers, files), the other CPU seconds
serial): on a shared machine wall times measure the load, CPU seconds the work. From
one worker's CPU seconds per row it extrapolates to the 1 TB Criteo click logs (24 day
files, 4,373,472,329 rows).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_preprocess_workers.py --files 4 --rows_per_file 1000000 \\
        --workers 1,2 --repeats 3 --work /work/exp/data/bench
"""

import argparse
import hashlib
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.tools.claims import claim  # noqa: E402

CRITEO_1TB_ROWS = 4_373_472_329
CRITEO_1TB_FILES = 24
_PHASES = {  # the command's log lines: wall and CPU seconds of each pass
    "scan": re.compile(r"scanned [\d,]+ rows in ([\d.]+)s \(([\d.]+) CPU s\)"),
    "fit": re.compile(r"fitted id maps and dense statistics in ([\d.]+)s \(([\d.]+) CPU s\)"),
    "write": re.compile(r"wrote [\d,]+ rows in ([\d.]+)s \(([\d.]+) CPU s\)"),
}


def folder_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def run(files: List[Path], workers: int, output: Path, chunk_mb: float) -> Dict[str, float]:
    """One preprocessing run in a child process: wall, phases, CPU, peak RSS, folder digest."""
    cmd = [
        sys.executable, "-m", "dlrm_multiepoch.cli", "preprocess", "--dataset", "criteo",
        "--data_path", ",".join(map(str, files)), "--output", str(output), "--criteo_hash_size", "100000",
        "--preprocess_workers", str(workers), "--preprocess_chunk_mb", str(chunk_mb),
        "--cache_dir", str(output.parent / "cache"),
    ]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"failed ({status}): {' '.join(cmd)}\n{out}")
    result = {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024}
    for phase, pattern in _PHASES.items():
        found = pattern.search(out)
        result[phase], result[f"{phase}_cpu"] = float(found.group(1)), float(found.group(2))
    result["other"] = wall - result["scan"] - result["fit"] - result["write"]
    # CPU-bound passes on an idle machine with a core per worker: the scan's CPU shared by the
    # workers (files of equal size), everything else in one process (start-up, digests, fit, write).
    result["serial_cpu"] = result["cpu"] - result["scan_cpu"]
    result["model"] = result["scan_cpu"] / min(workers, len(files)) + result["serial_cpu"]
    result["digest"] = folder_digest(output)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Quick defaults for `make bench`; docs/BENCHMARKS.md gives the sizes of the documented figures.
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--rows_per_file", type=int, default=100_000)
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--chunk_mb", type=float, default=16.0)
    parser.add_argument("--work", default=str(REPO / ".cache" / "bench_preprocess_workers"))
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    files = []
    for k in range(args.files):
        path = work / f"day_{k}_{args.rows_per_file}.tsv"
        if not path.exists():
            tool = REPO / "benchmarks" / "tools" / "make_synthetic_criteo.py"
            subprocess.run([sys.executable, str(tool), "--rows", str(args.rows_per_file), "--out", str(path),
                            "--seed", str(k)], check=True)  # fmt: skip
        files.append(path)
    rows = args.files * args.rows_per_file
    counts = [int(w) for w in args.workers.split(",")]
    results: Dict[int, List[Dict[str, float]]] = {w: [] for w in counts}
    for r in range(args.repeats):
        order = counts[r % len(counts) :] + counts[: r % len(counts)]
        for w in order:
            output = work / f"out_w{w}"
            subprocess.run(["rm", "-rf", str(output), str(work / "cache")], check=True)
            res = run(files, w, output, args.chunk_mb)
            results[w].append(res)
            load = os.getloadavg()[0]
            print(f"round {r} workers {w}: {res['wall']:.1f}s ({rows / res['wall']:,.0f} rows/s), scan {res['scan']:.1f}s, "
                  f"fit {res['fit']:.1f}s, write {res['write']:.1f}s, load average {load:.1f}", flush=True)  # fmt: skip
    digests = {res["digest"] for runs in results.values() for res in runs}
    med = {w: {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "digest"} for w, runs in results.items()}
    base, model_base = med[counts[0]]["wall"], med[counts[0]]["model"]
    print(f"\n{args.files} files x {args.rows_per_file:,} rows = {rows:,} rows; medians of {args.repeats} rounds; "
          f"load average (1 min) at the end {os.getloadavg()[0]:.1f}")  # fmt: skip
    print("| workers | wall s | rows/s | speed-up | scan s (CPU s) | fit s (CPU s) | write s (CPU s) | other s | "
          "CPU s, all processes | peak RSS MB, largest process | idle-machine model s | model rows/s | model speed-up |")
    print("|---" * 13 + "|")
    for w, m in med.items():
        print(f"| {w} | {m['wall']:.1f} | {rows / m['wall']:,.0f} | {base / m['wall']:.2f}x | "
              f"{m['scan']:.1f} ({m['scan_cpu']:.1f}) | {m['fit']:.1f} ({m['fit_cpu']:.1f}) | "
              f"{m['write']:.1f} ({m['write_cpu']:.1f}) | {m['other']:.1f} | {m['cpu']:.1f} | {m['peak_rss_mb']:.0f} | "
              f"{m['model']:.1f} | {rows / m['model']:,.0f} | {model_base / m['model']:.2f}x |")  # fmt: skip
    print(f"every run wrote the same folder: {len(digests) == 1} ({sorted(digests)})")
    first, last = counts[0], counts[-1]
    claim(f"preprocessing, idle-machine model from CPU seconds: {first} / {last} worker(s) time",
          model_base / med[last]["model"])
    claim(f"preprocessing, wall time on this machine: {first} / {last} worker(s)", base / med[last]["wall"])
    one = med[1] if 1 in med else med[counts[0]]
    scan_per_row, serial_per_row = one["scan_cpu"] / rows, one["serial_cpu"] / rows  # CPU seconds per row
    print(f"\nextrapolation to the 1 TB Criteo logs ({CRITEO_1TB_ROWS:,} rows, {CRITEO_1TB_FILES} files) from the "
          f"CPU seconds per row of 1 worker (scan {scan_per_row * 1e6:.2f} us, the rest {serial_per_row * 1e6:.2f} us), "
          "a core per worker, disks that keep up:")  # fmt: skip
    for w in sorted({1, 2, 8, 24, *counts}):
        hours = CRITEO_1TB_ROWS * (scan_per_row / min(w, CRITEO_1TB_FILES) + serial_per_row) / 3600
        print(f"  {w:>2} workers: {hours:5.1f} h")


if __name__ == "__main__":
    main()
