"""A search's launches, simulated: run folders written as the training app writes them, from fixed curves.

Unit tests of the search's decisions, records and refusals use :class:`SimulatedLauncher`
in place of TorchX launches (the real path: ``tests/test_search_runs.py``). It is the
search's own :class:`~dlrm_multiepoch.search.launches.BranchLauncher` (flags, fork
checkpoint, launch records) whose sweep launch is replaced by :func:`train`: the run
folder a trainer leaves after ``--stop_at_epoch``: ``summary.json`` (config, every
evaluation, ``started_from``, the end's wall time and ``auto``'s ``best``), ``sweep.json``,
and a checkpoint after each whole epoch and pause: a shard file and a ``trainer_state.json``
holding the progress, the evaluations so far and the shard's size and sha256. Like the
trainer it records the identity of its data (:func:`~dlrm_multiepoch.data.identity.data_identity`,
in the summary and each checkpoint), resumes from its newest intact checkpoint (or its
parent's, ``--start_from``), refuses to resume onto other data (its launch fails, one line),
skips a finished run, rewrites an unreadable ``summary.json`` from its checkpoint (the app
rewrites it after every evaluation, before that evaluation's checkpoint), and records every
step range it trains and saves (``trained``): nothing saved may be trained twice. Its writes are atomic as the app's
(a record replaced whole, a checkpoint renamed once complete), so a write that fails (a full
disk) fails its launch and loses only what was not saved yet.

Validation AUC of candidate ``c`` after ``p`` epochs: :data:`AUC` per whole epoch, linear
in between (a branch's own values start after its fork: before, it is its parent); cal_ne
is ``1 - AUC``; ``love`` is 0.02 below ``like``. ``auto`` stops itself at 2.5 epochs with its
best weights from 2.2.
"""

import io
import json
import os
import signal
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.record_writer import RecordWriter
from torchx.runner import get_runner

from dlrm_multiepoch.command_faults import guarded
from dlrm_multiepoch.data.identity import IDENTITY, data_identity, identity_changes
from dlrm_multiepoch.file_digests import file_digest
from dlrm_multiepoch.run_files import checkpoint_problem, checkpoints_dir, complete_checkpoints, run_folder_name, step_of
from dlrm_multiepoch.search.launches import BranchLauncher
from dlrm_multiepoch.sweep.jobs import SweepInterrupted
from dlrm_multiepoch.sweep.manifest import update_manifest
from dlrm_multiepoch.launch_options import split_at_dashes
from dlrm_multiepoch.sweep.plan import RunSpec, build_plan, run_state
from dlrm_multiepoch.sweep.strategies import Strategy
from dlrm_multiepoch.train.config import parse_config

SPE = 10  # steps per epoch
SHARD = "__0_0.distcp"  # each checkpoint's one shard file
AUC = {
    "joint": {0: 0.5, 1: 0.610, 2: 0.598, 3: 0.590, 4: 0.585},
    "delayed": {0: 0.5, 1: 0.540, 2: 0.552, 3: 0.640},
    "auto": {0: 0.5, 1: 0.545, 2: 0.600, 3: 0.605},
    "early": {1: 0.610, 2: 0.604, 3: 0.601},
    "reinit": {1: 0.610, 2: 0.625, 3: 0.636},
    "window@1": {1: 0.540, 2: 0.630, 3: 0.632},
}
AUTO_STOP, AUTO_BEST = 25, 22  # steps
COMMON = ["--dataset", "movielens", "--val_fraction", "0.1"]
ARGS = ["--epochs", "3", "--", *COMMON]  # the search of the tests: 6 candidates, 3 epochs


def auc(name: str, point: float) -> float:
    curve = AUC[name]
    low = max(e for e in curve if e <= point)
    high = min((e for e in curve if e >= point), default=low)
    if high == low:
        return curve[low]
    return curve[low] + (curve[high] - curve[low]) * (point - low) / (high - low)


def metrics(name: str, point: float, one_class: Sequence[str] = ()) -> Dict[str, Any]:
    out = {}
    for task, shift in (("like", 0.0), ("love", -0.02)):
        a = auc(name, point) + shift
        defined = task not in one_class
        out[task] = {"auc": a if defined else None, "cal_ne": 1 - a if defined else None, "logloss": 0.6}
    return out


