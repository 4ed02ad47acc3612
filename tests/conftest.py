"""Session fixtures shared across test modules, and the markers applied by themselves.

A test gets a marker (registered in pyproject.toml) when it, a function of the tests'
modules it calls, or a fixture it requests names what the marker stands for, so tests
are not marked by hand:

- ``multiprocess``: ``run_on_ranks`` (gloo ranks in spawned processes);
- ``launch``: ``subprocess`` or ``tests/torchx_cli.py``'s ``torchx`` (a fresh interpreter,
  torchrun, a TorchX run or dry run). Tests that start real runs through the sweep or
  search launcher in this process are marked ``launch`` where they are defined.

Worker-pool tests (``multiprocess``) and the download test (``network``) are marked where
they are defined too. ``make test-fast`` runs the rest:
``pytest -m "not multiprocess and not launch and not network"``.
"""

import signal
from pathlib import Path
from types import CodeType, FunctionType
from typing import Callable, Iterator, Set

import pytest

from dlrm_multiepoch.testing.ranks import run_on_ranks

MARKED_BY_NAME = {"multiprocess": {"run_on_ranks"}, "launch": {"subprocess", "torchx"}}


def _names(fn: Callable, seen: Set[Callable]) -> Set[str]:
    """Global and imported names ``fn`` reads, with those of the tests' functions it names."""
    fn = getattr(fn, "__func__", fn)  # a method's function
    if not isinstance(fn, FunctionType) or fn in seen:
        return set()
    seen.add(fn)
    names: Set[str] = set()
    stack = [fn.__code__]
    while stack:  # nested functions and lambdas too
        code = stack.pop()
        names.update(code.co_names)  # a function-level import's names are here too
        stack.extend(c for c in code.co_consts if isinstance(c, CodeType))
    for name in list(names):
        value = fn.__globals__.get(name)
        if isinstance(value, FunctionType) and value.__module__.startswith("tests"):
            names |= _names(value, seen)
    return names


def pytest_collection_modifyitems(items: list) -> None:
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        seen: Set[Callable] = set()
        fixtures = [d.func for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs]
        names = set().union(*(_names(fn, seen) for fn in [item.function, *fixtures]))
        for marker, wanted in MARKED_BY_NAME.items():
            if names & wanted:
                item.add_marker(marker)


def _train_references(rank: int, world_size: int, tmp: str) -> None:
    from dlrm_multiepoch.distributed import init_distributed
    from dlrm_multiepoch.train.config import parse_config
    from dlrm_multiepoch.train.trainer import Trainer
    from tests.resume_helpers import E2E_FLAGS, resume_config

    env = init_distributed()
    Trainer(resume_config(tmp, "a", keep_checkpoints=10), env).train()
    Trainer(parse_config(E2E_FLAGS + ["--tensorboard_dir", tmp, "--run_name", "e2e"]), env).train()


@pytest.fixture(autouse=True, scope="session")
def hangup_as_a_terminal_has_it() -> Iterator[None]:
    """SIGHUP at its default for the session: the signal tests send it to this process and expect the commands to
    stop as under a terminal; a suite run under ``nohup`` inherits it ignored, which the commands rightly keep."""
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGHUP, before)


@pytest.fixture(scope="session")
def uninterrupted_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two uninterrupted 2-rank runs that interrupted ones must reproduce, in one spawn.

    ``a``: ``resume_config`` (every checkpoint kept); ``e2e``: the app test's ``E2E_FLAGS``.
    """
    tmp = tmp_path_factory.mktemp("uninterrupted")
    run_on_ranks(_train_references, 2, str(tmp))
    return tmp
