"""``compare`` (and the search) where the world is messy (issue 35, part B, rows 5-8, 14, 17): a damaged metric in
a branch's ``summary.json``, a truncated ``search.json``, a run folder whose name is not UTF-8, a read-only
experiment folder, a full disk under ``--out``, a folder with one run, a path that is a file.

Never a traceback: the damaged record is named (file and field) or said with what compare does about it; a
read-only folder is compared with ``--out`` elsewhere in full, and in place prints its table and one line.
Run folders as the app writes them (``tests/run_writer.py``); a search folder from simulated launches
(``tests/search_sim.py``); the read-only folder is the kernel's (a bind mount for root, permissions otherwise).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fs_faults import NOT_UTF8, FullDiskAt, read_only
from tests.fuzz_settings import folder_bytes
from tests.run_writer import hparams_sessions, run_compare, write_run
from tests.search_sim import ARGS, deployed, finished_search, run_search

@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    return finished_search(tmp_path_factory)


def _runs(exp: Path, names=("joint-s0", "delayed-s0")) -> None:
    """Finished runs of two strategies with a validation split (delayed wins on validation)."""
    for i, name in enumerate(names):
        write_run(exp / name, [0.70 + 0.01 * i, 0.71 + 0.02 * i], val_auc=[0.69 + 0.01 * i, 0.70 + 0.02 * i])


@pytest.mark.parametrize(
    "where, value, says",
    [
        ("val", {}, "evaluations.4.val is {}, expected an object of each task's metrics"),  # row 5
        ("val", [], "evaluations.4.val is [], expected an object of each task's metrics"),  # row 5
        ("cal_ne", "0.1", "evaluations.4.val.like.cal_ne is '0.1', expected a number from 0, or null where undefined"),
        ("cal_ne", -1, "evaluations.4.val.like.cal_ne is -1, expected a number from 0, or null where undefined"),
        ("auc", float("nan"), "evaluations.4.val.like.auc is NaN, expected a number from 0 to 1, or null where undefined"),
    ],
)
def test_a_damaged_validation_metric_is_named_by_the_search_andrun_compare(searched, tmp_path, where, value, says):
    """Rows 5 and 14: ``"val": {}`` or ``[]`` (a ZeroDivisionError in both) and a metric edited to a string (read
    as undefined without a word: the deploy moved), a negative cal_ne or a NaN AUC (what the app never writes:
    ranked, they would move the deploy) in the deployed branch's ``summary.json``."""
    exp = tmp_path / "exp"
    shutil.copytree(searched, exp)
    path = exp / "reinit-s0" / "summary.json"
    summary = json.loads(path.read_text())
    if where == "val":
        summary["evaluations"][4]["val"] = value
    else:
        summary["evaluations"][4]["val"]["like"][where] = value
    path.write_text(json.dumps(summary))
    line = f"{path}: {says} (damaged); move the file aside: the branch's next launch rewrites it from its newest checkpoint"
    code, out, sim = run_search([str(exp), *ARGS])
    assert code == 1 and sim.trained == [] and "Traceback" not in out
    assert out.rstrip().splitlines()[-1] == f"search: {line}"
    code, _, err = run_compare(str(exp))
    assert code == 2 and "Traceback" not in err and err.rstrip().splitlines()[-1] == f"dlrm-multiepoch compare: error: {line}"
    path.rename(path.with_name("summary.json.aside"))  # as the line says: the rerun deploys what it did before
    code, out, sim = run_search([str(exp), *ARGS])
    assert code == 0 and deployed(exp) == deployed(searched) and sim.trained == [], out


def test_compare_says_a_truncated_search_record_is_damaged_and_names_no_winner(searched, tmp_path):
    """Row 6: it was read as a sweep without a word (a winner on validation AUC, cut branches "interrupted")."""
    exp = tmp_path / "exp"
    shutil.copytree(searched, exp)
    record = exp / "search.json"
    record.write_text(record.read_text()[:100])
    code, out, err = run_compare(str(exp))
    assert code == 0 and "Traceback" not in err
    assert f"**The schedule search's record is damaged** ({record} is not valid JSON (100 bytes" in out
    assert "Rerun the same `dlrm-multiepoch search` command: it rebuilds search.json from the run folders" in out
    assert "wins on" not in out and "like: no winner: this is a schedule search's folder whose search.json is damaged" in out


