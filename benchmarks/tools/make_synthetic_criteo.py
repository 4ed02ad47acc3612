"""Write a synthetic Criteo-format TSV: label, 13 integer and 26 hex categorical fields.

Shaped like the Criteo click logs: a 25% positive label; integer features drawn from
a log-normal (some -1, 20% empty); categorical ids drawn from a Zipf law (exponent 1) over
per-feature vocabularies of 10 to 10 million ids, written as 8 hex digits of a
scrambled 32-bit value (10% empty). Lines are assembled with numpy byte arrays (no
Python loop per value): about 130,000 rows per CPU-second; 10M rows took 375 s of wall
time on the shared 2-core machine of docs/BENCHMARKS.md.

Usage::

    python benchmarks/tools/make_synthetic_criteo.py --rows 50000000 --out /work/tmp13/criteo_50m.tsv
"""

import argparse
import time

import numpy as np

VOCAB = [10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000] * 4  # 28 sizes, first 26 used
# Byte -> its two hex characters, as one little-endian uint16 (viewed as bytes: in order).
_HEX_PAIRS = np.array([ord(f"{b:02x}"[0]) | ord(f"{b:02x}"[1]) << 8 for b in range(256)], dtype="<u2")
_DIGITS = np.frombuffer(b"0123456789", dtype=np.uint8)
DENSE_WIDTH = 8  # "-1" .. "9999999"


def _dense_field(rng: np.random.Generator, rows: int) -> tuple:
    """Bytes ``[rows, DENSE_WIDTH]`` (right-aligned digits) and the used-byte mask."""
    value = np.minimum(np.floor(rng.lognormal(1.0, 2.0, rows)), 9_999_999).astype(np.int64)
    value[rng.random(rows) < 0.03] = -1
    empty = rng.random(rows) < 0.2
    digits = np.zeros((rows, DENSE_WIDTH), dtype=np.uint8)
    magnitude = np.abs(value)
    length = np.maximum(1, np.floor(np.log10(np.maximum(magnitude, 1))).astype(np.int64) + 1) + (value < 0)
    for k in range(DENSE_WIDTH):  # k-th digit from the right
        digits[:, DENSE_WIDTH - 1 - k] = _DIGITS[(magnitude // 10**k) % 10]
    digits[value < 0, DENSE_WIDTH - length[value < 0]] = ord("-")
    used = np.arange(DENSE_WIDTH)[None, :] >= (DENSE_WIDTH - length)[:, None]
    used[empty] = False
    return digits, used


def _cat_field(rng: np.random.Generator, rows: int, vocab: int, salt: int) -> tuple:
    """Bytes ``[rows, 8]`` of hex ids and the used-byte mask.

    Ids follow Zipf's law with exponent 1 over ``[0, vocab)``: ``floor((vocab + 1) ** u) - 1``
    for uniform ``u`` (inverse-CDF sampling; numpy's ``zipf`` rejection sampler is slow
    near exponent 1 and unbounded)."""
    ids = np.floor(np.exp(rng.random(rows) * np.log(vocab + 1.0))).astype(np.uint64) - np.uint64(1)
    scrambled = ((ids + np.uint64(salt)) * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    big_endian = scrambled.astype(">u4").view(np.uint8).reshape(rows, 4)
    digits = _HEX_PAIRS[big_endian].view(np.uint8).reshape(rows, 8)
    used = np.ones((rows, 8), dtype=bool)
    used[rng.random(rows) < 0.1] = False
    return digits, used


def block(rng: np.random.Generator, rows: int) -> bytes:
    """``rows`` lines of the TSV."""
    parts, masks = [], []

    def field(chars: np.ndarray, used: np.ndarray, end: int) -> None:
        parts.extend([chars, np.full((rows, 1), end, dtype=np.uint8)])
        masks.extend([used, np.ones((rows, 1), dtype=bool)])

    label = np.where(rng.random(rows) < 0.25, ord("1"), ord("0")).astype(np.uint8)[:, None]
    field(label, np.ones((rows, 1), bool), ord("\t"))
    for _ in range(13):
        field(*_dense_field(rng, rows), ord("\t"))
    for j in range(26):
        field(*_cat_field(rng, rows, VOCAB[j], salt=j * 7919), ord("\t") if j < 25 else ord("\n"))
    chars, used = np.concatenate(parts, axis=1), np.concatenate(masks, axis=1)
    return chars[used].tobytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--block_rows", type=int, default=200_000)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    start, written = time.perf_counter(), 0
    with open(args.out, "wb") as f:
        for lo in range(0, args.rows, args.block_rows):
            data = block(rng, min(args.block_rows, args.rows - lo))
            f.write(data)
            written += len(data)
    elapsed = time.perf_counter() - start
    print(f"wrote {args.rows:,} rows ({written / 2**30:.2f} GiB) to {args.out} in {elapsed:.0f}s")


if __name__ == "__main__":
    main()
