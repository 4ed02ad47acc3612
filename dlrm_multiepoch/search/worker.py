"""One training job that trains a search's branch segments one after another: torchrun, imports, the process
group and the data are paid once, not once per segment.

Launched like the training app (TorchX ``dist.ddp``, every rank one process:
``python -m dlrm_multiepoch.search.worker QUEUE_DIR``), it waits for requests in
``QUEUE_DIR``: ``NNNN.json`` holds one segment's training-app flags (a branch's run, up to
its ``--stop_at_epoch``), numbered from 1. Every rank reads it, builds the ``Trainer`` of
those flags in the shared process group (the dataset of the last segment is kept when its
data flags are the same) and trains; rank 0 then writes ``NNNN.done``. Each segment is an ordinary
run into its own run folder (its lock, checkpoints, ``summary.json``), so every decision
still follows from the run folders. A ``stop`` file ends the job; rank 0 writes it itself
when the search that posts the requests (``DLRM_SEARCH_DRIVER``: its PID and start time)
is gone. A segment that fails ends the job, as a failed launch does (torchrun stops the
other ranks): the search reads its error in the job's log.

Example::

    torchrun --nproc_per_node 2 -m dlrm_multiepoch.search.worker runs/search/logs/worker/queue-1-PID-NS
"""

import gc
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from torch.distributed.elastic.multiprocessing.errors import record

from dlrm_multiepoch.json_io import write_json

DRIVER_ENV = "DLRM_SEARCH_DRIVER"  # "PID:START" of the search process posting the requests
STOP_FILE = "stop"
_POLL_S = 0.1


def request_path(queue: str, number: int, suffix: str = "json") -> str:
    """``QUEUE/NNNN.json`` (the request) and ``NNNN.done`` (rank 0's answer)."""
    return os.path.join(queue, f"{number:04d}.{suffix}")


def driver_alive(text: Optional[str]) -> bool:
    """Whether the search process ``PID:START`` still runs (no variable: assume it does)."""
    from dlrm_multiepoch.lock_holder import process_alive

    if not text:
        return True
    pid, _, start = text.partition(":")
    return process_alive(int(pid), int(start) if start else None)


def next_request(queue: str, number: int, is_main: bool) -> Optional[Dict[str, Any]]:
    """Wait for request ``number`` (None: the job is to stop)."""
    path = request_path(queue, number)
    while not os.path.isfile(path):
        if os.path.isfile(os.path.join(queue, STOP_FILE)):
            return None
        if is_main and not driver_alive(os.environ.get(DRIVER_ENV)):
            write_json(os.path.join(queue, STOP_FILE), {"why": "the search is gone"})
            return None
        time.sleep(_POLL_S)
    with open(path) as f:
        return json.load(f)


@record
def main(argv: Optional[List[str]] = None) -> None:
    import torch.distributed as dist

    from dlrm_multiepoch.distributed import init_distributed
    from dlrm_multiepoch.train.app import console_logging
    from dlrm_multiepoch.train.config import parse_config
    from dlrm_multiepoch.train.trainer import Trainer

    queue = (sys.argv[1:] if argv is None else argv)[0]
    env = init_distributed()
    console_logging(env)
    cached: Optional[Tuple[Any, Any]] = None  # (data config, dataset) of the last segment
    number = 0
    try:
        while True:
            number += 1
            request = next_request(queue, number, env.is_main)
            if request is None:
                break
            cfg = parse_config(list(request["flags"]), check_paths=True)
            same_data = cached is not None and cached[0] == cfg.data
            trainer = Trainer(cfg, env, data=cached[1] if same_data else None)  # type: ignore[index]
            cached = (cfg.data, trainer.data)
            trainer.train()
            del trainer
            gc.collect()
            dist.barrier()  # every rank is done with this run folder before the search reads it
            if env.is_main:
                write_json(request_path(queue, number, "done"), {"ended_at": time.time()})
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
