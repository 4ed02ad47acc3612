"""Wall time of the schedule search against a sweep of the same candidates, side by side in one run.

For each setup and seed, on the same machine one after the other (seed by seed, so that a
drifting load weighs alike on each): ``dlrm-multiepoch sweep`` of the search's candidates
(joint over E + 1 epochs, delayed, auto, early, reinit, window@W: each from scratch to its
end, one TorchX launch each) and ``dlrm-multiepoch search`` of them
(``--jobs shared``: one training job trains every branch segment), both ``-j 1x2`` on
``local_cwd``, the same seeds. Prints per setup: wall time of each command, launches
(training jobs started) per seed, seconds from a launch to its training's first step
(per seed, summed over its launches or segments), trained steps, and the search's wall time
as a share of the sweep's. ``--check_per_segment SETUPS`` also runs the search with a launch per
segment (``--jobs per_segment``, how it ran before) and checks that both deploy the same
checkpoint with bitwise the same validation figures and curves.

Setups: ``ml-time`` (MovieLens-100k, time split), ``ml-random`` (the same ratings as one CSV,
random split), ``bx-random`` (Book-Crossing, random split). The datasets are prepared before any
timing (both commands read the same cache). Runs under ``nice`` on a shared machine: report its
load beside the figures.

Usage::

    nice -n 10 python benchmarks/quality/search_wall_time.py /tmp/wall --setups ml-time,ml-random,bx-random \\
        --seeds 0,1,2 --check_per_segment ml-time,ml-random
"""

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dlrm_multiepoch.search.candidates import candidate_tree  # noqa: E402
from dlrm_multiepoch.search.command import main as search_main  # noqa: E402
from dlrm_multiepoch.sweep import launch as sweep_launch  # noqa: E402
from dlrm_multiepoch.sweep.command import main as sweep_main  # noqa: E402

COMMON = ["--val_fraction", "0.1", "--no-progress_bar", "--train_eval_rows", "0"]
SETUPS = {
    "ml-time": ["--dataset", "movielens", *COMMON],  # MovieLens-100k, time split
    "bx-random": ["--dataset", "bookcrossing", *COMMON],  # Book-Crossing, random split
    # MovieLens-100k, random split: its ratings as one CSV (benchmarks/tools/movielens_csv.py), --data_path added
    "ml-random": [
        "--dataset", "interactions", "--label_col", "rating", "--task_thresholds", "like:4,love:5",
        "--categorical_cols", "age_bucket,gender,occupation,zip,year,genre", "--dense_cols", "age_years,year_num",
        *COMMON,
    ],
}  # fmt: skip
PER_SEGMENT = "search, a launch per segment"
LAUNCHED: Dict[str, float] = {}  # the sweep's run -> when its launch was scheduled (this benchmark's probe)


def _probe_launches() -> None:
    """Record when the sweep schedules each run's launch (to time its first step); a benchmark-only wrapper."""
    original = sweep_launch.SweepLauncher._launch_and_wait

    def timed(self: Any, runner: Any, run: Any, tag: str) -> str:
        LAUNCHED[os.path.join(self.plan.experiment_dir, run.name)] = time.time()
        return original(self, runner, run, tag)

    sweep_launch.SweepLauncher._launch_and_wait = timed  # type: ignore[method-assign]


def _prepare(setup: str, out: Path) -> List[str]:
    """The setup's flags, its data written (ml-random's CSV) and encoded into the cache before any timing."""
    from dlrm_multiepoch.data.load import load_dataset
    from dlrm_multiepoch.train.config import parse_config

    flags = list(SETUPS[setup])
    if setup == "ml-random":
        from benchmarks.tools.movielens_csv import movielens_frame
        from dlrm_multiepoch.data.fetch import default_cache_dir, fetch_wheel
        from dlrm_multiepoch.data.movielens import MOVIELENS_WHEEL

        csv = out / "ml-100k.csv"
        movielens_frame(fetch_wheel(MOVIELENS_WHEEL, default_cache_dir())).to_csv(csv, index=False)
        flags += ["--data_path", str(csv)]
    load_dataset(parse_config(flags).data, log=lambda _: None)
    return flags


def _run(main: Any, argv: List[str], log: Path) -> float:
    start = time.perf_counter()
    with open(log, "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        code = main(argv)
    seconds = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"{' '.join(argv[:2])} exited {code}: see {log}")
    return seconds


