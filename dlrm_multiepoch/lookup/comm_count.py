"""Counts the all-to-all collectives a block of code issues.

TorchRec's input and output distributions call ``torch.distributed.all_to_all_single``
(eager) or ``torch.distributed._functional_collectives.all_to_all_single`` (traced); both
are looked up on their module at call time, so wrapping the module attributes sees every
call, forward and backward, while still running the real collective.
"""

import contextlib
from collections import Counter
from typing import Any, Callable, Iterable, Iterator

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

_ENTRY_POINTS = (
    (dist, "all_to_all_single"),
    (dist, "all_to_all"),
    (funcol, "all_to_all_single"),
)


@contextlib.contextmanager
def count_all_to_all() -> Iterator[Counter]:
    """Counts all-to-all calls made inside the block, keyed by entry point.

    Example::

        with count_all_to_all() as calls:
            model(batch).sum().backward()
        print(sum(calls.values()))  # e.g. 6 for one sharded EBC lookup, forward + backward
    """
    calls: Counter = Counter()
    originals = [(module, name, getattr(module, name)) for module, name in _ENTRY_POINTS]

    def counting(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[key] += 1
            return fn(*args, **kwargs)

        return wrapper

    for module, name, fn in originals:
        setattr(module, name, counting(f"{module.__name__}.{name}", fn))
    try:
        yield calls
    finally:
        for module, name, fn in originals:
            setattr(module, name, fn)


def count_ddp_all_reduce(ddp_modules: Iterable[Any]) -> Counter:
    """Counts the gradient all-reduces (one per bucket) of each DDP module from now on.

    Registers a DDP communication hook that counts and then runs DDP's default
    all-reduce, so training is unchanged. A DDP module takes one hook in its lifetime:
    call this once, before the first backward.

    Example::

        calls = count_ddp_all_reduce(ddp_modules(dmp))
        pipeline.progress(batches)
        print(calls["all_reduce"], calls["bytes"])
    """
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    calls: Counter = Counter()

    # DDP checks these annotations.
    def counting(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        calls["all_reduce"] += 1
        calls["bytes"] += bucket.buffer().numel() * bucket.buffer().element_size()
        return allreduce_hook(state, bucket)

    for ddp in ddp_modules:
        ddp.register_comm_hook(ddp.process_group, counting)
    return calls
