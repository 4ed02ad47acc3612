"""Issue 35, deliverable 1 and rows 1, 12: every run records the identity of its data, and nothing continues,
branches or is ranked on other data unsaid.

- Digests: a file is read whole once per version, then recognised by its stat; a rewrite in place (the same
  ids and size, other labels) is seen, also with its mtime set back (real files, no mock).
- The trainer (1 rank, a tiny CSV): a resume onto a file rewritten in place is refused before any row is
  parsed, naming the file and what changed; ``--start_from`` onto it is a fine-tuning, said and recorded.
- The sweep and the search refuse a rerun onto changed data before anything launches (the search's launches
  simulated by ``tests/search_sim.py``, which records data identities as the trainer does); a branch whose
  data changed under a running search (a cluster's path) is never ranked.
- ``compare`` never ranks runs of different data in one table (row 12).
"""

import io
import json
import os
import shutil
import time
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.data.identity import IDENTITY, changed_since, data_identity, identity_changes
from dlrm_multiepoch.data.load import prepare_dataset
from dlrm_multiepoch.distributed import init_distributed
from dlrm_multiepoch.file_digests import DIGESTS_DIR, cached_file_digest, file_digest
from dlrm_multiepoch.report import compare_experiment
from dlrm_multiepoch.report.tables import to_markdown
from dlrm_multiepoch.sweep.command import main as sweep_main
from dlrm_multiepoch.sweep.manifest import update_manifest
from dlrm_multiepoch.sweep.plan import build_plan
from dlrm_multiepoch.sweep.strategies import parse_strategy
from dlrm_multiepoch.testing.ranks import single_rank_group
from dlrm_multiepoch.train.config import parse_config
from dlrm_multiepoch.train.trainer import Trainer
from tests.fuzz_settings import folder_bytes
from tests.run_writer import write_run
from tests.search_sim import interrupt_at, no_step_twice, run_search, train


def write_events(path: Path, rows: int = 400, seed: int = 0) -> None:
    """A tiny interactions CSV: 20 users, 30 items, a 0/1 label."""
    rng = np.random.default_rng(seed)
    lines = [f"u{rng.integers(20)},i{rng.integers(30)},{rng.integers(2)}" for _ in range(rows)]
    path.write_text("user_id,item_id,label\n" + "\n".join(lines) + "\n")


def flip_labels(path: Path, every: int = 7) -> None:
    """The nightly export rewritten in place: the same rows, ids and size, every ``every``-th label flipped."""
    head, *rows = path.read_text().splitlines()
    rows = [r[:-1] + ("1" if r[-1] == "0" else "0") if i % every == 0 else r for i, r in enumerate(rows)]
    path.write_text("\n".join([head, *rows]) + "\n")


def add_rows(path: Path) -> None:
    """New rows with a new user: the export grew (new ids)."""
    with open(path, "a") as f:
        f.write("u999,i1,1\nu999,i2,0\n")


# -- digests and identities ------------------------------------------------------------


def _settled(path: Path) -> None:
    """Wait out the filesystem's timestamp granularity, so that a digest of ``path`` may be remembered."""
    time.sleep(2.1 if path.stat().st_mtime_ns % 1_000_000_000 == 0 else 0.15)


def test_a_digest_is_read_once_per_version_and_a_rewrite_in_place_is_seen(tmp_path):
    data, cache = tmp_path / "events.csv", str(tmp_path / "cache")
    write_events(data)
    racy = cached_file_digest(data, cache)  # just written: its stat could repeat within the granularity
    assert racy == file_digest(data) and not (tmp_path / "cache" / DIGESTS_DIR).exists()
    _settled(data)
    assert cached_file_digest(data, cache) == racy
    (entry,) = (tmp_path / "cache" / DIGESTS_DIR).iterdir()
    remembered = json.loads(entry.read_text())
    entry.write_text(json.dumps({**remembered, "sha256": "f" * 64}))  # a stat-only look returns what it remembered
    import dlrm_multiepoch.file_digests as digests

    digests._SEEN.clear()  # this process's memory too
    assert cached_file_digest(data, cache) == "f" * 64
    before = data.stat()
    flip_labels(data)
    os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))  # the mtime set back, as `touch -r` would
    assert data.stat().st_size == before.st_size and data.stat().st_mtime_ns == before.st_mtime_ns
    assert cached_file_digest(data, cache) == file_digest(data) != racy  # its ctime changed: read again
    replacement = tmp_path / "new.csv"
    shutil.copy(data, replacement)
    write_events(replacement, seed=1)
    os.replace(replacement, data)  # a new inode under the old name
    assert cached_file_digest(data, cache) == file_digest(data)


