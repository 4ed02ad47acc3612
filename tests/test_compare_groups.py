"""``dlrm-multiepoch compare`` groups runs: by name without a manifest, apart where other common flags differ."""

import csv
import json

from dlrm_multiepoch.report import compare_experiment, read_experiment
from dlrm_multiepoch.report.command import main as compare_main
from tests.run_writer import hparams_sessions, manifest, write_run


def test_a_folder_of_runs_without_manifest_is_grouped_by_name(tmp_path):
    write_run(tmp_path / "joint-s0", [0.74, 0.72], seed=0)
    write_run(tmp_path / "joint-s1", [0.75, 0.73], seed=1)
    write_run(tmp_path / "mine", [0.70, 0.76], seed=3)
    runs, problems = read_experiment(str(tmp_path))
    assert problems == [] and [(r.strategy, r.seed) for r in runs] == [("joint", 0), ("joint", 1), ("mine", 3)]


def test_runs_with_other_common_flags_are_never_averaged(tmp_path, capsys):
    exp = tmp_path / "exp"
    schedule = {"joint": "joint", "delayed": "delayed", "unknown-row": "joint"}
    runs = [("joint-s0", "/a", 3), ("joint-s1", "/b", 3), ("joint-s2", "/a", 2), ("delayed-s0", "/a", 3),
            ("delayed-s1", "/a", 3), ("unknown-row-s0", "/a", 3)]  # fmt: skip
    for i, (name, data, epochs) in enumerate(runs):
        strategy = name.rsplit("-", 1)[0]
        config = {"data_path": data, "freeze_schedule": schedule[strategy], "min_count": "2" if "unknown" in name else "1"}
        write_run(exp / name, [0.70 + 0.01 * i] * epochs, seed=int(name[-1]), config=config)
    manifest(exp, [(n, n.rsplit("-", 1)[0], int(n[-1]), e) for n, _, e in runs])
    entries = json.loads((exp / "sweep.json").read_text())
    entries["strategies"] = {
        "joint": {"flags": ["--freeze_schedule", "joint"]}, "delayed": {"flags": ["--freeze_schedule", "delayed"]},
        "unknown-row": {"flags": ["--min_count", "2"]},
    }  # fmt: skip
    (exp / "sweep.json").write_text(json.dumps(entries))
    for with_manifest in (True, False):  # without: the strategies' own flags are inferred
        if not with_manifest:
            (exp / "sweep.json").unlink()
        comparison = compare_experiment(str(exp))
        assert [(g.label, sorted(r.name for r in g.runs)) for g in comparison.groups] == [
            ("data_path=/a", ["delayed-s0", "delayed-s1", "joint-s0", "joint-s2", "unknown-row-s0"]),
            ("data_path=/b", ["joint-s1"]),
        ]
        a, b = comparison.groups
        assert sorted(a.rows) == ["delayed", "joint (epochs=2)", "joint (epochs=3)", "unknown-row"]
        assert (a.strategy_flags, list(b.rows)) == (["epochs", "freeze_schedule", "min_count"], ["joint"])
        (like_a, like_b) = comparison.tasks
        assert (like_a.group, like_a.row("delayed").seeds, like_b.group, like_b.row("joint").seeds) == ("data_path=/a", 2, "data_path=/b", 1)
    assert compare_main([str(exp)]) == 0
    out = capsys.readouterr().out
    assert "**These runs differ in data_path**, not only in their strategies: they are compared in 2 separate groups" in out
    assert "## Group data_path=/b: runs joint-s1" in out and "Strategies differ in: epochs, freeze_schedule, min_count." in out
    with open(exp / "compare" / "comparison.csv") as f:
        assert [(r["group"], r["strategy"]) for r in csv.DictReader(f)][-1] == ("data_path=/b", "joint")
    sessions, _ = hparams_sessions(exp)
    assert {run: (h["data_path"], h["group"]) for run, h in sessions.items()} == {
        name: (data, f"data_path={data}") for name, data, _ in runs
    }
