"""The schedule search's candidate tree and pruning rule, on recorded validation curves (no training)."""

import dataclasses
import math
import re

import pytest

from dlrm_multiepoch.search import (
    Curve,
    can_cut,
    candidate_tree,
    choose,
    compared_at,
    objective,
    prune_rung,
    rung_points,
    select,
)  # fmt: skip
from dlrm_multiepoch.search.candidates import sweep_epochs
from dlrm_multiepoch.search.command import main as search_main
from dlrm_multiepoch.sweep.strategies import STRATEGIES, window_strategy


def test_the_tree_holds_the_search_presets_and_the_windows_with_their_shared_prefixes() -> None:
    tree = candidate_tree(3)
    by = {c.name: c for c in tree}
    assert [c.name for c in tree] == ["joint", "delayed", "auto", "early", "reinit", "window@1"]
    # The sweep's own flags, from its registry: a candidate is the preset it names.
    assert [n for n, s in STRATEGIES.items() if s.search] == ["joint", "early", "delayed", "auto", "reinit"]
    for name in ("joint", "delayed", "auto", "early", "reinit"):
        assert by[name].flags == STRATEGIES[name].flags
    assert by["window@1"].flags == window_strategy(1, 3).flags
    assert [(c.name, c.parent, c.fork, c.epochs) for c in tree if c.parent] == [
        ("early", "joint", 1, 3), ("reinit", "joint", 1, 3), ("window@1", "delayed", 1, 3),
    ]  # fmt: skip
    assert by["joint"].epochs == 4 and by["delayed"].epochs == 3
    # Judged once its tables (from their initial values) and its own suffix have trained a whole epoch,
    # or a fraction of one; reinit's tables start again after epochs 1 and 2: the last ones are those it deploys.
    assert {c.name: c.judged_from() for c in tree} == {
        "joint": 1, "delayed": 3, "auto": 2, "early": 2, "reinit": 3, "window@1": 2,
    }  # fmt: skip
    assert {c.name: round(c.judged_from(0.3), 9) for c in tree} == {
        "joint": 0.3, "delayed": 2.3, "auto": 1.3, "early": 1.3, "reinit": 2.3, "window@1": 1.3,
    }  # fmt: skip
    # Before that, from a fraction after its first tables started, it is ranked as a reference.
    assert {c.name: round(c.ranked_from(0.3), 9) for c in tree if c.ranked_from(0.3) != c.judged_from(0.3)} == {
        "reinit": 1.3
    }
    assert [by["reinit"].tables_start(p) for p in (1.3, 2, 2.3, 3)] == [1, 1, 2, 2]
    assert [round(p, 9) for p in rung_points(tree, 0.3)] == [0.3, 1, 1.3, 2, 2.3, 3]
    assert sweep_epochs(tree) == 4 + 3 * 5
    four = candidate_tree(4)
    assert [(c.name, c.parent, c.fork) for c in four if c.name.startswith("window")] == [
        ("window@1", "delayed", 1), ("window@2", "delayed", 2),
    ]  # fmt: skip
    assert [c.name for c in candidate_tree(1)] == ["joint", "auto"]
    assert {c.name: c.judged_from() for c in candidate_tree(1)} == {"joint": 1, "auto": 1}


def test_a_search_presets_place_in_the_tree_follows_from_what_it_trains(monkeypatch) -> None:
    # frozen shares all but its last epoch with delayed; falr trains otherwise from step 0; a joint copy is joint.
    monkeypatch.setitem(STRATEGIES, "frozen", dataclasses.replace(STRATEGIES["frozen"], search=True))
    monkeypatch.setitem(STRATEGIES, "falr", dataclasses.replace(STRATEGIES["falr"], search=True))
    monkeypatch.setitem(STRATEGIES, "joint-copy", dataclasses.replace(STRATEGIES["joint"], name="joint-copy"))
    tree = candidate_tree(3)
    assert [(c.name, c.parent, c.fork, c.tables_from) for c in tree] == [
        ("joint", None, 0, 0), ("delayed", None, 0, 2), ("auto", None, 0, 1), ("falr", None, 0, 0),
        ("early", "joint", 1, 0), ("frozen", "delayed", 2, 3), ("reinit", "joint", 1, 0), ("window@1", "delayed", 1, 1),
    ]  # fmt: skip


