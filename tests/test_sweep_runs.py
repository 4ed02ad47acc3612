"""End to end on real runs: ``dlrm-multiepoch sweep`` launches two tiny training runs through TorchX
(``local_cwd``, one rank each, MovieLens subset), then ``compare`` reads them."""

import csv
import glob
import io
import json
import os
from contextlib import redirect_stdout

import matplotlib.image
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.plugins.hparams import metadata, plugin_data_pb2

from dlrm_multiepoch.report.command import main as compare_main
from dlrm_multiepoch.report.plots import PANEL_PX
from dlrm_multiepoch.sweep.command import main as sweep_main

pytestmark = pytest.mark.launch  # every test here reads real runs the module's fixture launches

# A schedule with spaces, given the way a shell user quotes it.
SCHEDULE = "tables=frozen@[0, 50%) train@[50%, end)"
SWEEP = [
    "joint-1ep", f"late=--freeze_schedule '{SCHEDULE}'", "--epochs", "1", "-j", "1x1", "--",
    "--dataset", "movielens", "--max_rows", "3000", "--batch_size", "256", "--limit_train_batches", "4",
    "--train_eval_rows", "500", "--no-progress_bar",
]  # fmt: skip
RUNS = ("joint-1ep-s0", "late-s0")


def _sweep(exp) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        code = sweep_main([str(exp), *SWEEP])
    assert code == 0, out.getvalue()
    return out.getvalue()


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    exp = tmp_path_factory.mktemp("sweep") / "exp"
    first = _sweep(exp)
    with redirect_stdout(io.StringIO()):
        assert compare_main([str(exp)]) == 0
    return exp, first


def test_a_schedule_with_spaces_reaches_the_run(experiment):
    exp, output = experiment
    assert "[2/2] late-s0: training, 1 epoch, 1x1 ranks under TorchX local_cwd" in output
    config = json.loads((exp / "late-s0" / "summary.json").read_text())["config"]
    assert (config["freeze_schedule"], config["epochs"], config["seed"], config["run_name"]) == (SCHEDULE, 1, 0, "late-s0")
    assert json.loads((exp / "joint-1ep-s0" / "summary.json").read_text())["config"]["freeze_schedule"] == "joint"


def _event_value(run_dir, tag, epoch):
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    step = next(e.step for e in acc.Scalars("eval/epoch") if e.value == epoch)
    return next(e.value for e in acc.Scalars(tag) if e.step == step)


def test_compare_numbers_equal_the_event_files(experiment):
    exp, _ = experiment
    with open(exp / "compare" / "comparison.csv") as f:
        rows = {(r["task"], r["strategy"]): r for r in csv.DictReader(f)}
    assert set(rows) == {(t, s) for t in ("like", "love") for s in ("joint-1ep", "late")}
    for (task, strategy), row in rows.items():
        run = exp / f"{strategy}-s0"
        auc = _event_value(run, f"test/{task}/auc", 1)
        assert float(row["test_auc_last_mean"]) == auc == float(row["test_auc_best_mean"])
        assert float(row["test_logloss_last_mean"]) == _event_value(run, f"test/{task}/logloss", 1)
        assert float(row["train_minus_test_auc_mean"]) == _event_value(run, f"train_sample/{task}/auc", 1) - auc
        assert row["test_auc_last_std"] == ""  # one seed: no spread
        assert float(row["wall_time_s"]) == json.loads((run / "summary.json").read_text())["wall_time_s"]
        baseline = _event_value(exp / "joint-1ep-s0", f"test/{task}/auc", 1)
        assert float(row["delta_auc_vs_joint_1ep"]) == auc - baseline
    markdown = (exp / "compare" / "comparison.md").read_text()
    assert "### like: test AUC and logloss" in markdown and "one seed: the seed spread is unknown" in markdown


def test_png_and_hparams_are_written(experiment):
    exp, _ = experiment
    image = matplotlib.image.imread(exp / "compare" / "test_auc.png")
    assert image.shape[:2] == (PANEL_PX[1], 2 * PANEL_PX[0])  # one panel per task
    assert image[..., :3].std() > 0.05  # not blank
    hparams = {}
    for run in RUNS:
        (path,) = glob.glob(str(exp / run / "*.hparams"))
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                if value.tag == metadata.SESSION_START_INFO_TAG:
                    data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
                    hparams[run] = {k: v.string_value or v.number_value for k, v in data.session_start_info.hparams.items()}
    assert hparams["late-s0"]["strategy"] == "late" and hparams["late-s0"]["freeze_schedule"] == SCHEDULE
    assert hparams["joint-1ep-s0"]["strategy"] == "joint-1ep" and hparams["joint-1ep-s0"]["seed"] == 0
    (root,) = glob.glob(str(exp / "*.hparams"))
    experiment_info = [
        plugin_data_pb2.HParamsPluginData.FromString(v.metadata.plugin_data.content).experiment
        for e in EventFileLoader(root).Load()
        for v in e.summary.value
        if v.tag == metadata.EXPERIMENT_TAG
    ]
    assert "test/like/auc" in [m.name.tag for m in experiment_info[0].metric_infos]


def test_restart_skips_finished_runs(experiment):
    exp, _ = experiment
    before = {p: os.path.getmtime(p) for p in glob.glob(str(exp / "*" / "events.out.tfevents.*"))}
    logs = sorted(glob.glob(str(exp / "logs" / "*" / "*")))
    output = _sweep(exp)
    assert "[1/2] joint-1ep-s0: finished earlier (1 epoch), skipped" in output
    assert "[2/2] late-s0: finished earlier (1 epoch), skipped" in output
    assert {p: os.path.getmtime(p) for p in glob.glob(str(exp / "*" / "events.out.tfevents.*"))} == before
    assert sorted(glob.glob(str(exp / "logs" / "*" / "*"))) == logs  # nothing launched