def test_an_identity_names_the_file_and_what_changed(tmp_path):
    data = tmp_path / "events.csv"
    write_events(data)
    cfg = DataConfig(dataset="interactions", data_path=str(data), cache_dir=str(tmp_path / "cache"))
    recorded = data_identity(cfg)
    assert recorded["source"] == [str(data)] and recorded["options"]["source_sha256"] == file_digest(data)
    size = data.stat().st_size
    flip_labels(data)
    in_place = f"{data} has other content (sha256 {recorded['options']['source_sha256'][:12]} then, "
    assert identity_changes(recorded, data_identity(cfg)) == [
        f"{in_place}{file_digest(data)[:12]} now; the same {size} bytes: rewritten in place)"
    ]
    assert changed_since(recorded, cfg.cache_dir) == identity_changes(recorded, data_identity(cfg))
    add_rows(data)
    assert identity_changes(recorded, data_identity(cfg))[0].endswith(f"{size} bytes then, {data.stat().st_size} now)")
    moved = tmp_path / "elsewhere.csv"
    shutil.copy(data, moved)
    now = data_identity(cfg)
    assert identity_changes(now, data_identity(DataConfig(dataset="interactions", data_path=str(moved)))) == []
    assert identity_changes(now, data_identity(DataConfig(dataset="interactions", data_path=str(data), min_count="2")))\
        == ["--min_count '1' -> '2'"]
    # A folder `preprocess` wrote is identified by what it was built from: built again from other data, it says so.
    folder = tmp_path / "prepped"
    prepare_dataset(cfg, str(folder), log=lambda _: None)
    prepared = data_identity(DataConfig(dataset="interactions", data_path=str(folder)))
    assert prepared["prepared"] == str(folder) and prepared["options"] == now["options"]
    shutil.rmtree(folder)
    flip_labels(data)
    prepare_dataset(cfg, str(folder), log=lambda _: None)
    (change,) = changed_since(prepared, cfg.cache_dir)
    assert change.startswith(f"{folder} was preprocessed again since: {data} has other content")


# -- the trainer ---------------------------------------------------------------------


def _app(data: Path, tmp: Path, *extra: str):
    return parse_config([
        "--dataset", "interactions", "--data_path", str(data), "--cache_dir", str(tmp / "cache"),
        "--tensorboard_dir", str(tmp / "runs"), "--batch_size", "64", "--train_eval_rows", "0", "--no-progress_bar",
        *extra,
    ])  # fmt: skip


def test_a_resume_onto_rewritten_data_is_refused_and_start_from_fine_tunes_saying_so(tmp_path, capsys):
    data = tmp_path / "events.csv"
    write_events(data)
    with single_rank_group():
        env = init_distributed()
        first = Trainer(_app(data, tmp_path, "--run_name", "a", "--epochs", "1"), env).train()
        assert first[IDENTITY]["options"]["source_sha256"] == file_digest(data)
        (checkpoint,) = (tmp_path / "runs" / "a" / "checkpoints").glob("step_*")
        assert json.loads((checkpoint / "trainer_state.json").read_text())[IDENTITY] == first[IDENTITY]
        flip_labels(data)
        cached = sorted(os.listdir(tmp_path / "cache" / "datasets"))
        with pytest.raises(ValueError) as refused:
            Trainer(_app(data, tmp_path, "--run_name", "a", "--epochs", "2", "--resume", "auto"), env)
        assert str(refused.value).startswith(
            f"--resume '{checkpoint}': the checkpoint was trained on other data: {data} has other content (sha256 "
        )
        assert "rewritten in place). A run continues on the data it started on: to train on the new data, start a " \
               f"new run (another --run_name; for a sweep or search, a new experiment folder); to fine-tune this " \
               f"checkpoint on it, start a new run with --start_from {checkpoint}" in str(refused.value)
        assert sorted(os.listdir(tmp_path / "cache" / "datasets")) == cached  # refused before any row was parsed
        capsys.readouterr()
        tuned = Trainer(_app(data, tmp_path, "--run_name", "b", "--epochs", "2", "--start_from", str(checkpoint)), env)
        summary = tuned.train()
        said = f"--start_from {checkpoint}: fine-tuning on other data than the checkpoint's: {data} has other content"
        assert said in capsys.readouterr().out
        assert summary["started_from"]["other_data"][0].startswith(f"{data} has other content")
        assert summary[IDENTITY]["options"]["source_sha256"] == file_digest(data)
        tomorrow = tmp_path / "tomorrow.csv"  # tomorrow's export at its own path: a fine-tuning too
        shutil.copy(data, tomorrow)
        Trainer(_app(tomorrow, tmp_path, "--run_name", "c", "--epochs", "2", "--start_from", str(checkpoint)), env)
    assert f"fine-tuning on other data than the checkpoint's: --data_path {data} -> {tomorrow} (other content)" \
        in capsys.readouterr().out


# -- the sweep and the search, before anything launches --------------------------------


def _csv_flags(data: Path, tmp: Path):
    return ["--dataset", "interactions", "--data_path", str(data), "--cache_dir", str(tmp / "cache")]