def _write(path: str, value: Any) -> None:
    """Atomically, as the app writes its records: a failed write (a full disk) leaves the old file."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(value, f)
    os.replace(path + ".tmp", path)


class _Events:
    """A launch's event file, written as each scalar comes (TensorBoard's writer writes from a thread, which
    prints its own traceback when the disk is full; the app's console never shows its log's)."""

    def __init__(self, run_dir: str) -> None:
        os.makedirs(run_dir, exist_ok=True)
        name = f"events.out.tfevents.{time.time():.0f}.sim.{os.getpid()}.{time.monotonic_ns()}"
        self.file = open(os.path.join(run_dir, name), "wb", buffering=0)  # nothing left to flush when it fails
        self.records = RecordWriter(self.file)
        self.records.write(Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)])
        self.records.write(Event(wall_time=time.time(), step=step, summary=summary).SerializeToString())

    def close(self) -> None:
        self.file.close()


def read_state(checkpoint: str) -> Optional[Dict[str, Any]]:
    """A checkpoint's state as the app checks it on load (its files' sizes and sha256, its format, step, progress,
    evaluations and data identity); None when it is damaged: the app passes it over for an older one
    (``--resume``), or refuses it (``--start_from``)."""
    if checkpoint_problem(checkpoint) is not None:
        return None
    try:
        with open(os.path.join(checkpoint, "trainer_state.json")) as f:
            state = json.load(f)
        parts = state["parts"]
        intact = state["format"] == 2 and state["step"] == step_of(checkpoint) == parts["progress"]["step"]
        intact = intact and isinstance(parts["metrics"]["evaluations"], list)
        started = parts["metrics"].get("started_from")
        intact = intact and (started is None or isinstance(started, dict)) and isinstance(state[IDENTITY], dict)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return state if intact and type(state["step"]) is int else None


def _state(run_dir: str) -> Optional[Dict[str, Any]]:
    """The newest intact checkpoint's state, as the trainer's ``--resume auto`` finds it (damaged ones passed over)."""
    for _, path in reversed(complete_checkpoints(checkpoints_dir(run_dir))):
        state = read_state(path)
        if state is not None:
            return state
    return None


def _save(folder: str, state: Dict[str, Any]) -> None:
    """A checkpoint as the trainer saves it: a shard, then the state file with the shard's size and sha256, in a
    temporary folder renamed once complete (a save that fails, a full disk, leaves no checkpoint)."""
    saving = folder + ".tmp"
    os.makedirs(saving, exist_ok=True)
    shard = os.path.join(saving, SHARD)
    with open(shard, "w") as f:
        f.write(json.dumps(state["parts"]["progress"]) * 40)  # a few KB, other bytes at each step
    files = {SHARD: {"bytes": os.path.getsize(shard), "sha256": file_digest(shard)}}
    _write(os.path.join(saving, "trainer_state.json"), {**state, "files": files})
    os.replace(saving, folder)


def train(run_dir: str, name: str, flags: Sequence[str], trained: List[Tuple[str, int, int]], one_class=()) -> None:
    """What the training app leaves in ``run_dir`` for ``flags`` (see the module docstring)."""
    cfg = parse_config(list(flags), check_paths=True)  # a --start_from that is not there fails, as the app's does
    config = json.loads(json.dumps(cfg.to_dict()))
    identity = data_identity(cfg.data)
    start_from = cfg.checkpoint.start_from
    state, started = _state(run_dir), None
    if state is not None and identity_changes(state[IDENTITY], identity):
        raise ValueError(f"--resume: the checkpoint was trained on other data: {identity_changes(state[IDENTITY], identity)}")
    if state is None and start_from:
        problem = checkpoint_problem(start_from)  # the trainer verifies the checkpoint it branches from
        if problem is not None:
            raise ValueError(f"--start_from {start_from!r}: {problem}")
        state = read_state(start_from)
        if state is None:
            raise ValueError(f"--start_from {start_from!r}: its trainer_state.json is damaged")
        started = {"path": start_from, "step": state["step"]}
        if identity_changes(state[IDENTITY], identity):  # a fine-tuning, as the trainer records it
            started["other_data"] = identity_changes(state[IDENTITY], identity)
    step = state["step"] if state else 0
    evaluations = list(state["parts"]["metrics"]["evaluations"]) if state else []
    started = started or (state["parts"]["metrics"].get("started_from") if state else None)
    stop = cfg.checkpoint.stop_at_epoch
    target = round(stop * SPE) if stop else cfg.epochs * SPE
    stops_itself = name == "auto" and target >= AUTO_STOP
    target = min(target, AUTO_STOP) if name == "auto" else target
    saved = step  # the steps whose checkpoint was written: what a launch that fails (a full disk) keeps
    writer = _Events(run_dir)  # the event files compare reads: this launch's own evaluations
    try:
        for s in range(step + 1, target + 1):
            if s % SPE and s != target:
                continue
            evaluations.append({"epoch": s / SPE, "step": s, "val": metrics(name, s / SPE, one_class),
                                "test": metrics(name, s / SPE)})  # fmt: skip
            writer.add_scalar("eval/epoch", s / SPE, s)
            for split in ("val", "test"):
                for task, values in evaluations[-1][split].items():
                    for metric, value in values.items():
                        writer.add_scalar(f"{split}/{task}/{metric}", float("nan") if value is None else value, s)
            summary: Dict[str, Any] = {"config": config, "evaluations": evaluations, IDENTITY: identity}
            if started:
                summary["started_from"] = started
            _write(os.path.join(run_dir, "summary.json"), summary)  # after each evaluation, before its checkpoint
            parts = {"progress": {"step": s, "epoch": s // SPE, "batch_in_epoch": s % SPE},
                     "metrics": {"evaluations": list(evaluations), "started_from": started}}  # fmt: skip
            state = {"format": 2, "step": s, "config": config, "parts": parts, IDENTITY: identity}
            _save(os.path.join(checkpoints_dir(run_dir), f"step_{s}"), state)
            saved = s
        summary = {"config": config, "evaluations": evaluations, IDENTITY: identity}
        if started:
            summary["started_from"] = started
        if stops_itself or target >= cfg.epochs * SPE:
            summary["wall_time_s"] = 1.0
        if stops_itself:
            best = AUTO_BEST / SPE
            summary["best"] = {"epoch": best, "step": AUTO_BEST, "val": metrics(name, best, one_class),
                               "test": metrics(name, best)}  # fmt: skip
            for split in ("val", "test"):
                for task, values in summary["best"][split].items():
                    value = float("nan") if values["auc"] is None else values["auc"]
                    writer.add_scalar(f"best/{split}/{task}/auc", value, target)
            parts = {"progress": {"step": AUTO_BEST, "epoch": AUTO_BEST // SPE, "batch_in_epoch": AUTO_BEST % SPE}}
            best_state = {"format": 2, "step": AUTO_BEST, "config": config, "parts": parts, IDENTITY: identity}
            _save(os.path.join(checkpoints_dir(run_dir), f"best_step_{AUTO_BEST}"), best_state)
        _write(os.path.join(run_dir, "summary.json"), json.loads(json.dumps(summary).replace("NaN", "null")))
    finally:
        writer.close()
        if saved > step:
            trained.append((run_folder_name(name, cfg.seed), step, saved))


class _SimulatedSweep:
    def __init__(self, launcher: "SimulatedLauncher", strategies: List[Strategy], seed: int):
        self.launcher, self.seed = launcher, seed
        self.plan = build_plan(launcher.dir, strategies, [seed], launcher.budget, launcher.common)

    def run(self) -> List[str]:
        update_manifest(self.plan)
        for run in self.plan.runs:
            self.launcher.launch_count += 1
            if self.launcher.on_launch is not None:
                self.launcher.on_launch(self.launcher.launch_count, run)
            if run_state(self.plan.experiment_dir, run).status == "finished":
                continue
            run_dir = os.path.join(self.plan.experiment_dir, run.name)
            try:
                train(run_dir, run.strategy, run.flags, self.launcher.trained, self.launcher.one_class)
            except (OSError, ValueError) as e:  # a write failed (a full disk), a refusal: a failed launch, as the app's
                print(f"[1/1] {run.name}: FAILED (FAILED) after 0 s: {type(e).__name__}: {e}", flush=True)
                return [run.name]
        return []


class SimulatedLauncher(BranchLauncher):
    """The search's launcher with :func:`train` in place of each TorchX launch.

    Args:
        on_launch: called with the launch's number (from 1) and its run before it trains (to interrupt it).
        one_class: tasks whose validation labels are of one class (their AUC and cal_ne are undefined).
    """

    def __init__(self, *args: Any, on_launch: Optional[Callable[[int, RunSpec], None]] = None, one_class=(), **kw: Any):
        super().__init__(*args, **kw)
        self.trained: List[Tuple[str, int, int]] = []
        self.launch_count = 0
        self.on_launch = on_launch
        self.one_class = tuple(one_class)

    def __enter__(self) -> "SimulatedLauncher":
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def _launcher(self, strategies: List[Strategy], seed: int) -> Any:
        return _SimulatedSweep(self, strategies, seed)


def interrupt_at(number: int, how: str = "SIGINT") -> Callable[[int, RunSpec], None]:
    """An ``on_launch`` that stops the search at launch ``number``: Ctrl-C as the sweep's launcher reports it, or
    a real signal to this process (``SIGHUP``, ``SIGTERM``)."""

    def hook(n: int, run: RunSpec) -> None:
        if n != number:
            return
        if how == "SIGINT":
            raise SweepInterrupted("SIGINT", run.name)
        os.kill(os.getpid(), getattr(signal, how))

    return hook


def no_step_twice(trained: List[Tuple[str, int, int]]) -> bool:
    """Whether every branch's trained step ranges are disjoint."""
    by_run: Dict[str, List[Tuple[int, int]]] = {}
    for run, a, b in trained:
        by_run.setdefault(run, []).append((a, b))
    return all(
        all(r1[1] <= r2[0] for r1, r2 in zip(sorted(ranges), sorted(ranges)[1:])) for ranges in by_run.values()
    )