def test_a_subset_must_keep_each_branch_with_its_parent() -> None:
    tree = candidate_tree(3)
    assert [c.name for c in select(tree, ["joint", "early"])] == ["joint", "early"]
    with pytest.raises(ValueError, match=r"early \(from joint\) start from their parent's checkpoint"):
        select(tree, ["early"])
    with pytest.raises(ValueError, match=r"unknown \['window@2'\]"):
        select(tree, ["window@2"])


def test_the_objective_follows_auto_metric_and_task_weights() -> None:
    val = {"like": {"auc": 0.70, "logloss": 0.60}, "love": {"auc": 0.80, "logloss": 0.40}}
    assert objective(val, "auc", {}) == pytest.approx(0.75)
    assert objective(val, "auc", {"like": 1.0, "love": 0.0}) == pytest.approx(0.70)
    assert objective(val, "logloss", {"like": 1.0, "love": 1.0}) == pytest.approx(-0.50)  # higher is better
    assert math.isnan(objective({"like": {"auc": None}}, "auc", {}))


# Validation AUC curves recorded on the shape of the MovieLens time split: joint
# peaks at epoch 1, early and auto fall behind, reinit and window@1 climb, delayed wins last.
RECORDED = {
    "joint": {1: 0.610, 2: 0.598, 3: 0.590, 4: 0.585},
    "delayed": {1: 0.540, 2: 0.552, 3: 0.640},
    "auto": {1: 0.545, 2: 0.600, 3: 0.605},
    "early": {1: 0.610, 2: 0.604, 3: 0.601},
    "reinit": {1: 0.610, 2: 0.625, 3: 0.636},
    "window@1": {1: 0.540, 2: 0.630, 3: 0.632},
}


def _curves(upto: int) -> dict:
    return {n: Curve({e: v for e, v in c.items() if e <= upto}) for n, c in RECORDED.items()}


def test_pruning_cuts_the_peaked_and_halves_the_rest_and_never_judges_frozen_tables() -> None:
    tree = candidate_tree(3)
    assert not can_cut(1, tree)  # only joint is judged after epoch 1: nothing to compare yet
    cuts = prune_rung(2, tree, _curves(2), eta=3)
    assert set(cuts) == {"joint", "auto", "early"}
    assert cuts["joint"].startswith("past its peak: validation 0.5980 after epoch 2 is worse than 0.6100 after epoch 1")
    # auto is never cut for a fall (it keeps its own best); halving: 4 ranked, the top ceil(4/3) = 2 go on.
    assert cuts["auto"] == "halving: rank 4 of 4 after epoch 2 (validation 0.6000); the top 2 go on"
    assert cuts["early"] == "halving: rank 3 of 4 after epoch 2 (validation 0.6040); the top 2 go on"
    assert "delayed" not in cuts  # tables frozen until epoch 2: not judged before its end
    live = [c for c in tree if c.name not in cuts]
    assert not can_cut(3, live)  # every survivor ends at epoch 3
    with pytest.raises(ValueError, match=r"no validation evaluation after epoch 2 for \['reinit'\]"):
        prune_rung(2, tree, {**_curves(2), "reinit": Curve({1: 0.61})})
    with pytest.raises(ValueError, match="--eta must be at least 2"):
        prune_rung(2, tree, _curves(2), eta=1)


def test_with_eta_2_more_branches_go_on() -> None:
    rising = {**_curves(2), "joint": Curve({1: 0.610, 2: 0.620})}  # 5 ranked: window@1, reinit, joint, early, auto
    assert set(prune_rung(2, candidate_tree(3), rising, eta=3)) == {"joint", "early", "auto"}
    assert set(prune_rung(2, candidate_tree(3), rising, eta=2)) == {"early", "auto"}


