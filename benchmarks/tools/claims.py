"""The line a speed benchmark ends with: the ratio it claims, which ``make bench`` gathers into its summary.

A benchmark prints its full table as before, then one :func:`claim` per headline figure
(contender against baseline, medians). :func:`read_claims` finds them again in its output.

Example::

    claim("frozen tables: step speed-up (bare / frozen)", 2.31)
    # claim: frozen tables: step speed-up (bare / frozen) = 2.31x
"""

from typing import Iterable, List, Tuple

PREFIX = "claim: "


def claim(what: str, ratio: float) -> None:
    """Print ``ratio`` (contender against baseline, as ``what`` says) as a claim line."""
    print(f"{PREFIX}{what} = {ratio:.3g}x", flush=True)


def read_claims(lines: Iterable[str]) -> List[Tuple[str, str]]:
    """``(what, ratio text)`` of every claim line in ``lines``, in order."""
    found = []
    for line in lines:
        if line.startswith(PREFIX):
            what, _, ratio = line[len(PREFIX) :].rstrip("\n").rpartition(" = ")
            found.append((what, ratio))
    return found
