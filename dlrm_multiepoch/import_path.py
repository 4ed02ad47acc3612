"""Objects named by import path, ``MODULE:NAME`` (``--model my_models:build``): looked for without importing
anything, then imported where they are used.

The training app's ranks start as ``python -m ...`` in the launch's working directory (torchrun
``-m``, TorchX's ``dist.ddp`` with ``m=``), so they import from the working directory, then
``PYTHONPATH``, then the environment's packages. :func:`find_import_path` looks in the same
places without running any of it (no torch), so a launcher (``dlrm-multiepoch sweep``, ``search``)
refuses a path no rank would import before its first launch; :func:`import_object` imports it.

Example::

    is_import_path("my_models:build")                  # True; "dlrm" is a name, not a path
    find_import_path("--model", "my_models:build")     # ValueError naming --model: no my_models.py, or no `build` in it
    build = import_object("--model", "my_models:build")
"""

import ast
import contextlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from typing import Iterator, List, Set, Tuple

_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_FIX = "run from the folder that holds it, or add that folder to PYTHONPATH"


def is_import_path(text: str) -> bool:
    """Whether ``text`` names an object by import path (it holds a ``:``) rather than by a registered name."""
    return ":" in text


def split_import_path(flag: str, text: str) -> Tuple[str, str]:
    """``(module, name)`` of ``MODULE:NAME`` (dotted both); a malformed path is refused naming ``flag``."""
    module, _, name = text.partition(":")
    if not (_DOTTED.fullmatch(module) and _DOTTED.fullmatch(name)):
        raise ValueError(
            f"{flag} {text!r}: expected an import path MODULE:NAME, e.g. my_models:build (a module on the ranks' "
            "Python path and a name it defines)"
        )
    return module, name


@contextlib.contextmanager
def _ranks_path() -> Iterator[None]:
    """This process's import path as a rank's: the working directory and ``PYTHONPATH`` first."""
    extra = [os.getcwd(), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    before = list(sys.path)
    sys.path[:0] = extra
    try:
        yield
    finally:
        sys.path[:] = before


def find_import_path(flag: str, text: str) -> str:
    """The file of ``MODULE:NAME``'s module, checked to bind ``NAME`` at its top level; nothing is imported
    (a package's ``__init__`` neither).

    Raises:
        ValueError: naming ``flag``: a malformed path, a module no rank would find, a file that does not
            parse or binds no ``NAME``.
    """
    module, name = split_import_path(flag, text)
    parts = module.split(".")
    with _ranks_path():
        try:
            spec = importlib.util.find_spec(parts[0])  # a top-level name: finding it imports nothing
        except (ImportError, ValueError):  # a module in sys.modules without a spec (__main__)
            spec = None
    for depth in range(1, len(parts) + 1):
        if spec is None:
            parent = ".".join(parts[: depth - 1])
            where = f"package {parent}" if parent else "the working directory, PYTHONPATH or the environment"
            raise ValueError(f"{flag} {text!r}: no module {'.'.join(parts[:depth])!r} in {where} ({os.getcwd()}); {_FIX}")
        if depth < len(parts):
            locations: List[str] = list(spec.submodule_search_locations or [])
            spec = importlib.machinery.PathFinder.find_spec(parts[depth], locations) if locations else None
    origin = spec.origin or ""
    if not origin.endswith(".py") or not os.path.isfile(origin):
        return origin  # a compiled or namespace module: its names are known once imported
    try:
        tree = ast.parse(open(origin, "rb").read(), origin)
    except (SyntaxError, ValueError, OSError) as e:
        raise ValueError(f"{flag} {text!r}: {origin} does not parse: {e}") from None
    bound, star = top_level_names(tree.body)
    if name.split(".")[0] not in bound and not star:
        raise ValueError(f"{flag} {text!r}: {origin} defines no {name.split('.')[0]!r} at its top level")
    return origin


def top_level_names(body: List[ast.stmt]) -> Tuple[Set[str], bool]:
    """The names a module's statements bind (definitions, assignments, imports, also inside top-level ``if``
    and ``try``), and whether a star import or a module ``__getattr__`` may bind any other."""
    names: Set[str] = set()
    star = False
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            star = star or any(a.name == "*" for a in node.names)
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            blocks = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            blocks += [h.body for h in getattr(node, "handlers", [])]
            for block in blocks:
                inner, inner_star = top_level_names(block)
                names |= inner
                star = star or inner_star
    return names, star or "__getattr__" in names


def import_object(flag: str, text: str) -> object:
    """Import ``MODULE:NAME`` from this process's path (a rank's: see the module docstring) and return it.

    Raises:
        ValueError: naming ``flag``: a malformed path, a module not found, a module whose own imports fail
            (a missing package), or a module without ``NAME``. Any other error of the module's code
            propagates with its traceback.
    """
    module_name, name = split_import_path(flag, text)
    try:
        value: object = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and (module_name + ".").startswith(e.name + "."):
            raise ValueError(f"{flag} {text!r}: no module {e.name!r} on this rank's path (in {os.getcwd()}); {_FIX}") from None
        raise ValueError(f"{flag} {text!r}: importing {module_name} failed: {e}") from None
    for part in name.split("."):
        if not hasattr(value, part):
            where = getattr(value, "__file__", None) or getattr(value, "__name__", module_name)
            raise ValueError(f"{flag} {text!r}: {where} has no {part!r}")
        value = getattr(value, part)
    return value