def test_the_deployed_checkpoint_is_the_best_validation_one_of_any_branch_cut_or_not() -> None:
    tree = candidate_tree(3)
    curves = _curves(3)
    assert choose(tree, curves).__dict__ == {"branch": "delayed", "epoch": 3, "objective": 0.640}
    # A branch's epochs up to its fork are its parent's checkpoints: joint's epoch 1, not early's.
    peaked = {n: Curve({1: 0.70}) if n in ("joint", "early", "reinit") else Curve({1: 0.5}) for n in RECORDED}
    assert choose(tree, peaked).branch == "joint"
    # Any other fixed schedule deploys its last epoch, as its preset does: window@1's better epoch 2 does not count.
    early_peak = {**curves, "window@1": Curve({1: 0.54, 2: 0.65, 3: 0.632})}
    assert choose(tree, early_peak).__dict__ == {"branch": "delayed", "epoch": 3, "objective": 0.640}
    # auto deploys its restored best-validation weights, whatever its epoch curve.
    with_auto = {**curves, "auto": Curve({2: 0.60, 3: 0.605}, best=(1.7, 0.7))}
    assert choose(tree, with_auto).__dict__ == {"branch": "auto", "epoch": 1.7, "objective": 0.7}
    assert choose(tree, {}) is None


def test_search_refuses_flags_it_sets_per_branch(capsys: pytest.CaptureFixture) -> None:
    for flags, expected in [
        (["--", "--freeze_schedule", "delayed"], "['--freeze_schedule'], which the search sets per branch"),
        (["--eta", "1"], "--eta must be at least 2"),
        (["--candidates", "early"], "start from their parent's checkpoint: add the parent"),
        (["--", "--learning_rate", "-1"], "--learning_rate must be a finite number > 0"),
    ]:
        with pytest.raises(SystemExit):
            search_main(["runs/x", *flags])
        assert expected in capsys.readouterr().err


def test_search_component_runs_the_search_command(tmp_path) -> None:
    from contextlib import redirect_stdout

    from dlrm_multiepoch import components

    app = components.search(
        "--val_fraction", "0.2", experiment_dir=str(tmp_path / "s"), seeds="0", eta=2, j="1x2", max_rows=3000,
        dataset="movielens",
    )  # fmt: skip
    (role,) = app.roles
    assert role.entrypoint == "dlrm-multiepoch" and role.args[:2] == ["search", str(tmp_path / "s")]
    at = role.args.index("--")
    assert role.args[at:] == ["--", "--dataset=movielens", "--max_rows=3000", "--val_fraction", "0.2"]
    assert "--eta=2" in role.args
    # The job's command line is one the search command takes: its dry run shows the roots' launches.
    out = tmp_path / "out.txt"
    with open(out, "w") as f, redirect_stdout(f):
        assert search_main([*role.args[1:at], "--dryrun", *role.args[at:]]) == 0
    assert re.findall(r"^=== run (\S+) \((\d) epochs\)", out.read_text(), flags=re.M) == [
        ("joint-s0", "4"), ("delayed-s0", "3"), ("auto-s0", "3"),
    ]  # fmt: skip


