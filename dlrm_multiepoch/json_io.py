"""Strict JSON files: atomic writes, ``null`` for non-finite numbers, reads that name the file.

Python's ``json`` writes ``NaN``/``Infinity`` tokens by default, which strict readers
(``jq``, JavaScript, Go) reject. Every JSON file the app writes goes through
:func:`write_json`, which stores them as ``null``.
"""

import contextlib
import json
import math
import os
from typing import Any, Mapping

from dlrm_multiepoch.command_faults import naming


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``None`` and numpy scalars made plain.

    Example::

        json_safe({"auc": float("nan"), "rows": np.int64(3)})  # {"auc": None, "rows": 3}
    """
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "shape", None) == ():
        value = value.item()  # numpy / torch scalar
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: str, value: Any) -> None:
    """Write ``json_safe(value)`` to ``path`` atomically (temp file, fsync, rename).

    A write that fails (a full disk, a read-only folder) leaves ``path`` as it was and no
    temp file behind, and its ``OSError`` names ``path``.
    """
    tmp = f"{path}.tmp"
    text = json.dumps(json_safe(value), indent=2, allow_nan=False)
    with naming(path):
        try:
            with open(tmp, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise


def read_json(path: str) -> Any:
    """The JSON value in ``path``; ``ValueError`` naming the file if it is not valid JSON."""
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({len(text)} bytes, {e}); it was truncated or damaged") from None
