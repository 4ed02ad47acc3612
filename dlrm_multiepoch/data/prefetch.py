"""Run an iterator in a background thread, a few items ahead of its consumer.

Loading a batch (pread of column files, numpy gathers, building the KJT) mostly runs
outside the GIL, so a thread overlaps it with the training step without the memory
and pickling cost of a worker process.
"""

import queue
import threading
from typing import Any, Iterator, Optional, TypeVar

T = TypeVar("T")
_DONE = object()


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
        self._thread = threading.Thread(target=self._run, args=(source,), name="batch-prefetch", daemon=True)
        self._thread.start()
        self._finished = False

    def _run(self, source: Iterator[T]) -> None:
        try:
            for item in source:
                if not self._put(item):
                    return
            self._put(_DONE)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            self._put(e)
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

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
