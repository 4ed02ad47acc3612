"""Preprocessing decides per file, never per chunk, and splits work across input files.

The dataset folder is the same, byte for byte, whatever ``--preprocess_chunk_mb`` and
``--preprocess_workers``; several files are one dataset (equal to their concatenation);
inputs that would be read one way in one chunk and another way in the next (timestamps
in two formats), duplicate or list columns and a non-empty ``--output`` are refused by
name before any work.
"""

from dataclasses import replace
from pathlib import Path
from typing import Dict, List

import numpy as np
import pandas as pd
import pytest
from torchx.specs.finder import get_component

from dlrm_multiepoch.components import preprocess as preprocess_component
from dlrm_multiepoch.data.command import main as preprocess_main
from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.data.load import load_dataset, prepare_dataset
from tests.data_inputs import make_criteo_tsv
from tests.torchx_cli import torchx


def folder_bytes(folder: Path) -> Dict[str, bytes]:
    """Every file under ``folder`` (relative path -> content)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def quiet(line: str) -> None:
    pass


def events(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    day = pd.Timestamp("2020-01-01") + pd.to_timedelta(rng.integers(0, 10**7, n), unit="s")
    return pd.DataFrame(
        {
            "uid": rng.integers(0, 30, n),
            "iid": [f"i{x}" for x in rng.zipf(1.5, n) % 70],
            "stars": rng.integers(1, 6, n).astype(float),
            # ISO 8601 at two precisions (one format: its values are unambiguous).
            "ts": [t.strftime("%Y-%m-%d") if k % 3 == 0 else t.strftime("%Y-%m-%d %H:%M:%S") for k, t in enumerate(day)],
            "price": np.where(rng.random(n) < 0.1, np.nan, rng.random(n) * 100),
            "tags": ["|".join(["a", "b", "c", "d"][: int(k)]) for k in rng.integers(0, 4, n)],
        }
    )


COMMON = dict(
    dataset="interactions", user_col="uid", item_col="iid", label_col="stars", task_thresholds="like:4",
    timestamp_col="ts", dense_cols="price", multi_hot_cols="tags", history_length=2, val_fraction=0.1,
)  # fmt: skip


def prepared(cfg: DataConfig, output: Path) -> Dict[str, bytes]:
    return folder_bytes(prepare_dataset(cfg, str(output), log=quiet))


def test_the_folder_does_not_depend_on_the_chunk_size(tmp_path: Path) -> None:
    tsv, csv = tmp_path / "day.tsv", tmp_path / "events.csv"
    make_criteo_tsv(tsv, rows=400, malformed=True)
    events().to_csv(csv, index=False)
    for cfg in (
        DataConfig(dataset="criteo", data_path=str(tsv), criteo_hash_size=300, min_count=2, val_fraction=0.1),
        DataConfig(**COMMON, data_path=str(csv)),
    ):
        big, small = (
            prepared(replace(cfg, preprocess_chunk_mb=mb), tmp_path / f"{cfg.dataset}-{mb}") for mb in (64.0, 0.001)
        )
        assert big.keys() == small.keys() and big == small, cfg.dataset


def split_lines(source: Path, parts: int, header: bool) -> List[Path]:
    """``source`` cut into ``parts`` files of consecutive rows (each with the header)."""
    lines = source.read_text().splitlines(keepends=True)
    head, body = (lines[:1], lines[1:]) if header else ([], lines)
    cuts = np.linspace(0, len(body), parts + 1).astype(int)
    paths = []
    for k in range(parts):
        path = source.with_name(f"{source.stem}_{k}{source.suffix}")
        path.write_text("".join(head + body[cuts[k] : cuts[k + 1]]))
        paths.append(path)
    return paths


def arrays_of(files: Dict[str, bytes]) -> Dict[str, bytes]:
    return {k: v for k, v in files.items() if k != "meta.json"}


@pytest.mark.multiprocess  # a preprocess worker pool
@pytest.mark.parametrize("dataset", ["criteo", "interactions"])
def test_files_are_one_dataset_whatever_the_worker_count(tmp_path: Path, dataset: str) -> None:
    if dataset == "criteo":
        whole = tmp_path / "days.tsv"
        make_criteo_tsv(whole, rows=500, malformed=True)
        cfg = DataConfig(dataset="criteo", criteo_hash_size=300, min_count=2, val_fraction=0.1)
    else:
        whole = tmp_path / "events.csv"
        events(500).to_csv(whole, index=False)
        cfg = DataConfig(**COMMON)
    days = ",".join(map(str, split_lines(whole, 3, header=dataset == "interactions")))
    one, two = (prepared(replace(cfg, data_path=days, preprocess_workers=w), tmp_path / f"w{w}") for w in (1, 2))
    assert one.keys() == two.keys() and one == two
    # Id maps and statistics fitted over all files: the arrays of the concatenated file.
    assert arrays_of(one) == arrays_of(prepared(replace(cfg, data_path=str(whole)), tmp_path / "whole"))


def write_times(path: Path, times: List[str]) -> None:
    n = len(times)
    pd.DataFrame({"user_id": np.arange(n) % 7, "item_id": np.arange(n) % 5, "label": np.arange(n) % 2, "ts": times}).to_csv(
        path, index=False
    )


@pytest.mark.parametrize(
    "times, first, other",
    [
        (["2020-01-02"] * 300 + ["01/03/2020"] * 300, "2020-01-02", "01/03/2020"),  # two formats
        (["01/02/2020"] * 300 + ["13/02/2020"] * 300, "01/02/2020", "13/02/2020"),  # month first, then day first
        (["1577836800"] * 300 + ["2020-01-03"] * 300, "1577836800", "2020-01-03"),  # numbers, then dates
    ],
)
def test_timestamps_in_two_formats_are_refused_naming_both(
    tmp_path: Path, times: List[str], first: str, other: str
) -> None:
    csv = tmp_path / "t.csv"
    write_times(csv, times)
    cfg = DataConfig(dataset="interactions", data_path=str(csv), timestamp_col="ts")
    for mb in (64.0, 0.001):  # one chunk or many: the same refusal
        with pytest.raises(ValueError, match=rf"--timestamp_col 'ts' of --data_path {csv} mixes formats: its first "
                                             rf"value '{first}' .* which '{other}' is not"):
            prepare_dataset(replace(cfg, preprocess_chunk_mb=mb), str(tmp_path / f"out{mb}"), log=quiet)


@pytest.mark.multiprocess  # a preprocess worker pool
def test_a_worker_refusal_names_its_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    write_times(a, ["2020-01-02"] * 50)
    write_times(b, ["2020-01-02"] * 50 + ["01/03/2020"])
    cfg = DataConfig(dataset="interactions", data_path=f"{a},{b}", timestamp_col="ts", preprocess_workers=2)
    with pytest.raises(ValueError, match=rf"--timestamp_col 'ts' of --data_path {b} mixes formats"):
        prepare_dataset(cfg, str(tmp_path / "out"), log=quiet)
    assert not (tmp_path / "out").exists()


def test_missing_timestamps_are_dropped_and_counted_not_refused(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    write_times(csv, ["", "2020-01-01"] + [f"2020-01-{d:02d} 10:00" for d in range(2, 29)] * 10 + ["NA"])
    lines: List[str] = []
    cfg = DataConfig(dataset="interactions", data_path=str(csv), timestamp_col="ts", cache_dir=str(tmp_path / "c"))
    data = load_dataset(cfg, lines.append)
    assert sum(len(s) for s in data.splits.values()) == 271
    assert any("dropped 2 of 273 rows missing the user, item, label or timestamp" in line for line in lines)


@pytest.mark.multiprocess  # a preprocess worker pool
def test_files_with_numbers_and_dates_as_timestamps_are_refused_naming_both(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    write_times(a, [str(1577836800 + k) for k in range(50)])
    write_times(b, ["2020-01-03"] * 50)
    cfg = DataConfig(dataset="interactions", data_path=f"{a},{b}", timestamp_col="ts", preprocess_workers=2)
    with pytest.raises(ValueError, match=r"numbers in a.csv \(e.g. '1577836800'\), dates in b.csv \(e.g. '2020-01-03'\)"):
        prepare_dataset(cfg, str(tmp_path / "out"), log=quiet)
    c = tmp_path / "c.csv"
    write_times(c, [""] * 50)
    with pytest.raises(ValueError, match=r"--timestamp_col 'ts': \['c.csv'\] hold no timestamps"):
        prepare_dataset(replace(cfg, data_path=f"{b},{c}"), str(tmp_path / "out"), log=quiet)


def test_a_column_named_twice_is_refused_by_name(tmp_path: Path) -> None:
    csv = tmp_path / "dup.csv"
    csv.write_text("uid,iid,label,uid\n1,2,0,3\n2,3,1,4\n")
    cfg = DataConfig(dataset="interactions", data_path=str(csv), user_col="uid", item_col="iid")
    with pytest.raises(ValueError, match=rf"--data_path {csv} has 2 columns named 'uid' \(--user_col\)"):
        prepare_dataset(cfg, str(tmp_path / "out"), log=quiet)


def test_a_list_column_as_categorical_is_refused_by_name(tmp_path: Path) -> None:
    parquet = tmp_path / "lists.parquet"
    frame = pd.DataFrame({"user_id": [1, 2, 3], "item_id": [4, 5, 6], "label": [0, 1, 0], "tags": [["a"], ["b", "c"], []]})
    frame.to_parquet(parquet, index=False)
    cfg = DataConfig(dataset="interactions", data_path=str(parquet), categorical_cols="tags")
    with pytest.raises(ValueError, match=r"--categorical_cols column 'tags' of .* holds list<.*> values, not one value "
                                         r"a row; list columns go in --multi_hot_cols"):
        prepare_dataset(cfg, str(tmp_path / "out"), log=quiet)


def test_a_non_empty_output_folder_is_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    tsv, output = tmp_path / "day.tsv", tmp_path / "out"
    make_criteo_tsv(tsv, rows=60)
    output.mkdir()
    (output / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        preprocess_main(["--dataset", "criteo", "--data_path", str(tsv), "--output", str(output)])
    assert exit_info.value.code == 2
    err = capsys.readouterr()
    assert f"--output {output} is a folder that holds other files (notes.txt) and no dataset" in err.err
    assert "building" not in err.out and sorted(p.name for p in output.iterdir()) == ["notes.txt"]
    # An empty folder, or a dataset folder of the same input and options, is fine.
    (output / "notes.txt").unlink()
    assert preprocess_main(["--dataset", "criteo", "--data_path", str(tsv), "--output", str(output)]) == 0
    assert preprocess_main(["--dataset", "criteo", "--data_path", str(tsv), "--output", str(output)]) == 0


def test_preprocess_component_runs_the_command_with_a_worker_per_cpu() -> None:
    app = preprocess_component("--min_count=2", output="/data/out", cpu=4, dataset="criteo", data_path="/d/0,/d/1")
    (role,) = app.roles
    assert role.entrypoint == "dlrm-multiepoch" and role.resource.cpu == 4 and role.resource.gpu == 0
    assert role.args == [
        "preprocess", "--output", "/data/out", "--dataset=criteo", "--data_path=/d/0,/d/1", "--preprocess_workers=4",
        "--min_count=2",
    ]  # fmt: skip
    role = preprocess_component("--preprocess_workers=2", output="/o", cpu=4).roles[0]
    assert role.args == ["preprocess", "--output", "/o", "--preprocess_workers=2"]


def test_preprocess_component_runs_under_torchx_and_writes_the_same_folder(tmp_path: Path) -> None:
    assert get_component("dlrm_multiepoch.preprocess").validation_errors == []
    days = [tmp_path / "day_0", tmp_path / "day_1"]
    for k, day in enumerate(days):
        make_criteo_tsv(day, rows=80, seed=k)
    data_path = ",".join(map(str, days))
    torchx(
        "run", "-s", "local_cwd", "dlrm_multiepoch.preprocess", "--output", str(tmp_path / "job"), "--cpu", "2",
        "--dataset", "criteo", "--data_path", data_path, "--", "--criteo_hash_size", "300", timeout=300,
    )  # fmt: skip
    cfg = DataConfig(dataset="criteo", data_path=data_path, criteo_hash_size=300)
    assert folder_bytes(tmp_path / "job") == prepared(cfg, tmp_path / "direct")


def test_a_build_removes_the_scratch_that_a_killed_build_left(tmp_path: Path) -> None:
    tsv, output = tmp_path / "day.tsv", tmp_path / "out"
    make_criteo_tsv(tsv, rows=60)
    stale = tmp_path / ".out.tmp-4242" / "scratch"  # a job killed mid-scan (its PID's folder)
    stale.mkdir(parents=True)
    (stale / "spill").write_bytes(b"x" * 1000)
    lines: List[str] = []
    prepare_dataset(DataConfig(dataset="criteo", data_path=str(tsv)), str(output), log=lines.append)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["day.tsv", "out"]  # no lock file left
    assert f"removing {stale.parent}, left by an interrupted build" in lines
