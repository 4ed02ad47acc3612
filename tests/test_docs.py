"""The docs stay true: docs/MODULES.md names every package module, it and docs/ARCHITECTURE.md only modules that
exist; ARCHITECTURE links every page; every link between the README and the pages resolves; the modules
ARCHITECTURE lists as torch-free are.
"""

import re
import subprocess
import sys
from pathlib import Path
from typing import List, Set

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "dlrm_multiepoch"
ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"
MODULES = REPO / "docs" / "MODULES.md"  # the module index, kept apart from the map
# Folders a path on the page may start with; any other path is under dlrm_multiepoch/.
TOP_FOLDERS = ("apps", "components", "tests", "examples", "benchmarks", "tools", "docs")
# Where a bare file name (``build.py``) may live.
SOURCE_FOLDERS = ("dlrm_multiepoch", "apps", "benchmarks", "examples", "tests", "tools")
_PY = re.compile(r"(?<![\w./*-])(\w[\w./-]*\.py)\b")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _prose(path: Path) -> List[str]:
    """The page's lines outside fenced blocks, but for ``text`` blocks (quotes a test keeps)."""
    lines, fence = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        if not fence:
            lines.append(line)
    return lines


def named_modules(page: Path = MODULES) -> Set[str]:
    """Every ``*.py`` path ``page`` names, fenced blocks (the layout) included."""
    return set(_PY.findall(page.read_text()))


def _exists(name: str) -> bool:
    if "/" not in name:
        return any(any((REPO / folder).rglob(name)) for folder in SOURCE_FOLDERS)
    root = REPO if name.split("/")[0] in TOP_FOLDERS else PACKAGE
    return (root / name).is_file()


def test_every_module_the_map_and_the_index_name_exists():
    for page in (ARCHITECTURE, MODULES):
        assert sorted(n for n in named_modules(page) if not _exists(n)) == [], page.name


def test_every_package_module_is_named_in_the_module_index():
    modules = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"]
    assert len(modules) > 100
    unnamed = sorted(set(modules) - named_modules())
    assert unnamed == [], "name each new module on docs/MODULES.md (its path under dlrm_multiepoch/)"


def test_the_architecture_page_links_every_page():
    text = ARCHITECTURE.read_text()
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md") if p != ARCHITECTURE)
    assert [p for p in pages if f"]({p})" not in text] == []


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> Set[str]:
    found: Set[str] = set()
    seen: dict = {}
    for line in _prose(page):
        m = re.match(r"^#{1,6} (.+)$", line)
        if m:
            anchor = github_anchor(m.group(1))
            n = seen.get(anchor, 0)
            seen[anchor] = n + 1
            found.add(anchor if n == 0 else f"{anchor}-{n}")
    return found


def test_github_anchor_matches_githubs_rule():
    assert github_anchor("The validation metric of `auto` (`--auto_metric`): `cal_ne`, and a whole tables pass") == (
        "the-validation-metric-of-auto---auto_metric-cal_ne-and-a-whole-tables-pass"
    )
    assert github_anchor("`reinit` is judged on the tables it deploys (2026-12-02)") == (
        "reinit-is-judged-on-the-tables-it-deploys-2026-12-02"
    )


def test_every_link_between_the_pages_resolves():
    broken = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for line in _prose(page):
            for target in _LINK.findall(line):
                if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                linked = (page.parent / path).resolve() if path else page
                if not linked.exists():
                    broken.append(f"{page.name}: {target} (no such file)")
                elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                    broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []


def torch_free_entries() -> List[str]:
    text = ARCHITECTURE.read_text()
    block = text[text.index("<!-- torch-free -->") : text.index("<!-- /torch-free -->")]
    return re.search(r"```text\n(.+?)\n```", block, re.S).group(1).split()  # type: ignore[union-attr]


# Run in a fresh interpreter: a finder that notes, for the first import of torch, TorchRec or FBGEMM, which
# package modules were being imported (the chain), then lets the import go on.
_PROBE = """
import sys, traceback
HEAVY = ("torch", "torchrec", "fbgemm_gpu")
class Spy:
    chain = None
    def find_spec(self, name, path=None, target=None):
        if name in HEAVY and Spy.chain is None:
            frames = [f.filename for f in traceback.extract_stack() if "dlrm_multiepoch" in f.filename]
            Spy.chain = [f.split("dlrm_multiepoch")[-1] for f in dict.fromkeys(frames)]
        return None
sys.meta_path.insert(0, Spy())
import importlib
for entry in sys.argv[1:]:
    importlib.import_module(entry)
    if Spy.chain is not None:
        print(f"{entry} imports torch through {' -> '.join(Spy.chain)}")
        break
else:
    print("torch-free")
"""


def test_the_torch_free_modules_load_without_torch():
    entries = torch_free_entries()
    assert {"dlrm_multiepoch.cli", "dlrm_multiepoch.components"} <= set(entries)
    result = subprocess.run([sys.executable, "-c", _PROBE, *entries], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "torch-free"


def test_the_probe_names_the_chain_that_loads_torch():
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, "dlrm_multiepoch.cli", "dlrm_multiepoch.gates"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    out = result.stdout.strip()
    assert out == "dlrm_multiepoch.gates imports torch through /gates.py", out
