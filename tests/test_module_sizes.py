"""No module of the package over 400 lines (the brief's rule: small modules, one job each).

A module that grows past the limit is split where its jobs part, not granted an exception:
there is no allow-list.
"""

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dlrm_multiepoch"
MAX_LINES = 400


def module_sizes() -> dict:
    """Every module of the package (``__init__.py`` included), by path from the repository root: its line count."""
    return {
        str(path.relative_to(PACKAGE.parent)): len(path.read_text().splitlines()) for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_no_module_is_over_400_lines():
    sizes = module_sizes()
    assert len(sizes) > 100  # the package was found
    over = {path: lines for path, lines in sizes.items() if lines > MAX_LINES}
    assert not over, "split by job (a module does one thing): " + ", ".join(
        f"{path} has {lines} lines, over {MAX_LINES}" for path, lines in sorted(over.items(), key=lambda kv: -kv[1])
    )
