"""Where a training launch's seconds before its first step go, and what a search segment in a shared job pays.

Starts ``torchrun --nproc_per_node 2`` on this script (as TorchX ``local_cwd`` starts the app)
``--repeats`` times; rank 0 times each phase of the app's start: torchrun until Python
runs this file, importing torch and TorchRec, importing the trainer, the process group,
the ``Trainer``'s construction by part (the run folder, the data, the loaders, the sharded
model: planner and ``DistributedModelParallel``, the schedule, the pipeline, ...), then
the first training step. In the same job it then builds a second ``Trainer`` on the same
data (what the search's shared job pays per segment: ``search/worker.py``). Prints the
median of each phase over the repeats.

Usage::

    python benchmarks/bench_launch_startup.py --repeats 3 -- --dataset movielens --val_fraction 0.1

Without app flags it runs MovieLens-100k (``QUICK_FLAGS``). Its claim: a fresh launch's seconds
before its first step against a segment's ``Trainer()`` in a shared job.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.tools.claims import claim  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
QUICK_FLAGS = ["--dataset", "movielens", "--val_fraction", "0.1", "--train_eval_rows", "0"]
BEFORE_FIRST_STEP = ("torchrun until Python runs", "import torch, torchrec", "import the trainer", "process group",
                     "Trainer() in all")  # fmt: skip
PHASES = ("open_checked_run", "prepare_data", "build_loaders", "build_sharded_model", "build_schedule", "build_remedies",
          "build_pipeline", "build_validator", "describe_run")  # fmt: skip


def child(out: str, flags: List[str]) -> None:
    """Under torchrun: time the phases (rank 0 writes them to ``out``)."""
    started = time.time()
    marks: Dict[str, float] = {"torchrun until Python runs": started - float(os.environ["BENCH_T0"])}
    t = time.time()
    import torch  # noqa: F401
    import torchrec  # noqa: F401

    marks["import torch, torchrec"] = time.time() - t
    t = time.time()
    sys.path.insert(0, str(REPO))
    import dlrm_multiepoch.train.trainer as trainer_module
    from dlrm_multiepoch.distributed import init_distributed
    from dlrm_multiepoch.train.config import parse_config

    marks["import the trainer"] = time.time() - t
    t = time.time()
    env = init_distributed()
    marks["process group"] = time.time() - t
    for name in PHASES:  # time each part the Trainer builds (a wrapper in this process only)
        original = getattr(trainer_module, name)

        def timed(*a, _f=original, _n=name, **k):  # type: ignore[no-untyped-def]
            t0 = time.time()
            result = _f(*a, **k)
            marks[f"Trainer: {_n}"] = marks.get(f"Trainer: {_n}", 0.0) + time.time() - t0
            return result

        setattr(trainer_module, name, timed)
    cfg = parse_config(flags)
    t = time.time()
    trainer = trainer_module.Trainer(cfg, env)
    marks["Trainer() in all"] = time.time() - t
    t = time.time()
    trainer.train()  # --stop_at_epoch: a few steps
    marks["train 0.1 epoch (steps, an evaluation, a checkpoint)"] = time.time() - t
    t = time.time()
    again = parse_config([*flags[:-1], flags[-1] + "-again"])  # another run folder, the same data
    trainer_module.Trainer(again, env, data=trainer.data)
    marks["a segment's Trainer() in a shared job"] = time.time() - t
    if env.is_main:
        Path(out).write_text(json.dumps(marks))
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args, flags = parser.parse_known_args()
    flags = [f for f in flags if f != "--"] or QUICK_FLAGS
    if args.child:
        child(args.child, flags)
        return
    runs: List[Dict[str, float]] = []
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "marks.json")
            run = ["--tensorboard_dir", tmp, "--epochs", "3", "--stop_at_epoch", "0.1", "--run_name", "r"]
            command = [os.path.join(os.path.dirname(sys.executable), "torchrun"), "--nproc_per_node", "2",
                       "--rdzv_backend", "c10d", "--rdzv_endpoint", "localhost:0", __file__, "--child", out,
                       "--", *flags, "--no-progress_bar", *run]  # fmt: skip
            env = {**os.environ, "BENCH_T0": str(time.time()), "OMP_NUM_THREADS": "1"}
            subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            runs.append(json.loads(Path(out).read_text()))
    print(f"load average: {os.getloadavg()[0]:.1f}; {args.repeats} launches; median seconds per phase\n")
    print("| phase | s |\n|---|---|")
    for name in runs[0]:
        print(f"| {name} | {statistics.median(r.get(name, 0.0) for r in runs):.2f} |")
    launch = statistics.median(sum(r[name] for name in BEFORE_FIRST_STEP) for r in runs)
    segment = statistics.median(r["a segment's Trainer() in a shared job"] for r in runs)
    print(f"\nbefore the first step: a launch {launch:.2f} s, a segment in a shared job {segment:.2f} s")
    claim("a search segment's start: fresh launch / segment in the shared job", launch / segment)


if __name__ == "__main__":
    main()
