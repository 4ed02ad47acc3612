"""Listings generated from the code and pinned under ``tests/fixtures/`` (the public API, every option): a change
to one is a reviewed line of its diff. Each test module builds its listing; this writes and compares it."""

import difflib
from pathlib import Path
from typing import List, Sequence


def listing_text(header: Sequence[str], lines: Sequence[str]) -> str:
    """The fixture's text: its ``#`` header, then the listing."""
    return "\n".join([*header, *lines]) + "\n"


def pinned_lines(fixture: Path) -> List[str]:
    """The pinned listing, its ``#`` header left out."""
    return [line for line in fixture.read_text().splitlines() if not line.startswith("#")]


def listing_diff(fixture: Path, pinned: Sequence[str], now: Sequence[str]) -> str:
    """A unified diff from the pinned listing to the code's, for an assertion's message."""
    return "\n".join(difflib.unified_diff(list(pinned), list(now), f"pinned ({fixture.relative_to(fixture.parents[2])})", "now", lineterm=""))