def run_search(argv: Sequence[str], **launcher: Any) -> Tuple[int, str, Optional[SimulatedLauncher]]:
    """``dlrm-multiepoch search ARGV`` with a :class:`SimulatedLauncher` (``launcher``: its options), at the
    command's boundary as ``main`` runs it (signals, ``OSError``: one line): ``(exit code, console, launcher)``;
    a refusal before any launch is exit code 2 with its message."""
    from dlrm_multiepoch.search import command

    own, common = split_at_dashes(list(argv))
    args = command.build_parser().parse_args(own)
    runner = get_runner()
    out = io.StringIO()
    found: Dict[str, Any] = {"sim": None, "refused": None}

    def body() -> int:
        try:
            search = command._prepare(args, common, runner)
        except ValueError as e:
            found["refused"] = str(e)
            return 2
        found["sim"] = SimulatedLauncher(
            search.dir, search.tree, search.budget, search.common, search.options, len(search.rungs), **launcher
        )
        search.launcher = found["sim"]
        return command._run(search, args)

    try:
        with redirect_stdout(out), redirect_stderr(out):
            code = guarded("search", body, command.RERUN)
    finally:
        runner.close()
    if found["refused"] is not None:
        return 2, out.getvalue() + found["refused"], None
    return code, out.getvalue(), found["sim"]


def finished_search(tmp_path_factory: Any) -> Path:
    """A finished search of :data:`ARGS` in a folder of its own (a test module's reference)."""
    exp = tmp_path_factory.mktemp("searched") / "exp"
    code, out, _ = run_search([str(exp), *ARGS])
    assert code == 0, out
    return exp


def deployed(exp: Path) -> Tuple[Any, ...]:
    """What ``search.json`` records as deployed: branch, epoch, validation metric, checkpoint (relative to ``exp``)."""
    deploy = json.loads((exp / "search.json").read_text())["seeds"]["0"]["deploy"]
    return deploy["branch"], deploy["epoch"], deploy["val_metric"], os.path.relpath(deploy["checkpoint"], exp)
