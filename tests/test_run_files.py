"""run_files: the names and torch-free readers of run- and experiment-folder files."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlrm_multiepoch.run_files import (
    FORMAT_VERSION,
    CheckpointError,
    CheckpointFormatError,
    complete_checkpoints,
    newest_checkpoint,
    parse_run_folder_name,
    read_checkpoint_state,
    read_summary,
    recorded_config,
    run_folder_name,
    saved_work,
    whole_epoch_evaluations,
)


def _checkpoint(run: Path, step: int, state: object) -> Path:
    folder = run / "checkpoints" / f"step_{step}"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps(state))
    return folder


def test_planning_and_reading_runs_never_import_torch() -> None:
    code = (
        "import sys\n"
        "import dlrm_multiepoch.run_files, dlrm_multiepoch.sweep.plan, dlrm_multiepoch.sweep.manifest\n"
        "import dlrm_multiepoch.sweep.follow, dlrm_multiepoch.report.runs, dlrm_multiepoch.search.branches\n"
        "import dlrm_multiepoch.train.lock, dlrm_multiepoch.saved_state\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_run_folder_names_round_trip() -> None:
    assert run_folder_name("delayed+falr", -1) == "delayed+falr-s-1"
    assert parse_run_folder_name("delayed+falr-s-1") == ("delayed+falr", -1)
    assert parse_run_folder_name("joint-s0") == ("joint", 0) and parse_run_folder_name("mine") is None


def test_whole_epoch_evaluations_skip_mid_epoch_and_damaged_entries() -> None:
    summary = {"evaluations": [{"epoch": 0.5}, {"epoch": 1}, {"epoch": "2"}, 3, {"epoch": True}, {"epoch": 2.0}, {"epoch": 0}]}
    assert whole_epoch_evaluations(summary) == [{"epoch": 1}, {"epoch": 2.0}]
    assert whole_epoch_evaluations({"evaluations": "x"}) == [] and whole_epoch_evaluations({}) == []


def test_the_summary_and_the_state_file_are_read_naming_the_file(tmp_path: Path) -> None:
    assert read_summary(str(tmp_path)) == {}  # none yet
    (tmp_path / "summary.json").write_text('{"evaluations": [')
    with pytest.raises(ValueError, match=r"summary\.json is not valid JSON \(17 bytes"):
        read_summary(str(tmp_path))
    ok = _checkpoint(tmp_path, 4, {"format": FORMAT_VERSION, "step": 4, "config": {"epochs": 2}})
    assert read_checkpoint_state(str(ok))["step"] == 4
    with pytest.raises(CheckpointError, match=r"step_5: trainer_state\.json holds no JSON object \(damaged\)"):
        read_checkpoint_state(str(_checkpoint(tmp_path, 5, [1])))
    old = _checkpoint(tmp_path, 6, {"format": 1})
    with pytest.raises(CheckpointFormatError, match=r"step_6: written by an older version of dlrm-multiepoch \(format 1"):
        read_checkpoint_state(str(old))
    (tmp_path / "checkpoints" / "step_7").mkdir()  # an interrupted save: not complete
    with pytest.raises(CheckpointError, match=r"step_7: incomplete \(no trainer_state\.json"):
        read_checkpoint_state(str(tmp_path / "checkpoints" / "step_7"))
    assert [s for s, _ in complete_checkpoints(str(tmp_path / "checkpoints"))] == [4, 5, 6]
    assert [Path(p).name for p in saved_work(str(tmp_path / "checkpoints"))] == ["step_4", "step_5", "step_6", "step_7"]


def test_the_recorded_config_is_the_summary_s_else_the_newest_checkpoint_s(tmp_path: Path) -> None:
    assert recorded_config(str(tmp_path)) == (None, "")
    _checkpoint(tmp_path, 4, {"format": FORMAT_VERSION, "step": 4, "config": {"epochs": 2}})
    assert recorded_config(str(tmp_path)) == ({"epochs": 2}, str(tmp_path / "checkpoints" / "step_4" / "trainer_state.json"))
    (tmp_path / "summary.json").write_text(json.dumps({"config": {"epochs": 3}}))
    assert recorded_config(str(tmp_path)) == ({"epochs": 3}, str(tmp_path / "summary.json"))
    (tmp_path / "summary.json").write_text(json.dumps({"config": "x"}))  # damaged: the checkpoint speaks
    assert recorded_config(str(tmp_path))[0] == {"epochs": 2}
    _checkpoint(tmp_path, 8, {"format": 1, "config": {"epochs": 2}})  # the newest is of an older version
    with pytest.raises(CheckpointFormatError) as caught:
        recorded_config(str(tmp_path))
    assert caught.value.found == 1 and caught.value.path.endswith("step_8")
    _checkpoint(tmp_path, 9, {"format": FORMAT_VERSION, "step": 9, "config": {"epochs": 5}})
    newest = newest_checkpoint(str(tmp_path))
    assert newest is not None and newest.step == 9
