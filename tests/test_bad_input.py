"""Bad input, generated: every case is handled as documented or refused before training, naming what is wrong.

Property-based (hypothesis) over the validation paths only, no training: freeze
schedule strings, values of every CLI flag, and small data files (truncated, wrong
columns, wrong types, wrong encodings, negative or huge ids, NaN/inf values, empty).
The contract checked for each case:

- accepted: the data passes ``InteractionData.validate`` (ids in range), every dense
  value is finite and every label 0/1, no row disappears unaccounted for, and a first
  batch builds;
- refused: a ``ValueError``/``OSError`` (argparse: exit code 2) whose message names
  the flag or the file; never another exception type from deep inside a library.

Runs are deterministic (``derandomize``, no example database) and bounded; set
``DLRM_BAD_INPUT_EXAMPLES`` for longer runs (docs/RELIABILITY.md lists the counts).
"""

import contextlib
import hashlib
import io
import re
from dataclasses import replace
from pathlib import Path
from typing import List, Optional

import numpy as np
import pandas as pd
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.data.load import load_dataset
from dlrm_multiepoch.data.loader import BatchLoader
from dlrm_multiepoch.schedule import FreezeSchedule
from dlrm_multiepoch.train.build import check_splits
from dlrm_multiepoch.train.config import (
    build_parser,
    check_freeze_schedule,
    parse_config,
)
from tests.fuzz_settings import CASES


def cli_error(argv: List[str]) -> Optional[str]:
    """argparse's error text if ``parse_config(argv)`` refuses it (exit code 2), else None."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            parse_config(argv)
        except SystemExit as e:
            assert e.code == 2, f"{argv}: exit code {e.code}"
            event("refused")
            return err.getvalue()
    event("accepted")
    return None


_REASONS = (
    "cannot read", "cannot parse", "lacks column", "no usable rows", "split of", "is empty", "not 0/1",
    "too large", "infinite", "unknown suffix", "empty split", "no data",
)  # fmt: skip


def _reason(message: str) -> str:
    """A short class of a refusal, for the statistics (``--hypothesis-show-statistics``)."""
    return next((f"refused: {r}" for r in _REASONS if r in message), "refused: other")


# ---------------------------------------------------------------- schedule strings

_BOUND = st.one_of(
    st.sampled_from(["0", "1", "2", "0.5", "1.5", "end", "end-1", "end-0.5", "7", "-1", "x", ""]),
    st.integers(0, 40).map(lambda n: f"{n}step"),
    st.integers(0, 150).map(lambda n: f"{n}%"),
)
_WINDOW = st.builds(
    lambda state, a, b, form: {"full": f"{state}@[{a},{b})", "bare": state, "broken": f"{state}@[{a};{b}"}[form],
    st.sampled_from(["train", "frozen", "open", "closed", "thaw"]),
    _BOUND,
    _BOUND,
    st.sampled_from(["full", "full", "full", "bare", "broken"]),
)
_GROUP = st.sampled_from(["tables", "table:t_user", "module:over_arch.*", "gate:feature_cross", "table:", "rows"])
_ENTRY = st.one_of(
    st.builds(lambda g, ws: f"{g}=" + " ".join(ws), _GROUP, st.lists(_WINDOW, min_size=0, max_size=3)),
    st.sampled_from(["joint", "delayed", "early", "frozen", "later"]),
)
SCHEDULES = st.lists(_ENTRY, max_size=3).map("; ".join)


@CASES
@given(SCHEDULES, st.integers(1, 4))
def test_freeze_schedule_strings_are_accepted_or_refused_naming_the_flag(text: str, epochs: int) -> None:
    error = cli_error(["--freeze_schedule", text, "--epochs", str(epochs)])
    if error is not None:
        assert "--freeze_schedule" in error, error
        return
    # Accepted before the data: with the run length known, the trainer either resolves
    # it or refuses it (build_freeze prefixes the flag); bounds in epochs already fit.
    try:
        FreezeSchedule.parse(text).resolve(steps_per_epoch=7, num_epochs=epochs)
    except ValueError as e:
        assert "step" in text, f"{text!r}: only step-unit bounds may fail once the steps are known: {e}"


def test_schedule_check_speaks_in_epochs_not_placeholder_steps() -> None:
    with pytest.raises(ValueError, match=r"window frozen@\[0,5\) reaches epoch 5, outside the run's --epochs 3"):
        check_freeze_schedule("tables=frozen@[0,5)", 3)
    with pytest.raises(ValueError, match="--freeze_schedule is empty; use 'joint'"):
        check_freeze_schedule("  ", 3)


# ---------------------------------------------------------------- CLI flag values

_FLAGS = [a for a in build_parser()._actions if a.type is not None]  # every flag that takes a value
_VALUES = st.one_of(
    st.integers(-10**6, 10**6).map(str),
    st.sampled_from(["0", "-1", "1e400", "nan", "inf", "-inf", "", " ", "1,2", "8,", ",", "a:b", "x:1,x:2", "1e-300"]),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12),
)


@CASES
@given(st.sampled_from(_FLAGS), _VALUES)
def test_every_flag_value_is_accepted_or_refused_naming_the_flag(flag, value: str) -> None:
    name = flag.option_strings[0]
    error = cli_error([f"{name}={value}"])
    if error is not None:
        assert name in error, f"{name}={value!r}: {error}"


# ---------------------------------------------------------------- data files

_ID = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from(["", "nan", "u1", "ü", "1e400"]))
_NUMBER = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64).map(repr),
    st.integers(-(10**18), 10**18).map(str),
    st.sampled_from(["", "yes", "1", "0", "inf", "-inf", "NaN", "1e308", "1e309"]),
)


_LABEL = st.sampled_from(["0", "1"] * 15 + ["", "yes", "2", "inf", "nan", "-1", "0.5"])


@st.composite
def interaction_tables(draw, suffix: str) -> bytes:
    """A small table in ``suffix``'s format: mostly well-formed with values of every type, sometimes damaged."""
    columns = ["user_id", "item_id", "label", "price"]
    if draw(st.integers(0, 7)) == 0:
        columns[draw(st.integers(0, 3))] = "other"
    rows = [
        [draw(_ID), draw(_ID), draw(_LABEL), draw(_NUMBER)]
        for _ in range(draw(st.integers(0, 14)))
    ]
    if suffix == ".parquet":
        frame = pd.DataFrame(rows, columns=columns, dtype=str)  # strings: the types are for the loader to sort out
        buffer = io.BytesIO()
        frame.to_parquet(buffer)
        data = buffer.getvalue()
    else:
        sep = "," if suffix == ".csv" else "\t"
        width = draw(st.sampled_from([4] * 6 + [3, 5]))  # sometimes a field short or extra on every row
        lines = [sep.join(columns)] + [sep.join(str(v) for v in (row + ["9"])[:width]) for row in rows]
        text = "\n".join(lines) + draw(st.sampled_from(["\n", ""]))
        data = text.encode(draw(st.sampled_from(["utf-8"] * 6 + ["latin-1", "utf-16"])), errors="replace")
    damage = draw(st.sampled_from(["none"] * 6 + ["truncate", "empty", "binary"]))
    if damage == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    elif damage == "empty":
        data = b""
    elif damage == "binary":
        data += bytes(draw(st.lists(st.integers(0, 255), max_size=20)))
    return data


