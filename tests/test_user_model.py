"""Your model under the training app, ``sweep`` and ``search`` (``--model MODULE:NAME``, docs/YOUR_MODEL.md).

- An import path is looked for without importing anything (the sweep and the search refuse it before
  any launch), then imported on every rank; a path that does not import, an object that is no
  builder, a builder returning no module: refused naming ``--model``.
- A forward that does not return ``(loss, StepOutput)``: refused when the Trainer is built (an
  evaluation forward on one batch) or, when only training mode is wrong, at the first training forward,
  before its backward: nothing has changed then. A schedule or ``--table_lr`` naming a table the model
  lacks: refused naming the flag and the model's tables (2 gloo ranks).
- docs/YOUR_MODEL.md's commands, from a folder outside the checkout holding a copy of the example's
  files: a sweep of two strategies and a search over ``examples/deepfm/app_model.py``'s DeepFM on
  ``local_cwd`` (tiny data, 2 ranks), then ``compare`` names what the search deployed.

The example's results equal docs/DROPIN.md's parts loop per step, bitwise: ``tests/test_dropin.py``.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.data.synthetic import synthetic_data
from dlrm_multiepoch.distributed import init_distributed
from dlrm_multiepoch.import_path import find_import_path, import_object, split_import_path
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.models.user_model import build_user_model, import_builder
from dlrm_multiepoch.search.command import main as search_main
from dlrm_multiepoch.step_output import check_step_output
from dlrm_multiepoch.sweep.command import main as sweep_main
from dlrm_multiepoch.testing.ranks import run_on_ranks
from dlrm_multiepoch.train.config import TrainConfig, parse_config
from dlrm_multiepoch.train.trainer import Trainer
from dlrm_multiepoch.data.fetch import CACHE_ENV
from tests.doc_blocks import EXAMPLE_DIR, YOUR_MODEL_RUN, doc_block
from tests.sharding_helpers import differing_keys, snapshot


def _module(folder: Path, name: str, text: str) -> None:
    path = folder / (name.replace(".", "/") + ".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_import_paths_are_found_without_running_them_or_refused_naming_the_flag(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the ranks' path: the working directory first
    _module(tmp_path, "mine", "raise SystemExit('imported')\nfrom x import y as build\ndef other(): pass\n")
    _module(tmp_path, "pkg/__init__", "raise SystemExit('imported')\n")
    _module(tmp_path, "pkg.models", "try:\n    import torch\nexcept ImportError:\n    pass\nelse:\n    build = 1\n")
    _module(tmp_path, "star", "from os.path import *\n")
    _module(tmp_path, "broken", "def build(:\n")
    assert find_import_path("--model", "mine:build") == str(tmp_path / "mine.py")  # nothing ran: no SystemExit
    assert find_import_path("--model", "pkg.models:build") == str(tmp_path / "pkg" / "models.py")
    assert find_import_path("--model", "star:build")  # a star import may bind it: the ranks will tell
    assert "mine" not in sys.modules and "pkg" not in sys.modules
    refused = {
        "nosuch:build": f"--model 'nosuch:build': no module 'nosuch' in the working directory, PYTHONPATH or the "
        f"environment ({tmp_path}); run from the folder that holds it, or add that folder to PYTHONPATH",
        "pkg.nosuch:build": "--model 'pkg.nosuch:build': no module 'pkg.nosuch' in package pkg",
        "mine.sub:build": "--model 'mine.sub:build': no module 'mine.sub' in package mine",
        "mine:nosuch": f"--model 'mine:nosuch': {tmp_path / 'mine.py'} defines no 'nosuch' at its top level",
        "broken:build": f"--model 'broken:build': {tmp_path / 'broken.py'} does not parse: ",
        "mine:": "--model 'mine:': expected an import path MODULE:NAME, e.g. my_models:build",
        "my-models:build": "--model 'my-models:build': expected an import path MODULE:NAME",
    }
    for path, message in refused.items():
        with pytest.raises(ValueError, match=re.escape(message)):
            find_import_path("--model", path)
    with pytest.raises(ValueError, match="expected an import path"):
        split_import_path("--model", ":build")
    # PYTHONPATH is the ranks' path too.
    elsewhere = tmp_path / "lib"
    _module(elsewhere, "theirs", "build = None\n")
    with pytest.raises(ValueError, match="no module 'theirs'"):
        find_import_path("--model", "theirs:build")
    monkeypatch.setenv("PYTHONPATH", str(elsewhere))
    assert find_import_path("--model", "theirs:build") == str(elsewhere / "theirs.py")


def test_imports_and_builders_of_the_wrong_shape_are_refused_naming_the_flag(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    _module(tmp_path, "needs_missing", "import no_such_package_here\nbuild = None\n")
    cases = {
        "no_such_module_here:build": "--model 'no_such_module_here:build': no module 'no_such_module_here' on this rank's path",
        "needs_missing:build": "--model 'needs_missing:build': importing needs_missing failed: No module named 'no_such_package_here'",
        "tests.user_models:nosuch": "tests/user_models.py has no 'nosuch'",
    }
    for path, message in cases.items():
        with pytest.raises(ValueError, match=re.escape(message)):
            import_object("--model", path)
    shapes = {
        "NOT_A_BUILDER": "is an object of type int, not a builder build(data, cfg, device)",
        "takes_two": "takes (data, cfg), not (data, cfg, device): too many positional arguments",
    }
    for name, message in shapes.items():
        with pytest.raises(ValueError, match=re.escape(f"--model 'tests.user_models:{name}' {message}")):
            import_builder(f"tests.user_models:{name}")
    data = synthetic_data(64, {"user": 10, "item": 20}, tasks=("like",))
    returned = "returned an object of type dict; a builder returns the torch.nn.Module"
    with pytest.raises(ValueError, match=re.escape(f"--model 'tests.user_models:returns_a_dict' {returned}")):
        build_user_model("tests.user_models:returns_a_dict", data, ModelConfig(), torch.device("cpu"))
    model = build_user_model("tests.user_models:TinyModel", data, ModelConfig(embedding_dim=4), torch.device("cpu"))
    assert [c.name for c in model.ebc.embedding_bag_configs()] == ["user", "item"]


def test_the_app_and_the_launchers_refuse_a_path_no_rank_would_import_before_anything_runs(tmp_path, capsys):
    flags = ["--model", "nosuch_models:build"]
    message = "--model 'nosuch_models:build': no module 'nosuch_models' in the working directory"
    with pytest.raises(SystemExit) as e:
        parse_config(flags, check_paths=True)
    assert e.value.code == 2 and message in capsys.readouterr().err
    parse_config(flags)  # a launcher for another host checks the syntax only
    with pytest.raises(SystemExit, match="2"):
        parse_config(["--model", "dlrm2"])
    assert "--model must be one of dlrm, dlrm_dcn, multipath or an import path MODULE:NAME" in capsys.readouterr().err
    for main, args in ((sweep_main, ["joint", "delayed"]), (search_main, ["--candidates", "joint,early"])):
        exp = tmp_path / main.__module__
        with pytest.raises(SystemExit) as e:
            main([str(exp), *args, "--", *flags])
        assert e.value.code == 2 and message in capsys.readouterr().err
        assert not exp.exists()


def test_step_outputs_are_checked_naming_what_came_back():
    logits, labels, weights = torch.zeros(4, 2), torch.zeros(4, 2), torch.ones(4)
    out = lambda **kw: type("Out", (), {**dict(loss=torch.tensor(0.5), logits=logits, labels=labels, weights=weights), **kw})()
    check_step_output((torch.tensor(0.5), out()), 4, ["like", "love"], "--model m:b")
    check_step_output((torch.tensor(0.5), out(logits=torch.zeros(4), labels=torch.zeros(4))), 4, ["like"], "--model m:b")
    refused = [
        (torch.tensor(0.5), "--model m:b: forward(batch) returned a tensor of shape []; expected (loss, output), output with "
         "loss, logits, labels, weights"),
        ((torch.zeros(4), out()), "forward(batch)'s loss is a tensor of shape [4]; expected a one-element tensor"),
        ((torch.tensor(0.5), logits), "returned (loss, a tensor of shape [4, 2])"),
        ((torch.tensor(0.5), out(weights=None)), "output Out has no tensor ['weights']"),
        ((torch.tensor(0.5), out(logits=torch.zeros(4))),
         "output.logits has shape [4] on a batch of 4 rows; expected [4, 2] (tasks ['like', 'love'])"),
        ((torch.tensor(0.5), out(labels=torch.zeros(4, 1))), "output.labels has shape [4, 1] on a batch of 4 rows; expected [4, 2]"),
        ((torch.tensor(0.5), out(weights=torch.ones(4, 1))), "output.weights has shape [4, 1] on a batch of 4 rows; expected [4]"),
    ]
    for result, message in refused:
        with pytest.raises(ValueError, match=re.escape(message)):
            check_step_output(result, 4, ["like", "love"], "--model m:b")


def _trainer(tmp: str, name: str, model: str, **flags) -> TrainConfig:
    return TrainConfig.from_flags(
        data=DataConfig(), model=ModelConfig(model=model, embedding_dim=4), tensorboard_dir=tmp, run_name=name,
        epochs=1, batch_size=64, progress_bar=False, train_eval_rows=0, **flags,
    )  # fmt: skip


def _refusals_on_ranks(rank: int, world_size: int, tmp: str) -> None:
    env = init_distributed()
    data = lambda: synthetic_data(512, {"user": 30, "item": 40}, tasks=("like",))
    with pytest.raises(ValueError, match=re.escape(
        "--model 'tests.user_models:returns_logits' (in eval mode): forward(batch) returned (loss, a tensor of shape [64, 1])"
    )):  # fmt: skip
        Trainer(_trainer(tmp, "eval", "tests.user_models:returns_logits"), env, data=data())
    trainer = Trainer(_trainer(tmp, "train", "tests.user_models:returns_logits_in_training"), env, data=data())
    before = snapshot(trainer.model, trainer.optimizer)
    with pytest.raises(ValueError, match=re.escape(
        "--model 'tests.user_models:returns_logits_in_training' (in training): forward(batch) returned (loss, a tensor "
        "of shape [32, 1])"
    )):  # fmt: skip
        trainer.train()
    assert not differing_keys(before, snapshot(trainer.model, trainer.optimizer))  # refused before its backward
    tables = "tables: ['item', 'user']"
    for flags, message in (
        (dict(freeze_schedule="table:t_user=frozen@[0,1)"), "--freeze_schedule 'table:t_user=frozen@[0,1)': freeze-schedule "
         f"group 'table:t_user': unknown table 't_user'; {tables}"),
        (dict(table_lr="t_user=0.1"), f"--table_lr: unknown table(s) ['t_user']; {tables}"),
    ):  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(message)):
            Trainer(_trainer(tmp, "table", "tests.user_models:TinyModel", **flags), env, data=data())
    assert not os.path.exists(os.path.join(tmp, "eval", "checkpoints", "step_1"))


def test_a_models_forward_and_a_missing_table_are_refused_before_anything_trains(tmp_path):
    run_on_ranks(_refusals_on_ranks, 2, str(tmp_path))


EXAMPLE_FILES = ("deepfm.py", "app_model.py", "make_clicks.py")  # what docs/YOUR_MODEL.md has a user copy
SEARCH = "dlrm-multiepoch search runs/deepfm-search --epochs 2"


def run_your_model_commands(folder: Path, cache: Path, search_args: str = "") -> str:
    """docs/YOUR_MODEL.md's commands (``search_args`` added to its search) with bash in ``folder``, which gets a
    copy of the example's files; their output, which must hold no traceback."""
    for name in EXAMPLE_FILES:
        shutil.copy(EXAMPLE_DIR / name, folder / name)
    script = doc_block(YOUR_MODEL_RUN)
    assert script.count(SEARCH) == 1, script
    script = script.replace(SEARCH, f"{SEARCH} {search_args}")
    env = {**os.environ, CACHE_ENV: str(cache), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in output, output
    return output


def check_your_model_runs(folder: Path, output: str) -> None:
    """The sweep trained both strategies on the example's model; compare shows what the search deployed."""
    for run in ("joint-s0", "delayed-s0"):
        summary = json.loads((folder / "runs" / "deepfm" / run / "summary.json").read_text())
        assert summary["config"]["model"]["model"] == "app_model:build" and summary["evaluations"], run
    record = json.loads((folder / "runs" / "deepfm-search" / "search.json").read_text())
    deploy = record["seeds"]["0"]["deploy"]
    assert (folder / deploy["checkpoint"] / "trainer_state.json").is_file(), deploy
    assert f"**The search deployed {deploy['branch']}** in seed(s) 0" in output, output
    assert (folder / "runs" / "deepfm-search" / "compare" / "comparison.csv").is_file()


def test_docs_commands_sweep_and_search_the_examples_model_from_a_folder_of_its_own(tmp_path):
    folder = tmp_path / "mine"  # outside the checkout: the ranks import app_model from their working directory
    folder.mkdir()
    # Two candidates here (the page's search tries every preset and auto; make test-wheel runs it as written).
    output = run_your_model_commands(folder, tmp_path / "cache", "--candidates joint,early")
    record = json.loads((folder / "runs" / "deepfm-search" / "search.json").read_text())
    assert set(record["seeds"]["0"]["branches"]) == {"joint", "early"}
    assert record["seeds"]["0"]["branches"]["early"]["parent"] == "joint"  # a shared prefix: --start_from
    check_your_model_runs(folder, output)