def test_a_fractional_rung_ranks_each_branch_within_its_cohort_of_equally_young_tables() -> None:
    tree = candidate_tree(3)
    by = {c.name: c for c in tree}
    f = 0.3
    assert compared_at(0.3, tree, f) == [] and compared_at(2.3, [by["delayed"], by["joint"]], f) == []
    # auto is not judged inside an epoch (its own rule waits a whole pass of its tables).
    assert [c.name for c in compared_at(1.3, tree, f)] == ["joint", "early", "reinit", "window@1"]
    # At 1.3 epochs the young tables (reinit, window@1) are both below joint and early: ranked together
    # they would both go; within cohorts, the best of each goes on.
    at = {"joint": -0.886, "early": -0.884, "reinit": -0.889, "window@1": -0.905}
    curves = {n: Curve({1.3: v}) for n, v in at.items()}
    cuts = prune_rung(1.3, tree, curves, eta=3, fraction=f, sign=-1.0)
    assert set(cuts) == {"joint", "window@1"}
    assert cuts["window@1"] == (
        "halving within its cohort (reinit, window@1: tables as young): rank 2 of 2 after epoch 1.3 "
        "(validation 0.9050); the top 1 go on"
    )
    assert cuts["joint"].startswith("halving within its cohort (joint, early: tables as young): rank 2 of 2")
    # Whole epochs compare every cohort together, as with --rung_fraction 1.
    live = [by["delayed"], by["early"], by["window@1"]]
    assert [c.name for c in compared_at(2, live, f)] == ["early", "window@1"]
    two = {"early": Curve({1: 0.61, 1.3: 0.6, 2: 0.604}), "window@1": Curve({1.3: 0.5, 2: 0.63}), "delayed": Curve()}
    assert set(prune_rung(2, live, two, eta=3, fraction=f)) == {"early"}
    # A rung value is judged, never deployed: joint's best whole epoch is.
    assert choose([by["joint"]], {"joint": Curve({1: 0.6, 1.3: 0.9, 2: 0.61})}).epoch == 2


def test_reinit_is_cut_only_on_the_tables_it_deploys_and_ranks_the_others_before() -> None:
    """Book-Crossing's curves (validation cal_ne, seeds 0 and 1): reinit's tables start over each epoch, so its
    value rises in its last epoch while the others' fall; it is judged with delayed, whose tables are as young."""
    tree = candidate_tree(3)
    by = {c.name: c for c in tree}
    f = 0.3

    def cuts_at(point, live, values):
        return prune_rung(point, live, {n: Curve({point: -v}) for n, v in values.items()}, 3, f, sign=-1.0)

    # 1.3, behind window@1 in its cohort: ranked, not cut. Ahead of it, it cuts it.
    young = [by["reinit"], by["window@1"]]
    assert [c.name for c in compared_at(1.3, young, f)] == ["reinit", "window@1"]
    assert cuts_at(1.3, young, {"reinit": 0.8685, "window@1": 0.8645}) == {}
    assert set(cuts_at(1.3, young, {"reinit": 0.8744, "window@1": 0.8759})) == {"window@1"}
    # Epoch 2: ranked with every branch; the top ceil(3/3) goes on, and only judged branches below it are cut.
    live = [by["delayed"], by["auto"], by["early"], by["reinit"]]
    assert [c.name for c in compared_at(2, live, f)] == ["auto", "early", "reinit"]
    cuts = cuts_at(2, live, {"auto": 0.8246, "early": 0.8719, "reinit": 0.8291})
    assert cuts == {"early": "halving: rank 3 of 3 after epoch 2 (validation 0.8719); the top 1 go on"}
    live = [by["delayed"], by["auto"], by["reinit"], by["window@1"]]
    assert set(cuts_at(2, live, {"auto": 0.8232, "reinit": 0.8218, "window@1": 0.8226})) == {"auto", "window@1"}
    # References alone: nothing could be cut, the search does not stop there.
    assert compared_at(2, [by["delayed"], by["reinit"]], f) == []
    # 2.3: the tables it deploys are 0.3 epoch old, as delayed's: one cohort, judged both ways.
    last = [by["delayed"], by["reinit"]]
    assert [c.name for c in compared_at(2.3, last, f)] == ["delayed", "reinit"]
    assert cuts_at(2.3, last, {"delayed": 0.85, "reinit": 0.84}) == {
        "delayed": "halving within its cohort (delayed, reinit: tables as young): rank 2 of 2 after epoch 2.3 "
        "(validation 0.8500); the top 1 go on"
    }
    assert set(cuts_at(2.3, last, {"delayed": 0.84, "reinit": 0.85})) == {"reinit"}
