"""The hypothesis settings of the generated bad-input suites: seeded, no deadline, sized by an env variable.

``DLRM_BAD_INPUT_EXAMPLES=1000 pytest tests/test_bad_input.py`` runs the long version (docs/RELIABILITY.md).
``folder_bytes`` snapshots a folder, to assert that a refused command changed nothing in it.
"""

import os
from pathlib import Path
from typing import Dict, Iterable

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("DLRM_BAD_INPUT_EXAMPLES", "40"))
CASES = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def folder_bytes(root: Path, skip: Iterable[str] = ()) -> Dict[str, bytes]:
    """Path -> bytes of every file under ``root``, but those whose name contains a string of ``skip``."""
    skip = tuple(skip)
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not any(s in p.name for s in skip)}
