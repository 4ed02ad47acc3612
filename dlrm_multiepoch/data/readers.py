"""Read delimited text into pandas, counting malformed lines instead of hiding them."""

import io
import re
import warnings
from pathlib import Path
from typing import Any, Iterable, List, Optional, Tuple, Union

import pandas as pd

_SKIPPED = re.compile(r"Skipping line (\d+)")


def read_delimited(source: Union[bytes, str, Path], what: str, **kwargs: Any) -> Tuple[pd.DataFrame, List[int]]:
    """``pandas.read_csv`` that skips lines with too many fields and returns their
    1-based line numbers, so the caller can report them.

    Args:
        source: file bytes or a path.
        what: name of the file in error messages (e.g. ``"BX-Books.csv in <wheel>"``).
        **kwargs: passed to ``pandas.read_csv`` (``sep``, ``encoding``, ``dtype``, ...).

    Example::

        books, bad = read_delimited(raw, "BX-Books.csv", sep=";", encoding="latin-1", dtype=str)
    """
    handle = io.BytesIO(source) if isinstance(source, bytes) else source
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pd.errors.ParserWarning)
        try:
            frame = pd.read_csv(handle, on_bad_lines="warn", engine="c", **kwargs)
        except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"cannot parse {what}: {e}") from e
    bad = [int(m) for w in caught for m in _SKIPPED.findall(str(w.message))]
    return frame, bad


def require_columns(available: Iterable[str], columns: Iterable[str], what: str, flag: str = "") -> None:
    """Raise naming the file, the missing columns, the columns it has and the flag to set.

    Args:
        available: the file's column names (e.g. ``frame.columns``).
        columns: the columns needed.
        what: the file, for the message.
        flag: the flag that names these columns.
    """
    available = list(available)
    missing = [c for c in columns if c not in available]
    if missing:
        hint = f" (set {flag})" if flag else ""
        raise ValueError(f"{what} lacks column(s) {missing}{hint}; it has {available}")


def describe_lines(lines: List[int], limit: int = 10, total: Optional[int] = None) -> str:
    """The first ``limit`` line numbers, then how many more (of ``total``, default ``len(lines)``)."""
    total = len(lines) if total is None else total
    shown = ", ".join(map(str, lines[:limit]))
    return shown + (f", ... ({total - limit} more)" if total > limit else "")