def test_a_run_folder_whose_name_is_not_utf8_is_named_with_escapes_and_left_out(tmp_path):
    """Row 7 (a UnicodeEncodeError traceback), as a console with a strict UTF-8 encoding meets it: TensorBoard's
    reader opens no file under such a name, so the run is left out, named, and the others compared."""
    exp = tmp_path / "exp"
    _runs(exp, ("joint-s0", "delayed-s0", "reinit-s0"))
    os.rename(exp / "reinit-s0", exp / NOT_UTF8)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    done = subprocess.run(
        [sys.executable, "-m", "dlrm_multiepoch.cli", "compare", str(exp)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    left_out = (
        "- run\\xff-s0: its folder's name is not UTF-8: TensorBoard reads no event file there; rename the folder "
        f"({exp}/run\\xff-s0)"
    )
    assert left_out in done.stdout and "delayed wins on validation" in done.stdout
    assert left_out in (exp / "compare" / "comparison.md").read_text()
    (tmp_path / NOT_UTF8).mkdir()  # the experiment folder's own name
    code, _, err = run_compare(str(tmp_path / NOT_UTF8))
    assert code == 2 and err.rstrip().endswith(
        "run\\xff-s0: its name is not UTF-8, and TensorBoard reads no event file under such a path; rename it"
    )


def test_a_read_only_experiment_is_compared_elsewhere_in_full_and_in_place_prints_its_table(tmp_path):
    """Row 8: an ``OSError`` traceback, with or without ``--out`` (it worked only with ``--no-hparams``)."""
    exp, out = tmp_path / "exp", tmp_path / "report"
    _runs(exp)
    before = folder_bytes(exp)
    with read_only(exp):
        code, table, err = run_compare(str(exp))
        assert code == 1 and "delayed wins on validation" in table and "Traceback" not in err
        assert err.strip() == (
            f"compare: the report folder {exp}/compare: cannot write into {exp} (where {exp}/compare is to be "
            "created): it is read-only or not yours; make it writable or use another folder; the table is above "
            "(pass --out FOLDER to write its files elsewhere)"
        )
        assert folder_bytes(exp) == before
        code, text, err = run_compare(str(exp), "--out", str(out))
        assert code == 0 and err == "" and folder_bytes(exp) == before
    assert text.startswith(table)
    assert sorted(p.name for p in out.iterdir()) == ["comparison.csv", "comparison.md", "hparams", "test_auc.png"]
    assert f"  {out}/hparams  (tensorboard --logdir {out}/hparams; HPARAMS tab: {exp} is read-only)" in text
    sessions, scalars = hparams_sessions(out / "hparams")  # each session with its run's metrics beside it
    assert {run: s["strategy"] for run, s in sessions.items()} == {"joint-s0": "joint", "delayed-s0": "delayed"}
    assert scalars["delayed-s0"]["test/like/auc"] == pytest.approx(0.73) and "compare/deployed_val_auc_like" in scalars["delayed-s0"]


def test_a_full_disk_under_out_names_the_file_after_the_table(tmp_path):
    exp, out = tmp_path / "exp", tmp_path / "report"
    _runs(exp)
    with FullDiskAt(out, at=1):
        code, table, err = run_compare(str(exp), "--out", str(out))
    assert code == 1 and "delayed wins on validation" in table
    assert err.strip() == f"compare: {out}/comparison.md: the disk is full (No space left on device); free space, then rerun the same command"


def test_one_run_names_no_winner_and_a_file_is_not_an_experiment(tmp_path):
    """Row 17: a folder with one run named a "winner"; a path that is a file "does not exist"."""
    exp = tmp_path / "exp"
    _runs(exp, ("joint-s0",))
    code, out, _ = run_compare(str(exp))
    assert code == 0 and "winner**" not in out and " wins " not in out
    assert "like: no winner: joint is the only strategy with a figure (validation AUC 0.7000, test AUC 0.7100): nothing to" in out
    code, _, err = run_compare(str(exp / "joint-s0" / "summary.json"))
    assert code == 2 and err.rstrip().endswith(
        f"error: {exp}/joint-s0/summary.json is a file, not an experiment folder (a folder of run folders)"
    )
