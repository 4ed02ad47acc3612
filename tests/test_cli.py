"""The ``dlrm-multiepoch`` command: its subcommand table, and that it (and the TorchX components) load without torch."""

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


def test_the_command_and_the_components_load_without_torch():
    # TorchX imports every registered component module for any `torchx` command, and
    # `compare` needs no model: neither may pay for (or print the load messages of) torch.
    code = (
        "import sys, dlrm_multiepoch.cli, dlrm_multiepoch.components, dlrm_multiepoch.report.command, "
        "dlrm_multiepoch.sweep.command; print(sorted(m for m in ('torch', 'torchrec', 'fbgemm_gpu') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
