"""The ``dlrm-multiepoch`` command: its subcommand table, and that planning, launching and comparing runs import no
torch (that the commands and the components load without it: tests/test_docs.py)."""

import subprocess
import sys

from dlrm_multiepoch.cli import SUBCOMMANDS, main


def test_help_lists_the_subcommands_and_unknown_ones_fail(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name}" in out for name in SUBCOMMANDS) and {"sweep", "compare"} <= set(SUBCOMMANDS)
    assert main(["swep"]) == 2
    assert "unknown subcommand 'swep'" in capsys.readouterr().err


def test_sweep_lists_the_presets(capsys):
    assert main(["sweep", "--list"]) == 0
    out = capsys.readouterr().out
    assert " * joint-1ep " in out and "   no-cross-grad " in out
    assert "flags: --freeze_schedule 'gate:feature_cross=open@[0,1) closed@[1,end)'" in out


def test_planning_launching_and_comparing_runs_import_no_torch(tmp_path):
    # A sweep plans its runs (every run's flags validated), builds each run's TorchX job and the
    # scheduler's request; compare reads finished runs: none of it needs a model, so none may
    # import torch (3+ s, and its load messages) in the launching process.
    from tests.run_writer import write_run

    for name, aucs in (("joint-s0", [0.70, 0.71]), ("delayed-s0", [0.69, 0.72])):
        write_run(tmp_path / "done" / name, aucs)
    code = f"""
import sys
from dlrm_multiepoch.cli import main
from dlrm_multiepoch.sweep.launch import LaunchOptions, SweepLauncher
from dlrm_multiepoch.sweep.plan import build_plan
from dlrm_multiepoch.sweep.strategies import parse_strategy

flags = ["--dataset", "movielens", "--pipeline", "semi_sync", "--id_dropout", "0.01", "--reinit", "tables@1"]
assert main(["sweep", {str(tmp_path / "new")!r}, "joint", "delayed", "--dryrun", "--", *flags]) == 0
plan = build_plan({str(tmp_path / "new")!r}, [parse_strategy("joint")], [0, 1], 2, ["--dataset", "movielens"])
apps = [SweepLauncher(plan, LaunchOptions(scheduler="slurm", j="2x4", gpu=4)).app(run) for run in plan.runs]
assert len(apps) == 2 and apps[0].roles[0].num_replicas == 2
assert main(["compare", {str(tmp_path / "done")!r}, "--no-hparams"]) == 0
print("IMPORTED", sorted(m for m in ("torch", "torchrec", "fbgemm_gpu") if m in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "IMPORTED []"
