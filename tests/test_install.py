"""The installed stack is the one the Makefile promises (see README "Install")."""

import subprocess
import sys
from importlib import metadata
from typing import Set

import torch
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

_TORCH_BUILT = {"torch", "fbgemm-gpu", "fbgemm-gpu-cpu", "torchrec"}


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def _requirement_closure(name: str, extras: Set[str]) -> Set[str]:
    """Every installed distribution that ``pip install name[extras]`` pulls in."""
    seen: Set[str] = set()
    todo = [(canonicalize_name(name), frozenset(extras))]
    while todo:
        dist_name, dist_extras = todo.pop()
        for line in metadata.requires(dist_name) or []:
            req = Requirement(line)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in dist_extras | {""}):
                continue
            dep = canonicalize_name(req.name)
            if dep in seen:
                continue
            seen.add(dep)  # kept even when absent: pip would fetch it
            if _installed(dep):
                todo.append((dep, frozenset(req.extras)))
    return seen


def test_torch_stack_is_the_pinned_one():
    assert torch.__version__.split("+")[0] == "2.13.0"
    assert metadata.version("torchrec") == "1.8.0"
    assert metadata.version("torchmetrics") == "1.0.3"
    # Exactly one FBGEMM build, the one that matches torch's.
    cuda = torch.version.cuda is not None
    assert (_installed("fbgemm-gpu"), _installed("fbgemm-gpu-cpu")) == (cuda, not cuda)


def test_our_package_does_not_pull_in_torch_builds():
    closure = _requirement_closure("dlrm-multiepoch", {"test", "plots", "kubernetes"})
    assert closure & _TORCH_BUILT == set()
    assert {"torchx", "tensorboard", "pytest", "kubernetes"} <= closure


def test_pip_check_finds_only_torchrecs_fbgemm_requirement():
    out = subprocess.run(
        [sys.executable, "-m", "pip", "check", "--disable-pip-version-check"], capture_output=True, text=True
    ).stdout
    # torchrec names the CUDA "fbgemm-gpu"; the CPU install has fbgemm-gpu-cpu instead, on purpose.
    expected = [] if torch.version.cuda else ["torchrec 1.8.0 requires fbgemm-gpu, which is not installed."]
    assert out.splitlines() == expected, out
