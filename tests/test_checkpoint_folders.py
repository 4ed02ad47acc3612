"""Checkpoint folders on disk: finding the newest intact one, restarts of a job, fresh-start refusal, pruning."""

import json
import os
from pathlib import Path
from typing import Any, List

import pytest

from dlrm_multiepoch.run_files import FORMAT_VERSION
from dlrm_multiepoch.train.checkpoint import (
    STATE_FILE,
    CheckpointError,
    complete_checkpoints,
    find_checkpoint,
    protect,
    prune,
)
from dlrm_multiepoch.train.checkpoint.find import record_files
from dlrm_multiepoch.train.run_folder import open_run_folder
from tests.resume_helpers import resume_config


def _fake_checkpoint(folder: Path, step: int, job_id: Any = None, payload: bytes = b"shard-bytes" * 10) -> Path:
    """A checkpoint folder with a manifest recorded like a real save's."""
    path = folder / f"step_{step}"
    path.mkdir(parents=True)
    (path / ".metadata").write_bytes(b"metadata")
    (path / "__0_0.distcp").write_bytes(payload)
    state = {"format": FORMAT_VERSION, "step": step, "job_id": job_id, "parts": {}, "files": record_files(str(path))}
    (path / STATE_FILE).write_text(json.dumps(state))
    return path


def test_newest_intact_checkpoint_is_found_without_a_pointer_and_damage_falls_back(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    for step in (4, 8, 12):
        _fake_checkpoint(folder, step)
    (folder / "step_16.tmp").mkdir()  # an interrupted save
    (folder / "step_20").mkdir()  # a folder without its state file
    notes: List[str] = []
    assert find_checkpoint("auto", str(folder), log=notes.append).path == str(folder / "step_12")
    assert notes == []

    shard = folder / "step_12" / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:7])
    (folder / "step_8" / STATE_FILE).write_text('{"format": 2, "st')
    info = find_checkpoint("auto", str(folder), log=notes.append)
    assert info is not None and info.path == str(folder / "step_4") and info.step == 4
    assert "step_12: file __0_0.distcp has 7 bytes, the save wrote 110 (truncated?)" in notes[0]
    assert "step_8: " in notes[1] and "trainer_state.json is not valid JSON" in notes[1]
    assert f"resuming from {folder / 'step_4'}, the newest intact checkpoint" in notes[2]

    # Same size, other bytes: the checksum catches it. Nothing intact is left: start fresh is refused.
    shard = folder / "step_4" / "__0_0.distcp"
    shard.write_bytes(b"X" + shard.read_bytes()[1:])
    assert find_checkpoint("auto", str(folder), log=notes.append) is None
    assert "another sha256 than the save recorded" in notes[-1]
    with pytest.raises(CheckpointError, match=r"--resume .*step_4'.*another sha256.*beside it: \[.*step_8"):
        find_checkpoint(str(folder / "step_4"), str(folder))
    with pytest.raises(CheckpointError, match=r"step_20: incomplete \(no trainer_state.json"):
        find_checkpoint(str(folder / "step_20"), str(folder))
    with pytest.raises(FileNotFoundError, match="step_7: no such folder"):
        find_checkpoint(str(folder / "step_7"), str(folder))
    assert find_checkpoint("", str(folder)) is None
    assert find_checkpoint("auto", str(tmp_path / "fresh" / "checkpoints")) is None


def test_a_restarted_job_resumes_its_own_newest_checkpoint_whatever_resume_says(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    _fake_checkpoint(folder, 4, job_id="job-1")
    _fake_checkpoint(folder, 8, job_id="job-2")
    notes: List[str] = []
    assert find_checkpoint("", str(folder), job_id="job-1", log=notes.append).path == str(folder / "step_4")
    assert "of job job-1: resuming from its checkpoint" in notes[0]
    assert find_checkpoint(str(folder / "step_8"), str(folder), job_id="job-1").path == str(folder / "step_4")
    assert find_checkpoint("", str(folder), job_id="job-3") is None
    assert find_checkpoint("auto", str(folder), job_id="job-3").path == str(folder / "step_8")


def test_a_fresh_start_refuses_earlier_work_unless_overwrite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = resume_config(str(tmp_path), "run")
    run = tmp_path / "run"
    _fake_checkpoint(run / "checkpoints", 10)
    (run / "checkpoints" / "epoch_1").mkdir()  # the older per-epoch format
    with pytest.raises(ValueError, match=r"refusing to start a fresh run in .*run: .*epoch_1, .*step_10\. Pass --resume auto"):
        open_run_folder(cfg, log=lambda _: None)
    (run / "events.out.tfevents.1.host").write_bytes(b"")
    (run / "summary.json").write_text("{}")
    removed: List[str] = []
    folder = open_run_folder(cfg.with_flags(overwrite=True), log=removed.append)
    assert (folder.resume_from, folder.purge_step) == (None, 0)  # the old events are hidden in TensorBoard
    assert len(removed) == 3 and not (run / "summary.json").exists() and os.listdir(run / "checkpoints") == []

    # Results without checkpoints: refused on a plain fresh start, not when --resume auto
    # continues a launch that died before its first checkpoint, nor on a restart of the same job.
    (run / "summary.json").write_text(json.dumps({"job_id": "job-1"}))
    with pytest.raises(ValueError, match=r"summary\.json"):
        open_run_folder(cfg, log=lambda _: None)
    assert open_run_folder(cfg.with_flags(resume="auto"), log=lambda _: None).resume_from is None
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-1")
    assert open_run_folder(cfg, log=lambda _: None).job_id == "job-1"


def test_prune_keeps_protected_checkpoints_and_drops_superseded_ones(tmp_path: Path) -> None:
    for step in (1, 2, 3, 4, 5):
        _fake_checkpoint(tmp_path, step)
    protect(str(tmp_path / "step_2"), "best validation AUC")
    (tmp_path / "step_6.tmp").mkdir()
    # Saving step 4 after resuming from step 3: step 5 belongs to a superseded run.
    removed = prune(str(tmp_path), keep=2, saved=4)
    assert sorted(os.path.basename(p) for p in removed) == ["step_1", "step_5", "step_6.tmp"]
    assert [s for s, _ in complete_checkpoints(str(tmp_path))] == [2, 3, 4]
