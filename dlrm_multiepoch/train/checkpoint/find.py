"""Which checkpoint to resume: verify folders against what the save recorded, fall back past damaged ones.

The folders decide, not a pointer file: a resume takes the newest checkpoint whose
every file has the size and sha256 recorded when it was saved. Verification is
collective: each rank hashes a share of the files, so a checkpoint of N files costs
about N / world_size file reads per rank.
"""

import os
from typing import Callable, Dict, List, Optional

from dlrm_multiepoch import distributed as D
from dlrm_multiepoch.file_digests import file_digest
from dlrm_multiepoch.json_io import read_json
from dlrm_multiepoch.run_files import (
    CheckpointError,
    CheckpointInfo,
    checkpoint_files_problem,
    complete_checkpoints,
    read_checkpoint_state,
    saved_work,
    state_path,
    step_folders,
)


def record_files(folder: str) -> Dict[str, Dict[str, object]]:
    """Size and sha256 of every file in ``folder`` (collective: each rank hashes a share)."""
    names = D.broadcast_object(sorted(os.listdir(folder)) if D.rank() == 0 else None)
    mine = {}
    for name in names[D.rank() :: D.world_size()]:
        path = os.path.join(folder, name)
        mine[name] = {"bytes": os.path.getsize(path), "sha256": file_digest(path)}
    return {name: entry for share in D.all_gather_object(mine) for name, entry in share.items()}


def verify_checkpoint(path: str) -> CheckpointInfo:
    """The checkpoint at ``path`` after checking every file (collective).

    Raises:
        FileNotFoundError: ``path`` is not a folder.
        CheckpointError: naming the folder and the file that is missing, truncated,
            damaged or unreadable, or the format it has.

    Example::

        info = verify_checkpoint("runs/joint/checkpoints/step_240")
    """
    if not os.path.isdir(path):
        raise FileNotFoundError(f"checkpoint {path}: no such folder")
    try:
        state = read_checkpoint_state(path)
        files = state.get("files", {})
        problem = checkpoint_files_problem(path, files, sorted(files)[D.rank() :: D.world_size()])
    except CheckpointError as e:
        state, problem = {}, str(e)
    problems = [p for p in D.all_gather_object(problem) if p]
    if problems:
        raise CheckpointError(problems[0])
    return CheckpointInfo(path=path, state=state)


def _job_of(path: str) -> Optional[str]:
    try:
        return read_json(state_path(path)).get("job_id")
    except (OSError, ValueError, AttributeError):
        return None


def newest_intact(folder: str, log: Callable[[str], None], job_id: Optional[str] = None) -> Optional[CheckpointInfo]:
    """The newest checkpoint in ``folder`` that verifies, saying which damaged ones it passed over.

    Args:
        folder: a run's checkpoint folder.
        log: where the fallback notes go.
        job_id: only consider checkpoints saved by this elastic job (a restart).
    """
    candidates = D.broadcast_object(complete_checkpoints(folder) if D.rank() == 0 else None)
    skipped: List[str] = []
    for _, path in reversed(candidates):
        if job_id is not None and D.broadcast_object(_job_of(path) if D.rank() == 0 else None) != job_id:
            continue
        try:
            info = verify_checkpoint(path)
        except CheckpointError as e:
            log(f"WARNING: {e}; falling back to an older checkpoint")
            skipped.append(path)
            continue
        if skipped:
            log(f"WARNING: resuming from {path}, the newest intact checkpoint (passed over: {', '.join(skipped)})")
        return info
    return None


def find_checkpoint(
    resume: str, folder: str, job_id: Optional[str] = None, log: Callable[[str], None] = print
) -> Optional[CheckpointInfo]:
    """The checkpoint a run resumes from; None to start fresh (collective).

    Args:
        resume: ``""`` (start fresh), ``"auto"`` (the newest intact checkpoint in
            ``folder``, if any) or a checkpoint folder.
        folder: this run's checkpoint folder (``<run_dir>/checkpoints``).
        job_id: the elastic job's id (:func:`dlrm_multiepoch.distributed.elastic_job_id`):
            when ``folder`` holds checkpoints this job saved, the job was restarted and
            resumes from the newest of them, whatever ``resume`` says.
        log: rank-0 logger for restarts and fallbacks.

    Raises:
        FileNotFoundError / CheckpointError: an explicit path that is missing or damaged
            (no silent fallback: the message lists the intact checkpoints beside it).

    Example::

        info = find_checkpoint(cfg.checkpoint.resume, f"{run_dir}/checkpoints", elastic_job_id())
    """
    if job_id is not None:
        own = newest_intact(folder, log, job_id=job_id)
        if own is not None:
            log(f"restart {D.restart_count()} of job {job_id}: resuming from its checkpoint {own.path}")
            return own
    if not resume:
        return None
    if resume == "auto":
        return newest_intact(folder, log)
    try:
        return verify_checkpoint(resume)
    except (FileNotFoundError, CheckpointError) as e:
        parent = os.path.dirname(os.path.normpath(resume))
        others = [p for _, p in complete_checkpoints(parent) if os.path.normpath(p) != os.path.normpath(resume)]
        raise type(e)(f"--resume {resume!r}: {e}; complete checkpoints beside it: {others or 'none'}") from None


def refuse_fresh_start(folder: str, summary_file: str, resume: str, job_id: Optional[str]) -> Optional[str]:
    """Why a fresh start must not run in this run folder, or None if it may.

    A fresh start never deletes or overwrites saved work it did not write: checkpoints
    (intact, damaged, or of the older per-epoch format), and the ``summary.json`` of an
    earlier launch unless that launch was this elastic job or ``--resume auto`` asked to
    continue whatever the folder holds (a launch that died before its first checkpoint).

    Args:
        folder: the run's checkpoint folder.
        summary_file: the run's ``summary.json``.
        resume: the ``--resume`` value.
        job_id: this elastic job's id, or None.
    """
    found = saved_work(folder)
    if not found and os.path.isfile(summary_file) and resume != "auto":
        try:
            earlier_job = read_json(summary_file).get("job_id")
        except (ValueError, AttributeError):
            earlier_job = None
        if job_id is None or earlier_job != job_id:
            found = [summary_file]
    if not found:
        return None
    damaged = " (none of its checkpoints is intact: see the warnings above)" if resume == "auto" and step_folders(folder) else ""
    return (
        f"refusing to start a fresh run in {os.path.dirname(os.path.normpath(folder))}: it holds the work of an "
        f"earlier run{damaged}: {', '.join(found)}. Pass --resume auto to continue it, --overwrite to delete it "
        f"and start over, or another --run_name"
    )
