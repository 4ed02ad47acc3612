"""The installed stack is consistent: one TorchRec release with its torch and FBGEMM (README "Install")."""

import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Set

import torch
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

_TORCH_BUILT = {"torch", "fbgemm-gpu", "fbgemm-gpu-cpu", "torchrec"}
# TorchRec release -> the torch minor its FBGEMM of the same release is built against
# (FBGEMM's binaries miss symbols of any other torch). The Makefile's TORCHREC= stacks.
TORCH_OF_RELEASE = {"1.8": "2.13", "1.9": "2.14"}


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


def _minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def test_torch_stack_belongs_together():
    """torch, FBGEMM and TorchRec of one release; one FBGEMM build, the one the venv was made for."""
    release = _minor(metadata.version("torchrec"))
    assert release in TORCH_OF_RELEASE, f"torchrec {metadata.version('torchrec')} is not a tested release {TORCH_OF_RELEASE}"
    assert _minor(torch.__version__) == TORCH_OF_RELEASE[release], (torch.__version__, release)
    fbgemm = [name for name in ("fbgemm-gpu", "fbgemm-gpu-cpu") if _installed(name)]
    assert len(fbgemm) == 1, f"exactly one FBGEMM build must be installed, found {fbgemm}"
    assert _minor(metadata.version(fbgemm[0])) == release, (fbgemm[0], metadata.version(fbgemm[0]), release)
    # The CUDA build loads only on a CUDA torch; the CPU one on either (torch 2.14.1 has
    # no CPU build on PyPI). The Makefile records which one the venv was made for.
    marker = Path(sys.prefix) / ".device"
    device = marker.read_text().strip() if marker.exists() else ("cuda" if torch.version.cuda else "cpu")
    assert fbgemm == (["fbgemm-gpu"] if device == "cuda" else ["fbgemm-gpu-cpu"]), (device, fbgemm)
    if fbgemm == ["fbgemm-gpu"]:
        assert torch.version.cuda is not None
    import fbgemm_gpu  # noqa: F401  (the build loads into this torch and registers its ops)

    assert hasattr(torch.ops.fbgemm, "asynchronous_complete_cumsum")
    pins = dict(r.split("==") for r in metadata.requires("torchrec") or [] if "==" in r)
    assert metadata.version("torchmetrics") == pins["torchmetrics"]


def test_our_package_does_not_pull_in_torch_builds():
    closure = _requirement_closure("dlrm-multiepoch", {"test", "plots", "kubernetes"})
    assert closure & _TORCH_BUILT == set()
    assert {"torchx", "tensorboard", "pytest", "kubernetes"} <= closure


def test_pip_check_finds_only_torchrecs_fbgemm_requirement():
    out = subprocess.run(
        [sys.executable, "-m", "pip", "check", "--disable-pip-version-check"], capture_output=True, text=True
    ).stdout
    # torchrec names the CUDA "fbgemm-gpu"; the CPU install has fbgemm-gpu-cpu instead, on purpose.
    version = metadata.version("torchrec")
    expected = [] if _installed("fbgemm-gpu") else [f"torchrec {version} requires fbgemm-gpu, which is not installed."]
    assert out.splitlines() == expected, out
