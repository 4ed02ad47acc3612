"""The hypothesis settings of the generated bad-input suites: seeded, no deadline, sized by an env variable.

``DLRM_BAD_INPUT_EXAMPLES=1000 pytest tests/test_bad_input.py`` runs the long version (docs/RELIABILITY.md).
"""

import os

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("DLRM_BAD_INPUT_EXAMPLES", "40"))
CASES = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
