"""What a run's data identity costs: a source file read whole once per version, then a stat per check.

Every launch, sweep and search rerun checks that the data a run trained on is what its path holds now
(``dlrm_multiepoch/data/identity.py``). Writes a file of ``--mb`` MB of random bytes, then times (medians of
``--repeats``): its sha256 read whole (``file_digest``: what every check would cost without the cache, and what
the first check of a new version costs), and :func:`~dlrm_multiepoch.file_digests.cached_file_digest` once the
digest is remembered (a stat and a small JSON read). Then rewrites one byte in place, the size kept, and checks
the digest changes. Its claim: a check's time, read whole against remembered.

Usage::

    python benchmarks/bench_data_identity.py --mb 1024 --repeats 5
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.tools.claims import claim  # noqa: E402
from dlrm_multiepoch import file_digests  # noqa: E402


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--mb", type=int, default=128, help="size of the source file")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data, cache = Path(tmp) / "day_0.tsv", str(Path(tmp) / "cache")
        with open(data, "wb") as f:
            for _ in range(args.mb):
                f.write(bytes(range(256)) * 4096)  # 1 MB
        time.sleep(2.1)  # its times settle past any filesystem's granularity: the digest may be remembered
        whole = _median_s(lambda: file_digests.file_digest(data), args.repeats)
        first = file_digests.cached_file_digest(data, cache)

        def remembered() -> None:
            file_digests._SEEN.clear()  # this process's memory too: what a new launch pays
            assert file_digests.cached_file_digest(data, cache) == first

        looked_up = _median_s(remembered, max(args.repeats, 20))
        with open(data, "r+b") as f:  # a label rewritten in place: the same size, one byte
            f.seek(args.mb * (1 << 19))
            old = f.read(1)
            f.seek(args.mb * (1 << 19))
            f.write(b"\x01" if old == b"\x00" else b"\x00")
        seen = file_digests.cached_file_digest(data, cache) != first
    print(f"source file: {args.mb} MB")
    print(f"  read whole (sha256):      {whole:8.3f} s  ({args.mb / whole:.0f} MB/s)")
    print(f"  remembered (stat + JSON): {looked_up * 1e3:8.3f} ms")
    print(f"  a byte rewritten in place, size kept: {'seen' if seen else 'MISSED'}")
    claim(f"data identity check of a {args.mb} MB file: read whole / remembered by stat", whole / looked_up)


if __name__ == "__main__":
    main()