def _check_load(cfg: DataConfig) -> None:
    """Load ``cfg``: accepted data is valid and accounted for; a refusal names the file or a flag."""
    notes: List[str] = []
    try:
        data = load_dataset(cfg, log=notes.append)
        check_splits(data)
    except (ValueError, OSError) as e:
        assert cfg.data_path in str(e) or "--" in str(e) or "split" in str(e), f"{type(e).__name__}: {e}"
        event(_reason(str(e)))
        return
    event("accepted")
    read = next((n for n in notes if re.search(r"\d+ rows read, \d+ kept", n)), None)
    if read is not None:  # rows kept = rows in the splits; dropped ones are counted in a note
        kept = int(re.search(r"(\d+) kept", read).group(1))
        assert kept == len(data.splits["train"]) + len(data.splits["test"]), notes
    for name, split in data.splits.items():  # every value a model would see is finite, every label 0/1
        rows = split.read(0, len(split))
        assert np.isfinite(rows.dense).all(), f"{name} split: non-finite dense values"
        assert all(np.isin(y, (0.0, 1.0)).all() for y in rows.labels.values()), f"{name} split: labels not 0/1"
    loader = BatchLoader(data, "train", 4, rank=1, world_size=2, shuffle=True)
    first = next(iter(loader))
    assert first.sparse_features.values().numel() == first.batch_size * len(data.feature_names)


@CASES
@given(st.data(), st.sampled_from([".csv", ".tsv", ".parquet"]))
def test_interaction_files_load_valid_data_or_are_refused_naming_the_file(tmp_path: Path, data, suffix: str) -> None:
    raw = data.draw(interaction_tables(suffix))
    path = tmp_path / f"events-{hashlib.sha256(raw).hexdigest()[:12]}{suffix}"
    path.write_bytes(raw)
    cfg = DataConfig(dataset="interactions", data_path=str(path), cache_dir=str(tmp_path / "cache"), dense_cols="price")
    _check_load(cfg)


