"""Run the ``torchx`` command line from tests, and read what its dry runs print.

Usage::

    out = torchx("run", "--dryrun", "-s", "slurm", "dlrm_multiepoch.train", "-j", "2x2")
    sbatch = scheduler_request(out.stdout)

    # a real 2-rank launch of the training app (seconds to minutes; the lead's test):
    torchx("run", "-s", "local_cwd", "dlrm_multiepoch.train", "--epochs", "1", timeout=600)

Runs ``python -m torchx.cli.main`` with this interpreter, in the repository root (the
working directory that ``-s local_cwd`` and ``-s slurm`` launch from), and raises with
the full output when the command fails, so a failed launch shows the app's traceback.
"""

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO_ROOT = Path(__file__).resolve().parents[1]
MODULE_ENTRY = "-m dlrm_multiepoch.train"  # what the train component, the sweep and the search run

_APPLICATION = "=== APPLICATION ==="
_SCHEDULER_REQUEST = "=== SCHEDULER REQUEST ==="


def torchx(
    *args: str, timeout: float = 120, env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None
) -> "subprocess.CompletedProcess[str]":
    """Run ``torchx ARGS...`` in the repository root (or ``cwd``) and return its completed process.

    Args:
        args: the torchx command line after ``torchx``, e.g. ``"run", "--dryrun", ...``.
        timeout: seconds before the command is killed (``subprocess.TimeoutExpired``).
        env: the environment of the command (default: this process's); the
            interpreter's bin directory is put first on its PATH either way.
        cwd: where to run it (default: the repository root), e.g. a test's own folder
            for the ``slurm-*.out`` files a Slurm job writes there.

    Raises:
        AssertionError: the command exited non-zero; the message holds its stdout and stderr.
    """
    env = dict(os.environ if env is None else env)
    # Launched jobs run `torchrun` from PATH: take the one beside this interpreter.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    cmd = [sys.executable, "-m", "torchx.cli.main", *args]
    proc = subprocess.run(cmd, cwd=cwd or REPO_ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise AssertionError(
            f"`torchx {shlex.join(args)}` exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
        )
    return proc


def application(dryrun_stdout: str) -> str:
    """The ``=== APPLICATION ===`` part of a ``torchx run --dryrun`` output: the AppDef."""
    _, sep, rest = dryrun_stdout.partition(_APPLICATION)
    assert sep, f"no {_APPLICATION!r} in the dry-run output:\n{dryrun_stdout}"
    return rest.partition(_SCHEDULER_REQUEST)[0].strip()


def scheduler_request(dryrun_stdout: str) -> str:
    """The ``=== SCHEDULER REQUEST ===`` part of a dry run: what would be submitted."""
    _, sep, rest = dryrun_stdout.partition(_SCHEDULER_REQUEST)
    assert sep, f"no {_SCHEDULER_REQUEST!r} in the dry-run output:\n{dryrun_stdout}"
    return rest.strip()


def split_torchrun(command: str, entry: str = MODULE_ENTRY) -> Tuple[Dict[str, str], List[str]]:
    """Split a ``torchrun [OPTS] ENTRY [ARGS]`` shell command into ``(OPTS, ARGS)``; ENTRY is a
    script path or ``-m MODULE`` (default: the training app's module).

    Example::

        >>> split_torchrun("torchrun --nnodes 2 --role '' -m dlrm_multiepoch.train --epochs=3")
        ({'--nnodes': '2', '--role': ''}, ['--epochs=3'])
    """
    tokens = shlex.split(command)
    assert tokens[0] == "torchrun", f"not a torchrun command: {command}"
    want = shlex.split(entry)
    starts = [i for i in range(len(tokens)) if tokens[i : i + len(want)] == want]
    assert starts, f"entry point {entry} not in: {command}"
    at = starts[0]
    opts = tokens[1:at]
    assert len(opts) % 2 == 0, f"torchrun options are not flag/value pairs: {opts}"
    return dict(zip(opts[::2], opts[1::2])), tokens[at + len(want) :]
