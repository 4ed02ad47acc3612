"""The benchmarks' layout: speed benchmarks claim a ratio, analyses refuse to run without their folders,
nothing under benchmarks/ imports from tests/, and ``make bench``'s runner reports each benchmark."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.tools.claims import claim, read_claims
from benchmarks.tools.run_all import Outcome, run, summary

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def test_nothing_under_benchmarks_imports_from_tests():
    found = [(p.name, m) for p in BENCHMARKS.rglob("*.py") for m in _imports(p) if m.split(".")[0] == "tests"]
    assert found == []


def test_every_speed_benchmark_claims_a_ratio():
    scripts = sorted(BENCHMARKS.glob("bench_*.py"))
    assert len(scripts) >= 10
    for script in scripts:
        calls = [n for n in ast.walk(ast.parse(script.read_text())) if isinstance(n, ast.Call)]
        assert any(getattr(c.func, "id", None) == "claim" for c in calls), f"{script.name} prints no claim line"


@pytest.mark.parametrize("script", sorted(p.name for p in (BENCHMARKS / "analysis").glob("*.py")))
def test_an_analysis_without_its_folders_prints_its_usage_and_exits_2(script):
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "analysis" / script)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"usage: {script}") and "required" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_claim_lines_are_read_back(capsys):
    print("a table line = 3x")  # not a claim
    claim("frozen tables: CPU time per step, bare / frozen", 1.2345)
    claim("fused lookup: all-to-alls per step, separate / fused", 3)
    assert read_claims(capsys.readouterr().out.splitlines()) == [
        ("frozen tables: CPU time per step, bare / frozen", "1.23x"),
        ("fused lookup: all-to-alls per step, separate / fused", "3x"),
    ]


def test_the_runner_echoes_a_benchmark_and_sums_it_up(tmp_path, capsys):
    ok = tmp_path / "bench_ok.py"
    ok.write_text(f"import sys\nsys.path.insert(0, {str(BENCHMARKS.parent)!r})\n"
                  "from benchmarks.tools.claims import claim\nprint('table')\nclaim('x / y', 2.5)\n")
    failing = tmp_path / "bench_fails.py"
    failing.write_text("raise SystemExit(3)\n")
    outcomes = [run(ok), run(failing)]
    assert "table\nclaim: x / y = 2.5x\n" in capsys.readouterr().out
    assert [(o.name, o.returncode, o.claims) for o in outcomes] == [("bench_ok.py", 0, [("x / y", "2.5x")]),
                                                                   ("bench_fails.py", 3, [])]
    lines = summary([Outcome("bench_ok.py", 0, [("x / y", "2.5x")], 61.0), Outcome("bench_fails.py", 3, [], 2.0)])
    assert lines.splitlines() == [
        "make bench: 2 benchmarks, 1.1 min",
        "  bench_ok.py         61 s  2.5x x / y",
        "  bench_fails.py       2 s  FAILED (exit 3); no claim printed",
    ]