def _summary(run_dir: Path) -> Dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def sweep_figures(folder: Path, seeds: List[int]) -> Tuple[float, float, int]:
    """Launches per seed, seconds before the first step per seed, trained steps per seed."""
    runs = [p for p in folder.iterdir() if (p / "summary.json").is_file()]
    waits = [_summary(r)["train_started_at"] - LAUNCHED[str(r)] for r in runs if str(r) in LAUNCHED]
    steps = sum(max(e["step"] for e in _summary(r)["evaluations"]) for r in runs)
    return len(runs) / len(seeds), sum(waits) / len(seeds), steps // len(seeds)


def search_figures(folder: Path, seeds: List[int]) -> Tuple[float, float, int]:
    record = json.loads((folder / "search.json").read_text())
    costs = [record["seeds"][str(s)]["cost"] for s in seeds]
    n = len(seeds)
    return (sum(c["launches"] for c in costs) / n, sum(c["before_first_step_s"] for c in costs) / n,
            sum(c["trained_steps"] for c in costs) // n)  # fmt: skip


def same_decisions(a: Path, b: Path, seeds: List[int]) -> List[str]:
    """What differs between two searches' decisions: the deployed branch, epoch, validation figure, curves."""
    ra, rb = (json.loads((f / "search.json").read_text())["seeds"] for f in (a, b))
    diffs = []
    for seed in map(str, seeds):
        da, db = ra[seed]["deploy"], rb[seed]["deploy"]
        for key in ("branch", "epoch", "val_metric", "test_auc"):
            if da[key] != db[key]:
                diffs.append(f"seed {seed}: deploy {key} {da[key]} != {db[key]}")
        for name, branch in ra[seed]["branches"].items():
            if branch["curve"] != rb[seed]["branches"][name]["curve"]:
                diffs.append(f"seed {seed}: {name}'s curve differs")
    return diffs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder for the experiments (emptied first)")
    parser.add_argument("--setups", default="ml-time,bx-random", help=f"comma-separated, of {', '.join(SETUPS)}")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("-j", default="1x2")
    parser.add_argument(
        "--check_per_segment", default="", help="setups (comma-separated) also searched with a launch per segment"
    )
    args = parser.parse_args()
    unknown = sorted(set(args.setups.split(",")) - set(SETUPS))
    if unknown:
        parser.error(f"--setups: unknown {', '.join(unknown)}; the setups are {', '.join(SETUPS)}")
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    _probe_launches()
    print(f"load average before: {os.getloadavg()[0]:.1f}; seeds {args.seeds}; -j {args.j}; --epochs {args.epochs}")
    print("\n| setup | command | wall s | launches / seed | s before first step / seed | trained steps / seed | "
          "share of the sweep's wall time |\n|---|---|---|---|---|---|---|")  # fmt: skip
    for setup in args.setups.split(","):
        flags = _prepare(setup, out)
        tree = candidate_tree(args.epochs)
        windows = [c.name.split("@")[1] for c in tree if c.name.startswith("window@")]
        presets = [c.name for c in tree if not c.name.startswith("window@")]
        dirs = {"sweep": out / setup / "sweep", "search": out / setup / "search"}
        if setup in args.check_per_segment.split(","):
            dirs[PER_SEGMENT] = out / setup / "search-per-segment"
        walls = {name: 0.0 for name in dirs}
        loads = []
        for seed in seeds:  # seed by seed, the commands in turn: the machine's load drifts alike for each
            own = ["--epochs", str(args.epochs), "--seeds", str(seed), "-j", args.j]
            loads.append(os.getloadavg()[0])
            for name, folder in dirs.items():
                log = out / f"{setup}-s{seed}-{folder.name}.log"
                if name == "sweep":
                    argv = [str(folder), *presets, "--windows", ",".join(windows), *own, "--", *flags]
                    walls[name] += _run(sweep_main, argv, log)
                else:
                    jobs = ["--jobs", "per_segment"] if name == PER_SEGMENT else []
                    walls[name] += _run(search_main, [str(folder), *jobs, *own, "--", *flags], log)
        for name, folder in dirs.items():
            launches, before, steps = sweep_figures(folder, seeds) if name == "sweep" else search_figures(folder, seeds)
            share = f"{walls[name] / walls['sweep']:.0%}" if name != "sweep" else ""
            print(f"| {setup} | {name} | {walls[name]:.0f} | {launches:.1f} | {before:.1f} | {steps} | {share} |",
                  flush=True)  # fmt: skip
        print(f"\n{setup}: load average at each seed's start: {', '.join(f'{x:.1f}' for x in loads)}")
        if len(dirs) > 2:
            diffs = same_decisions(dirs["search"], dirs[PER_SEGMENT], seeds)
            print(f"{setup}: the shared job and a launch per segment deploy the same checkpoints, bitwise the same "
                  f"validation figures and curves: {'yes' if not diffs else 'NO: ' + '; '.join(diffs)}\n")  # fmt: skip
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
