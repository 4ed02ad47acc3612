"""Run a function on several gloo ranks, each in its own process: for tests and multi-rank benchmarks.

Usage::

    def _check(rank: int, world_size: int, some_arg: int) -> None:
        ...  # runs with the default process group initialised (gloo, CPU)

    def test_something():
        run_on_ranks(_check, 2, 42)

The function must be defined at module level (it is pickled into the children). An
exception on any rank fails the test (or the benchmark) with that rank's traceback.

The ranks are forked from a server process (``forkserver``) that imported torch,
TorchRec and FBGEMM once per test session (or benchmark): a ``spawn`` ed rank imports them itself (9.4 s
of CPU on the 2-core test machine), and the suite starts about 25 pairs of ranks. Each
rank still gets the test process's current environment and working directory, as a
spawned one would.
"""

import contextlib
import logging
import os
from typing import Any, Callable, Dict, Iterator, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dlrm_multiepoch.distributed import free_port


# Imported once by the fork server; a module that fails to import is skipped there.
PRELOAD = ["dlrm_multiepoch.testing.ranks", "torchrec", "torchrec.distributed", "fbgemm_gpu"]
mp.get_context("forkserver").set_forkserver_preload(PRELOAD)


def quiet_rank_logs() -> None:
    """What a rank's console need not show: TorchRec's pipeline traces the model and torch.fx warns about an API
    it uses, once per rank (the app's ``console_logging`` silences it too)."""
    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)


def _entry(
    rank: int, world_size: int, port: int, fn: Callable[..., Any], args: tuple, environ: Optional[Dict[str, str]] = None,
    cwd: Optional[str] = None,
) -> None:
    if environ is not None:  # the test process's, not the fork server's
        os.environ.clear()
        os.environ.update(environ)
    if cwd is not None:
        os.chdir(cwd)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
    )
    # Two ranks share two cores: one intra-op thread each avoids oversubscription.
    torch.set_num_threads(1)
    quiet_rank_logs()
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        fn(rank, world_size, *args)
        # Let every rank finish its collectives before any tears the group down: a rank
        # destroying gloo while a peer's async work is in flight aborts the process
        # ("terminate called without an active exception").
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_on_ranks(fn: Callable[..., Any], world_size: int = 2, *args: Any) -> None:
    """Call ``fn(rank, world_size, *args)`` on ``world_size`` gloo ranks, each a process; raise if any rank fails.

    Args:
        fn: a module-level function (it is pickled into the ranks).
        world_size: the number of ranks (processes).
        *args: picklable arguments passed after ``rank`` and ``world_size``.
    """
    mp.start_processes(
        _entry,
        args=(world_size, free_port(), fn, args, dict(os.environ), os.getcwd()),
        nprocs=world_size,
        join=True,
        start_method="forkserver",
    )


@contextlib.contextmanager
def single_rank_group() -> Iterator[None]:
    """A 1-rank gloo process group in this process (for a world-size-1 run beside spawned ones).

    The environment the group needs is set for its lifetime only, and the group is
    destroyed on exit, so later tests see an uninitialised process group.
    """
    saved = dict(os.environ)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        os.environ.pop(key, None)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved)
