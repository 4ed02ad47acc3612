"""``dlrm-multiepoch compare`` groups runs: by name without a manifest, apart where other common flags differ."""

import csv
import json

import pytest

from dlrm_multiepoch.report import compare_experiment, read_experiment
from dlrm_multiepoch.report.command import main as compare_main
from dlrm_multiepoch.report.tables import to_markdown
from tests.run_writer import hparams_sessions, manifest, mean32, write_run
from tests.search_sim import COMMON, run_search


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


def test_a_branchs_seeds_are_one_row_whatever_folder_they_started_from(tmp_path):
    """Issue 38, row 13: each seed's branch starts from its own seed's parent (``--start_from .../joint-s1/...``):
    still one row, the mean over seeds, as in a sweep; a start point shared by every seed is compared as given."""
    exp = tmp_path / "exp"
    for seed in (0, 1, 2):
        write_run(exp / f"joint-s{seed}", [0.70, 0.71], seed=seed)
        start = {"start_from": str(exp / f"joint-s{seed}" / "checkpoints" / "step_10")}
        write_run(exp / f"reinit-s{seed}", [0.70, 0.72 + 0.01 * seed], seed=seed, config=start)
        write_run(exp / f"tuned-s{seed}", [0.70, 0.73], seed=seed, config={"start_from": "/shared/pretrained/step_5"})
    comparison = compare_experiment(str(exp))
    (group,) = comparison.groups
    assert (group.label, list(group.rows), group.strategy_flags) == ("", ["joint", "reinit", "tuned"], ["start_from"])
    reinit = comparison.tasks[0].row("reinit")
    assert reinit.seeds == 3 and reinit.test_auc.mean == pytest.approx(mean32(0.72, 0.73, 0.74), abs=1e-12)
    # Another parent is another configuration, never averaged with this one.
    write_run(exp / "reinit-s3", [0.70, 0.75], seed=3, config={"start_from": str(exp / "delayed-s3" / "checkpoints" / "step_10")})
    rows = {(g.label, name): [r.seed for r in runs] for g in compare_experiment(str(exp)).groups for name, runs in g.rows.items()}
    assert rows[("start_from=joint/checkpoints/step_10", "reinit")] == [0, 1, 2]
    assert rows[("start_from=delayed/checkpoints/step_10", "reinit")] == [3]


def test_compare_on_a_search_of_three_seeds_shows_the_mean_over_seeds_on_the_searchs_metric(tmp_path):
    """Issue 38, rows 12 and 13, on a simulated search of 3 seeds: the per-task tables hold one row per finished
    branch (3 seeds) and show the search's metric (validation cal_ne), which picks their best epochs."""
    exp = tmp_path / "exp"
    code, out, _ = run_search([str(exp), "--epochs", "3", "--seeds", "0,1,2", "--", *COMMON])
    assert code == 0, out
    comparison = compare_experiment(str(exp))
    assert comparison.search.deployed == {s: ("reinit", 3, pytest.approx(0.374)) for s in (0, 1, 2)}
    for task in comparison.tasks:
        (row,) = task.rows
        assert (task.metric, row.strategy, row.seeds, row.best_epoch) == ("cal_ne", "reinit", 3, 3)
    like = comparison.tasks[0]
    assert like.row("reinit").val_metric.mean == pytest.approx(1 - 0.636, abs=1e-6)  # cal_ne is 1 - AUC here
    text = to_markdown(comparison)
    assert "| reinit | 3 | 3 | ep 3 | 0.3640 ± 0.0000 | 0.3640 ± 0.0000 | 0.6360 ± 0.0000 |" in text
    assert str(exp) not in text.split("## Every branch trained to its end, per task")[1].split("Branches the search cut")[0]
    assert compare_experiment(str(exp), "auc").tasks[0].metric == "auc"  # --metric still decides