_CRITEO_FIELD = {  # valid values of each field, then values that make a line malformed
    "label": (["0", "1"], ["2", "", "x"]),
    "dense": (["0", "3", "17", "123456", "", "-5"], ["1.5", "nan", "-9999999999999999999", "1e400", "inf"]),
    "sparse": (["68fd1e64", "0", "abc", ""], ["ffffffffffffffffffffffff", "zz", "-5"]),
}
_KINDS = ["label"] + ["dense"] * 13 + ["sparse"] * 26


@st.composite
def criteo_lines(draw) -> str:
    """A 40-field Criteo line, at times with one bad field or cut short."""
    fields = [draw(st.sampled_from(_CRITEO_FIELD[kind][0])) for kind in _KINDS]
    damage = draw(st.sampled_from(["none"] * 6 + ["field", "cut"]))
    if damage == "field":
        at = draw(st.integers(0, len(fields) - 1))
        fields[at] = draw(st.sampled_from(_CRITEO_FIELD[_KINDS[at]][1]))
    elif damage == "cut":
        fields = fields[: draw(st.integers(0, len(fields) - 1))]
    return "\t".join(fields)


@CASES
@given(st.lists(criteo_lines(), max_size=30), st.sampled_from(["none"] * 4 + ["truncate"]))
def test_criteo_files_load_valid_data_or_are_refused_naming_the_file(tmp_path: Path, lines, damage: str) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    if damage == "truncate" and data:
        data = data[: len(data) // 2]
    path = tmp_path / f"day-{hashlib.sha256(data).hexdigest()[:12]}.tsv"
    path.write_bytes(data)
    _check_load(DataConfig(dataset="criteo", data_path=str(path), cache_dir=str(tmp_path / "cache"), criteo_hash_size=50))


def test_parsing_decides_the_cache_entry_and_the_log_names_the_given_file(tmp_path: Path) -> None:
    frame = pd.DataFrame({"user_id": [1, 2, 3, 4, 5] * 4, "item_id": [7, 8, 9, 7, 8] * 4, "label": [0, 1] * 10})
    csv = tmp_path / "events.csv"
    frame.to_csv(csv, index=False)
    cfg = DataConfig(dataset="interactions", data_path=str(csv), cache_dir=str(tmp_path / "cache"))
    load_dataset(cfg, log=lambda _: None)
    disguised = tmp_path / "events.parquet"  # the CSV's bytes under another suffix: parsed as Parquet, refused
    disguised.write_bytes(csv.read_bytes())
    with pytest.raises(ValueError, match=f"cannot read --data_path {re.escape(str(disguised))}"):
        load_dataset(replace(cfg, data_path=str(disguised)), log=lambda _: None)
    copy = tmp_path / "copy.csv"  # same bytes, same parsing: the cache entry is shared, the log names this file
    copy.write_bytes(csv.read_bytes())
    notes: List[str] = []
    load_dataset(replace(cfg, data_path=str(copy)), log=notes.append)
    assert any("from cache" in n and f"(source {copy})" in n for n in notes), notes
    assert not any(str(csv) in n for n in notes), notes


def test_data_checks_name_the_flag_and_the_reason(tmp_path: Path) -> None:
    (tmp_path / "folder.csv").mkdir()
    with pytest.raises(ValueError, match="--data_path .*folder.csv is a folder without a preprocessed dataset"):
        load_dataset(DataConfig(dataset="interactions", data_path=str(tmp_path / "folder.csv")), log=lambda _: None)
    with pytest.raises(FileNotFoundError, match="--data_path .*nope.csv does not exist"):
        DataConfig(dataset="interactions", data_path=str(tmp_path / "nope.csv")).check_paths()
    words = tmp_path / "words.csv"
    words.write_text("user_id,item_id,label\n1,2,yes\n3,4,no\n")
    with pytest.raises(ValueError, match=r"no usable rows: of 2 rows, 2 have no numeric, finite --label_col 'label' value"):
        load_dataset(DataConfig(dataset="interactions", data_path=str(words), cache_dir=str(tmp_path)), log=lambda _: None)
    tiny = tmp_path / "tiny.csv"
    tiny.write_text("user_id,item_id,label\n1,2,1\n3,4,0\n")
    data = load_dataset(DataConfig(dataset="interactions", data_path=str(tiny), cache_dir=str(tmp_path)), log=lambda _: None)
    with pytest.raises(ValueError, match=r"the test split of interactions is empty .*raise --test_fraction"):
        check_splits(data)
    # A split smaller than the world size is fine: the rank without rows gets weight-0 padding.
    data.splits["test"] = data.splits["train"].take(np.array([0]))
    check_splits(data)
    padding = next(iter(BatchLoader(data, "test", 2, rank=1, world_size=2)))
    assert padding.weights.tolist() == [0.0]
