"""Process-group setup that picks the device and backend at run time."""

import os
import warnings
from dataclasses import dataclass
from typing import Any, List, Optional

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistEnv:
    """Where this process runs: rank, world size and the device it computes on."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def pick_device(local_rank: int = 0) -> torch.device:
    """CUDA device ``local_rank`` when CUDA is usable, else CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def init_distributed() -> DistEnv:
    """Initialise the default process group from torchrun/TorchX environment variables.

    Uses nccl on CUDA and gloo on CPU. Without ``RANK``/``WORLD_SIZE`` set (a plain
    ``python -m dlrm_multiepoch.train``), runs as a single-rank group on a free local port.
    """
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    device = pick_device(local_rank)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if restart_count() > 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and rank == 0:
        warnings.warn(
            "torchrun restarted this job with its rendezvous TCPStore shared across attempts: the failed "
            "attempt's keys may point the new workers at dead peers (pytorch/pytorch#135712). Launch torchrun "
            "with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (the dlrm_multiepoch.train component sets it)",
            stacklevel=2,
        )
    if not dist.is_initialized():
        if "MASTER_ADDR" not in os.environ:
            os.environ["MASTER_ADDR"] = "127.0.0.1"
            os.environ["MASTER_PORT"] = str(free_port())
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
    return DistEnv(rank, world_size, local_rank, local_world_size, device, backend)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- collectives that also work without a process group (a plain single-process run) --


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


def all_gather_object(value: Any) -> List[Any]:
    """Every rank's ``value``, in rank order (``[value]`` without a process group)."""
    if world_size() == 1:
        return [value]
    out: List[Any] = [None] * world_size()
    dist.all_gather_object(out, value)
    return out


def broadcast_object(value: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``value`` on every rank: decisions taken once, e.g. from a folder listing."""
    if world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def elastic_job_id() -> Optional[str]:
    """The torchrun/TorchX job id (``TORCHELASTIC_RUN_ID``), the same across restarts; None outside one.

    TorchX sets it to the app id (stable across scheduler retries); ``torchrun
    --standalone`` to a random id per launch, kept by its own worker restarts.
    """
    return os.environ.get("TORCHELASTIC_RUN_ID") or None


def restart_count() -> int:
    """How many times torchrun restarted this job's workers (``TORCHELASTIC_RESTART_COUNT``)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
