"""Run an iterator in a background thread, a few items ahead of its consumer.

Loading a batch (pread of column files, numpy gathers, building the KJT) mostly runs
outside the GIL, so a thread overlaps it with the training step without the memory
and pickling cost of a worker process.
"""

import atexit
import queue
import threading
from typing import Any, Dict, Iterator, Optional, TypeVar

T = TypeVar("T")
_DONE = object()
# Threads still producing, with their stop events: stopped at interpreter exit.
_RUNNING: Dict[threading.Thread, threading.Event] = {}


def _put(q: "queue.Queue[Any]", stop: threading.Event, item: Any) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def _produce(source: Iterator[Any], q: "queue.Queue[Any]", stop: threading.Event) -> None:
    try:
        for item in source:
            if not _put(q, stop, item):
                return
        _put(q, stop, _DONE)
    except BaseException as e:  # noqa: BLE001 - handed to the consumer
        _put(q, stop, e)
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
        _RUNNING.pop(threading.current_thread(), None)


@atexit.register
def _stop_running(timeout: float = 5.0) -> None:
    """Stop and join every prefetch thread before the interpreter finalises.

    A daemon thread still inside torch's C++ code when the interpreter shuts down is
    killed on its way back into Python, which aborts the whole process ("terminate called
    without an active exception"): an epoch cut short (``--limit_train_batches``, an
    early stop) would turn a finished run into a failed exit code."""
    running = list(_RUNNING.items())
    for _, stop in running:
        stop.set()
    for thread, _ in running:
        thread.join(timeout)


class Prefetcher(Iterator[T]):
    """Iterates ``source`` in a daemon thread, holding at most ``depth`` items ahead.

    The thread stops when ``source`` ends, raises (the error is re-raised to the
    consumer), or the consumer drops the iterator or calls :meth:`close`.

    Args:
        source: the iterator to run ahead.
        depth: items produced ahead of the consumer (>= 1).

    Example::

        for batch in Prefetcher(iter(loader_batches), depth=2):
            train_step(batch)
    """

    def __init__(self, source: Iterator[T], depth: int = 2) -> None:
        self._queue: "queue.Queue[Any]" = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        # The thread holds the queue and the event, not this object: dropping the
        # iterator (e.g. an epoch cut short by islice) runs __del__, which stops it.
        self._thread = threading.Thread(
            target=_produce, args=(source, self._queue, self._stop), name="batch-prefetch", daemon=True
        )
        _RUNNING[self._thread] = self._stop
        self._thread.start()
        self._finished = False

    def __next__(self) -> T:
        if self._finished:
            raise StopIteration
        item = self._queue.get()
        if item is _DONE:
            self._finished = True
            raise StopIteration
        if isinstance(item, BaseException):
            self._finished = True
            raise item
        return item

    def close(self, timeout: Optional[float] = 5.0) -> None:
        """Stop the thread and wait for it (a short wait: it checks every 0.1 s)."""
        self._stop.set()
        self._finished = True
        self._thread.join(timeout)

    def __del__(self) -> None:
        self._stop.set()
