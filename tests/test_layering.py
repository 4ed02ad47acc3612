"""The package's layering: which of its packages may import which, checked on the import graph of its source.

The graph holds every import of a package module (at the top, inside functions, under
``TYPE_CHECKING``) and every string naming one (the lazy exports, the CLI's subcommands):
a deferred import that only hides a circle is still a circle. docs/ARCHITECTURE.md
("Which package may import which") quotes ``FLOORS``; a test keeps the quote true.
"""

import ast
import re
from pathlib import Path
from typing import Dict, List, NamedTuple, Sequence, Set, Tuple

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "dlrm_multiepoch"

# The package's units (a subpackage, or a module at the top), bottom floor first. A unit imports
# units on its own floor or below, never above; no import circle anywhere, on any floor.
# The top level's __init__.py (the public exports, loaded lazily) may name any unit.
FLOORS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    # The loop's interface (TrainPart) and what every floor shares: names, config sections, JSON and run files.
    ("ground", (
        "part", "step_output", "json_io", "json_state", "config_section", "names", "metrics", "table_values", "schedule", "saved_state", "gates", "tables",
        "distributed", "file_digests", "run_files", "launch_options", "command_options", "command_faults", "lock_holder", "lazy", "import_path",
    )),
    # What a training step is made of and what goes around it: each a TrainPart or its config.
    ("parts", ("data", "lookup", "freeze", "optim", "pipeline")),
    ("models and the automatic schedule", ("models", "auto")),
    ("training app", ("train", "pretrain")),
    ("TorchX components", ("component_params", "components")),
    ("commands", ("sweep", "search", "report", "cli")),
    # What tests and benchmarks of any floor use (as torch.testing): ranks, a small sharded job. Nothing imports it.
    ("test helpers", ("testing",)),
)  # fmt: skip


class Import(NamedTuple):
    source: str  # the importing module
    target: str  # the imported module (or package)
    line: int
    how: str  # "top", "deferred" (inside a function or class body), "type" (TYPE_CHECKING) or "string"


def _modules(root: Path = REPO) -> Dict[str, Path]:
    modules = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _resolve(name: str, modules: Dict[str, Path]) -> str:
    """``name`` (a module, or an attribute of one) as the longest module name it starts with."""
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


# Entry points the launch settings name for TorchX to run in other processes (``-m NAME``): the
# ground floor names them without importing them, so a name equal to one of these is not an import.
LAUNCHED = {f"{PACKAGE}.train", f"{PACKAGE}.pretrain"}

def import_graph(root: Path = REPO) -> List[Import]:
    """Every import of a package module from a package module (the package under ``root``), however deferred."""
    modules = _modules(root)
    found: List[Import] = []
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]

        def visit(node: ast.AST, how: str) -> None:
            for child in ast.iter_child_nodes(node):
                child_how = how
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)) and how == "top":
                    child_how = "deferred"
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    child_how = "type"
                names: List[str] = []
                if isinstance(child, ast.Import):
                    names = [alias.name for alias in child.names]
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                        base = ".".join(anchor + ([base] if base else []))
                    names = [f"{base}.{alias.name}" for alias in child.names]  # the module itself, or one in it
                elif isinstance(child, ast.Constant) and isinstance(child.value, str):
                    if re.fullmatch(rf"{PACKAGE}(\.\w+)+", child.value) and child.value not in LAUNCHED:
                        names, child_how = [child.value], "string"
                for name in names:
                    if name == PACKAGE or name.startswith(PACKAGE + "."):
                        target = _resolve(name, modules)
                        if target != module:
                            found.append(Import(module, target, child.lineno, child_how))
                visit(child, child_how)

        visit(ast.parse(path.read_text(), str(path)), "top")
    return list(dict.fromkeys(found))  # one per statement, not per imported name


def unit(module: str) -> str:
    """The unit a module belongs to: ``dlrm_multiepoch.train.checkpoint.save`` -> ``train``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def floor_of() -> Dict[str, int]:
    return {u: i for i, (_, units) in enumerate(FLOORS) for u in units}


def cycles(edges: Sequence[Tuple[str, str]]) -> List[List[str]]:
    """The import circles: each strongly connected set of two or more modules (Tarjan), sorted."""
    graph: Dict[str, Set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def connect(v: str) -> None:  # recursion depth is bounded by the package's ~150 modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(found)


@pytest.fixture(scope="module")
def graph() -> List[Import]:
    return import_graph()


def test_every_unit_has_one_floor():
    units = {unit(m) for m in _modules()} - {""}
    placed = [u for _, floor in FLOORS for u in floor]
    assert len(placed) == len(set(placed)), "a unit is on two floors"
    assert sorted(units - set(placed)) == [], "new units: put each on a floor in FLOORS"
    assert sorted(set(placed) - units) == [], "FLOORS names a unit the package no longer has"


def test_no_import_goes_up_a_floor(graph):
    floor = floor_of()
    upward = [
        f"{i.source}:{i.line} ({FLOORS[floor[unit(i.source)]][0]}) imports {i.target} "
        f"({FLOORS[floor[unit(i.target)]][0]}), {i.how}"
        for i in graph
        if unit(i.source) and unit(i.target) and floor[unit(i.target)] > floor[unit(i.source)]
    ]
    assert upward == []


def test_no_import_circle(graph):
    assert cycles([(i.source, i.target) for i in graph]) == []


def test_the_top_level_loads_only_the_lazy_exporter(graph):
    """``import dlrm_multiepoch`` loads nothing else; its exports name modules that load on first use."""
    eager = {i.target for i in graph if i.source == PACKAGE and i.how != "string"}
    assert eager == {f"{PACKAGE}.lazy"}


def test_the_graph_sees_every_kind_of_import(tmp_path):
    """The checks above can fail: on a small package, the graph holds top-level, relative, deferred,
    type-only and by-name imports, and finds the circle they close."""
    package = tmp_path / PACKAGE
    (package / "low").mkdir(parents=True)
    files = {
        "__init__.py": '_EXPORTS = {"Thing": "dlrm_multiepoch.low.thing"}\n',
        "low/__init__.py": "",
        "low/thing.py": "from . import other\nclass Thing:\n    pass\n",
        "low/other.py": "def later():\n    import dlrm_multiepoch.high\n",
        "high.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dlrm_multiepoch.low.thing import Thing\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    found = {(i.source, i.target, i.how) for i in import_graph(tmp_path)}
    assert found == {
        ("dlrm_multiepoch", "dlrm_multiepoch.low.thing", "string"),
        ("dlrm_multiepoch.low.thing", "dlrm_multiepoch.low.other", "top"),
        ("dlrm_multiepoch.low.other", "dlrm_multiepoch.high", "deferred"),
        ("dlrm_multiepoch.high", "dlrm_multiepoch.low.thing", "type"),
    }
    circle = ["dlrm_multiepoch.high", "dlrm_multiepoch.low.other", "dlrm_multiepoch.low.thing"]
    assert cycles([(i.source, i.target) for i in import_graph(tmp_path)]) == [circle]
    assert floor_of()["part"] < floor_of()["optim"] < floor_of()["train"] < floor_of()["sweep"]


def test_architecture_quotes_the_floors():
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    block = text[text.index("<!-- floors -->") : text.index("<!-- /floors -->")]
    quoted = re.findall(r"^(\d) ([\w ]+?) +: (.+)$", block, re.M)
    expected = [(str(n), name, " ".join(units)) for n, (name, units) in reversed(list(enumerate(FLOORS)))]
    assert quoted == expected
