"""The run folder a launch trains in: one name on every rank, what it resumes, what a fresh start may replace."""

import os
import shutil
import time
from dataclasses import dataclass
from typing import Callable, Optional

from dlrm_multiepoch import distributed as D
from dlrm_multiepoch.run_files import CheckpointInfo, checkpoints_dir, has_event_files, saved_work, summary_path
from dlrm_multiepoch.train.checkpoint import find_checkpoint, refuse_fresh_start
from dlrm_multiepoch.train.config import TrainConfig
from dlrm_multiepoch.train.lock import RunFolderBusy, RunLock


@dataclass
class RunFolder:
    """Where a run writes, and where it continues from.

    Args:
        path: ``<tensorboard_dir>/<run_name>``: event files, ``summary.json``, ``checkpoints/``.
        checkpoints: ``<path>/checkpoints``.
        resume_from: the verified checkpoint to resume, or None for a fresh start.
        purge_step: the first step whose earlier TensorBoard events are hidden (the
            step after the checkpoint on resume; 0 on a fresh start over old events).
        job_id: the elastic job's id, or None outside torchrun/TorchX.
        lock: the folder's lock, held by rank 0 until :meth:`close` (None on other ranks).
    """

    path: str
    checkpoints: str
    resume_from: Optional[CheckpointInfo]
    purge_step: Optional[int]
    job_id: Optional[str]
    lock: Optional[RunLock] = None

    def close(self) -> None:
        """Release the folder to the next trainer (rank 0; also done at process exit)."""
        if self.lock is not None:
            self.lock.release()


def default_run_name(cfg: TrainConfig, job_id: Optional[str], label: str = "") -> str:
    """``<dataset>-<label: the model>-seed<N>-<job id or time>``: the job id keeps one name across restarts
    (a model's import path ``my_models:build`` as ``my_models.build``)."""
    suffix = job_id[:12] if job_id else time.strftime("%Y%m%d-%H%M%S")
    model = (label or cfg.model.model).replace(":", ".")
    return f"{cfg.data.dataset}-{model}-seed{cfg.seed}-{suffix}"


def open_run_folder(cfg: TrainConfig, log: Callable[[str], None] = print, label: str = "") -> RunFolder:
    """Lock the run folder, find the checkpoint to resume, and clear the way for a fresh start (collective).

    Rank 0 takes the folder's lock (:mod:`dlrm_multiepoch.train.lock`) before anything
    is read or written, so no two trainers ever share a folder. A restart of the same
    torchrun/TorchX job resumes from that job's newest intact checkpoint whatever
    ``--resume`` says. A fresh start over an earlier run's
    checkpoints or ``summary.json`` is refused unless ``--overwrite``, which deletes
    them and hides the earlier event files' steps in TensorBoard.

    Raises:
        RunFolderBusy: a live trainer of another job holds the folder (naming it).
        ValueError / FileNotFoundError: a refused fresh start or a bad ``--resume``, naming the paths.

    ``label`` names what is trained in a derived folder name (default: ``--model``).

    Example::

        run = open_run_folder(cfg)
        if run.resume_from is not None:
            checkpointer.load(run.resume_from)
    """
    job_id = D.elastic_job_id()
    # Every rank must write to the same folder: rank 0 names it (the time may differ across ranks).
    name = cfg.metrics.run_name or D.broadcast_object(default_run_name(cfg, job_id, label))
    path = os.path.join(cfg.metrics.tensorboard_dir, name)
    lock = _lock(path, job_id, log)
    try:
        return _open(cfg, path, job_id, lock, log)
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def _lock(path: str, job_id: Optional[str], log: Callable[[str], None]) -> Optional[RunLock]:
    """Rank 0 takes the folder's lock; every rank raises when it is busy."""
    lock, busy = None, None
    if D.rank() == 0:
        try:
            lock = RunLock.acquire(path, job_id, log)
        except RunFolderBusy as e:
            busy = str(e)
    busy = D.broadcast_object(busy)
    if busy:
        raise RunFolderBusy(busy)
    return lock


def _open(
    cfg: TrainConfig, path: str, job_id: Optional[str], lock: Optional[RunLock], log: Callable[[str], None]
) -> RunFolder:
    checkpoints = checkpoints_dir(path)
    resume_from = find_checkpoint(cfg.checkpoint.resume, checkpoints, job_id, log)
    if resume_from is not None:
        return RunFolder(path, checkpoints, resume_from, resume_from.step + 1, job_id, lock)
    summary = summary_path(path)
    refusal = D.broadcast_object(refuse_fresh_start(checkpoints, summary, cfg.checkpoint.resume, job_id) if D.rank() == 0 else None)
    if refusal and not cfg.checkpoint.overwrite:
        raise ValueError(refusal)
    if refusal and D.rank() == 0:
        for old in saved_work(checkpoints) + ([summary] if os.path.exists(summary) else []):
            log(f"--overwrite: removing {old}")
            shutil.rmtree(old) if os.path.isdir(old) else os.remove(old)
    D.barrier()
    old_events = has_event_files(path)
    return RunFolder(path, checkpoints, None, 0 if old_events else None, job_id, lock)
