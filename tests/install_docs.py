"""docs/INSTALL.md's install blocks ("into your existing TorchRec environment"), one per stack.

Each block follows a ``<!-- install: RELEASE DEVICE -->`` line. ``make test-wheel`` runs the CPU
blocks as written, with the wheel's path in place of the package name (no index holds it);
``tests/test_install.py`` checks every block against ``make stack``. Run as a module it prints
one block, ready for ``bash``::

    python -m tests.install_docs 1.8 cpu dist/dlrm_multiepoch-0.1.0-py3-none-any.whl
"""

import re
import sys
from pathlib import Path
from typing import Dict, List, Tuple

INSTALL_MD = Path(__file__).resolve().parents[1] / "docs" / "INSTALL.md"
PACKAGE = "dlrm-multiepoch["  # how the lines name the package (with its extras)
_BLOCK = re.compile(r"<!-- install: (\S+) (\S+) -->\n```bash\n(.*?)```", re.S)


def install_blocks(text: str) -> Dict[Tuple[str, str], List[str]]:
    """``(release, device) -> [command lines]`` of every install block in ``text``."""
    return {(m[1], m[2]): m[3].strip().splitlines() for m in _BLOCK.finditer(text)}


def with_wheel(lines: List[str], wheel: str) -> List[str]:
    """The lines with the wheel's path in place of the package name: the one change a test makes."""
    out = [line.replace(PACKAGE, f"{wheel}[") for line in lines]
    assert sum(PACKAGE in line for line in lines) == 1, f"expected one line installing {PACKAGE}...]: {lines}"
    return out


if __name__ == "__main__":
    release, device, wheel = sys.argv[1:]
    print("\n".join(with_wheel(install_blocks(INSTALL_MD.read_text())[(release, device)], wheel)))