def test_a_sweep_rerun_onto_rewritten_data_is_refused_before_anything_launches(tmp_path, capsys):
    data, exp = tmp_path / "events.csv", tmp_path / "exp"
    write_events(data)
    common = _csv_flags(data, tmp_path)
    plan = build_plan(str(exp), [parse_strategy("joint"), parse_strategy("early")], [0], 2, common)
    update_manifest(plan)
    trained = []
    train(str(exp / "joint-s0"), "joint", plan.runs[0].flags, trained)  # what the app leaves, identity included
    flip_labels(data)
    before = folder_bytes(exp)
    with pytest.raises(SystemExit) as refused:
        sweep_main([str(exp), "joint", "early", "--epochs", "2", "--", *common])
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert refused.value.code == 2 and f"run joint-s0 in {exp} trained on data that has changed since: {data} has" \
        " other content" in message, message
    assert "to train on the new data, sweep it in a new experiment folder; to fine-tune one of its checkpoints on " \
           f"it, start a new run with --start_from {exp}/joint-s0/checkpoints/step_N" in message
    assert folder_bytes(exp) == before  # nothing launched, nothing written


def test_a_search_rerun_onto_changed_data_is_refused_before_anything_launches(tmp_path):
    """Row 1: Ctrl-C during a search, the file at --data_path refreshed in place (labels), rerun: refused naming
    the file, never a branch finished on the new data; new rows (new ids) are refused alike."""
    data, exp = tmp_path / "events.csv", tmp_path / "exp"
    write_events(data)
    args = [str(exp), "--epochs", "3", "--", *_csv_flags(data, tmp_path), "--val_fraction", "0.1"]
    code, out, sim = run_search(args, on_launch=interrupt_at(4))
    assert code == 130, out
    trained = list(sim.trained)
    original = data.read_bytes()
    for change in (flip_labels, add_rows):
        data.write_bytes(original)
        change(data)
        before = folder_bytes(exp)
        code, message, _ = run_search(args)
        assert code == 2 and "trained on data that has changed since: " in message, message
        assert f"{data} has other content" in message and "search it in a new experiment folder" in message
        assert folder_bytes(exp) == before
    data.write_bytes(original)  # the data back as it was: the search continues, nothing trained twice
    code, out, sim = run_search(args)
    assert code == 0 and no_step_twice(trained + sim.trained), out


def test_a_branch_whose_data_changed_under_a_running_search_is_never_ranked(tmp_path):
    """Paths the search cannot see (a cluster's): the data changes between the parent's launch and its branch's
    first; the branch's trainer fine-tunes (as ``--start_from`` does), and the search refuses to rank it."""
    data, exp = tmp_path / "events.csv", tmp_path / "exp"
    write_events(data)
    args = [str(exp), "--epochs", "3", "--", *_csv_flags(data, tmp_path), "--val_fraction", "0.1"]

    def refresh(n, run):
        if run.strategy == "early":  # joint's first launch is done: the export is refreshed before its branch's
            flip_labels(data)

    code, out, _ = run_search(args, on_launch=refresh)
    last = out.rstrip().splitlines()[-1]
    assert code == 1 and last.startswith(f"search: branch {exp}/early-s0 trained on other data than its parent "), out
    assert f"{data} has other content" in last and "search this configuration in a new experiment folder" in last


# -- compare -------------------------------------------------------------------------


def _recorded_data(run: Path, sha: str) -> None:
    summary = json.loads((run / "summary.json").read_text())
    summary[IDENTITY] = {"source": ["events.csv"], "bytes": [10], "options": {"source_sha256": sha}}
    (run / "summary.json").write_text(json.dumps(summary))


def test_compare_never_names_one_winner_across_different_data(tmp_path):
    """Row 12: runs of one strategy on a.csv and another on b.csv, no sweep.json: two tables, one per data; and
    runs of one path whose content differs (rewritten between them) likewise."""
    exp = tmp_path / "exp"
    write_run(exp / "joint-s0", [0.70, 0.71], val_auc=[0.70, 0.71], config={"data_path": "a.csv"})
    write_run(exp / "delayed-s0", [0.60, 0.80], val_auc=[0.60, 0.80], config={"data_path": "b.csv"})
    comparison = compare_experiment(str(exp))
    assert [(g.label, [r.name for r in g.runs], g.strategy_flags) for g in comparison.groups] == [
        ("data_path=b.csv", ["delayed-s0"], []), ("data_path=a.csv", ["joint-s0"], []),
    ]  # fmt: skip
    assert [(t.group, [r.strategy for r in t.rows]) for t in comparison.tasks] == [
        ("data_path=b.csv", ["delayed"]), ("data_path=a.csv", ["joint"]),
    ]  # fmt: skip
    report = to_markdown(comparison)
    assert "**These runs differ in data_path**" in report and "Strategies differ in: data_path" not in report
    for run, sha in (("joint-s0", "a" * 64), ("delayed-s0", "b" * 64)):
        write_run(exp / run, [0.70, 0.71] if run == "joint-s0" else [0.60, 0.80], val_auc=[0.7, 0.71])
        _recorded_data(exp / run, sha)
    comparison = compare_experiment(str(exp))
    assert [g.label for g in comparison.groups] == [f"data={'b' * 12}", f"data={'a' * 12}"]
    assert all(len(t.rows) == 1 for t in comparison.tasks)
