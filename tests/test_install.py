"""The installed stack is consistent: one TorchRec release with its torch and FBGEMM (docs/INSTALL.md)."""

import os
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import List, Set

import torch
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.install_docs import install_blocks

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


# -- the stacks a user installs by hand, and the image's: exactly the Makefile's pins ------------------------

REPO = Path(__file__).resolve().parents[1]
STACKS = [(release, device) for release in TORCH_OF_RELEASE for device in ("cpu", "cuda")]


def _make_stack(release: str, device: str) -> List[List[str]]:
    """``make stack``: the pip arguments of each install step, in order."""
    out = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(REPO), "stack", f"TORCHREC={release}", f"DEVICE={device}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [shlex.split(line) for line in out.splitlines()]


def test_install_docs_install_exactly_the_makefile_stacks():
    blocks = install_blocks((REPO / "docs" / "INSTALL.md").read_text())
    assert sorted(blocks) == sorted(STACKS)
    for stack in STACKS:
        steps = _make_stack(*stack)
        lines = [shlex.split(line) for line in blocks[stack]]
        assert all(line[:2] == ["pip", "install"] for line in lines), blocks[stack]
        # The environment from nothing, step by step, then the plugin with the torch and FBGEMM pins repeated.
        assert [line[2:] for line in lines] == [*steps, ["dlrm-multiepoch[kubernetes]", *steps[0]]], stack


STUB_WHEEL = "/dist/dlrm_multiepoch-1.2.3-py3-none-any.whl"  # what the stubbed `ls` finds in the image


def _dockerfile_install_steps(release: str, device: str) -> List[List[str]]:
    """The pip arguments of each install step of the Dockerfile's RUN, run by bash with pip and the filesystem
    stubbed, the build arguments at their defaults (``docker build .``) but ``TORCHREC`` and ``DEVICE``."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    defaults = dict(re.findall(r"^ARG (\w+)=(.*)$", text, re.M))
    (run,) = [line[len("RUN ") :] for line in text.splitlines() if line.startswith("RUN ") and "$TORCHREC" in line]
    stubs = (
        'python() { if [ "${1-} ${2-} ${3-}" = "-m pip install" ]; then shift 3; printf "%q " "$@"; echo; fi; }; '
        f"python3() {{ :; }}; ls() {{ echo {STUB_WHEEL}; }}; rm() {{ :; }}; "
    )
    env = {**defaults, "PATH": os.environ["PATH"], "TORCHREC": release, "DEVICE": device}
    out = subprocess.run(["bash", "-c", stubs + run], capture_output=True, text=True, check=True, env=env).stdout
    quiet = {"--no-cache-dir", "--disable-pip-version-check"}
    return [[a for a in shlex.split(line) if a not in quiet] for line in out.splitlines()]


def test_dockerfile_installs_exactly_the_makefile_stacks_and_the_wheel():
    for release, device in STACKS:
        first, deps, torchrec = _make_stack(release, device)
        wheel = f"{STUB_WHEEL}[kubernetes]"
        # `docker build .` makes a CPU image: its torch from the PyTorch CPU index, never PyPI's CUDA build
        # (issue 38, row 9); a CUDA image takes PyPI's.
        index = ["--extra-index-url", "https://download.pytorch.org/whl/cpu"] if device == "cpu" else []
        assert _dockerfile_install_steps(release, device) == [[*index, *first], [*deps, wheel], torchrec], device


def test_the_installed_distribution_has_the_packages_version():
    import dlrm_multiepoch

    # One value: pyproject.toml reads dlrm_multiepoch.__version__ (setuptools' dynamic version).
    assert dlrm_multiepoch.__version__ == metadata.version("dlrm-multiepoch")


def test_make_test_image_installs_no_venv(tmp_path):
    """Issue 38, row 9: `make test-image` builds and runs the image, and installs no .venv/ first (it did, only
    to write the tiny data file, which the image's own Python now writes)."""
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(REPO), "test-image", f"VENV={tmp_path}/none"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.splitlines()[-1] == "tools/image/run.sh" and "pip" not in out and "venv" not in out, out
    script = (REPO / "tools" / "image" / "run.sh").read_text()
    assert "from tests.data_inputs import make_movielens_wheel" in script and '"$PY"' not in script
