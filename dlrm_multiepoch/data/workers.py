"""Run a function over items in worker processes, stopping them all on an error or Ctrl-C.

Workers are ``spawn`` ed (safe in a process that already runs torch threads), so the
function and its arguments must pickle (a module-level function). Ctrl-C reaches the
whole process group; the workers ignore it and the caller stops them, so one line (the
caller's) reports it rather than a traceback per worker.
"""

import multiprocessing
import signal
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Iterable, List


class WorkerDied(RuntimeError):
    """A worker process ended without a result (a signal, the out-of-memory killer)."""


def map_in_workers(fn: Callable[..., Any], *iterables: Iterable[Any], workers: int, what: str) -> List[Any]:
    """``[fn(*args) for args in zip(*iterables)]``, up to ``workers`` calls at once in worker
    processes (in this process when ``workers`` <= 1 or there is one call); results in order.

    Args:
        fn: a module-level function.
        iterables: its arguments, one iterable per parameter.
        workers: most processes at once.
        what: what the workers do, for the message when one dies (``"preprocessing"``).

    Raises:
        WorkerDied: a worker was killed; the others are stopped.

    Example::

        digests = map_in_workers(cached_file_digest, paths, cache_dirs, workers=4, what="input digest")
    """
    calls = list(zip(*iterables))
    if workers <= 1 or len(calls) <= 1:
        return [fn(*args) for args in calls]
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(min(workers, len(calls)), mp_context=context, initializer=_ignore_interrupts)
    done = False
    try:
        results = list(pool.map(fn, *zip(*calls)))
        done = True
        return results
    except BrokenProcessPool:
        raise WorkerDied(
            f"a {what} worker process died (killed for memory?); lower --preprocess_workers or --preprocess_chunk_mb"
        ) from None
    finally:
        if not done:  # an error or Ctrl-C: stop the other workers now, not after their work
            for process in list(pool._processes.values()):  # no public way before Python 3.14
                process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
