"""The README's quick tour as commands, and the console lines a user must not meet in their output.

``make test`` runs the tour at tiny sizes from a folder outside the checkout (``tests/test_quick_tour.py``);
``make test-wheel`` runs it from the installed wheel (``tests/wheel/test_tour.py``). Both refuse a Python
warning line (``FutureWarning: ...``) in any command's console: library notes that say nothing to the user
are silenced where the package triggers them.
"""

import re
import shlex
from typing import List

from tests.doc_blocks import README

# A Python warning as the warnings module prints it ("path:line: FutureWarning: message"), whoever raised it.
WARNING_LINE = re.compile(r"\b[A-Z]\w*Warning\b")


def warning_lines(output: str) -> List[str]:
    """The lines of a command's console that carry a Python warning."""
    return [line for line in output.splitlines() if WARNING_LINE.search(line)]


def quick_tour() -> List[List[str]]:
    """The README's "Quick tour" block as commands (tokens): continued lines joined, comments dropped."""
    match = re.search(r"\n## Quick tour\n\n```bash\n(.*?)```", README.read_text(), re.S)
    assert match, "README.md has no bash block under '## Quick tour'"
    commands = [shlex.split(line, comments=True) for line in match.group(1).replace("\\\n", " ").splitlines()]
    return [tokens for tokens in commands if tokens]
