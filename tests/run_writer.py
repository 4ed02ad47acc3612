"""Run folders as the training app and ``sweep`` write them, and readers of what ``compare`` writes back."""

import glob
import io
import json
import os
import struct
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.plugins.hparams import metadata, plugin_data_pb2
from tensorboard.util import tensor_util
from torch.utils.tensorboard import SummaryWriter

from dlrm_multiepoch.report.command import main as compare_main


def write_run(
    folder, test_auc, train_auc=None, wall=10.0, planned=None, seed=0, finished=True, logloss=None, best=None,
    val_auc=None, task="like", config=None, extra=None, more=None,
):
    """A run folder as the training app writes it: one evaluation per whole epoch (plus one mid-epoch).

    ``best``: ``(epoch, test AUC[, val AUC])`` of restored best-validation weights, as the auto schedule
    logs them; ``val_auc``: validation AUC per epoch; ``config``: more flags of its ``summary.json``;
    ``extra``: ``{split: {task: [AUC per epoch]}}`` evaluated besides (slices, other tasks); ``more``:
    ``{(split, metric): [value per epoch]}`` of ``task`` besides AUC (e.g. ``("val", "cal_ne")``).
    """
    os.makedirs(folder, exist_ok=True)
    evaluations = [{"epoch": 0.5, "step": 5, "test": {task: {"auc": 0.1}}}]
    with SummaryWriter(str(folder)) as w:
        w.add_scalar("train/samples_per_sec", 1000.0, 1)
        w.add_scalar("train/samples_per_sec", 3000.0, 2)
        w.add_scalar("eval/epoch", 0.5, 5)  # a mid-epoch evaluation: not a whole epoch, ignored
        w.add_scalar(f"test/{task}/auc", 0.1, 5)
        for i, auc in enumerate(test_auc):
            step = 10 * (i + 1)
            entry = {"test": {task: {"auc": auc, "logloss": (logloss or [0.5] * len(test_auc))[i]}}}
            if train_auc is not None:
                entry["train_sample"] = {task: {"auc": train_auc[i]}}
            if val_auc is not None:
                entry["val"] = {task: {"auc": val_auc[i]}}
            for split, per_task in (extra or {}).items():
                entry.setdefault(split, {}).update({t: {"auc": aucs[i]} for t, aucs in per_task.items()})
            for (split, metric), values in (more or {}).items():
                entry.setdefault(split, {}).setdefault(task, {})[metric] = values[i]
            w.add_scalar("eval/epoch", i + 1, step)
            for split, per_task in entry.items():
                for t, metrics in per_task.items():
                    for metric, value in metrics.items():
                        w.add_scalar(f"{split}/{t}/{metric}", value, step)
            evaluations.append({"epoch": i + 1, "step": step, **entry})
        if best is not None:
            results = {"test": {task: {"auc": best[1]}}, **({"val": {task: {"auc": best[2]}}} if len(best) > 2 else {})}
            for split, per_task in results.items():
                w.add_scalar(f"best/{split}/{task}/auc", per_task[task]["auc"], 10 * len(test_auc) + 1)
    summary = {"config": {"seed": seed, "epochs": planned or len(test_auc), "optim": {"learning_rate": 0.001}, **(config or {})}}
    summary["evaluations"] = json.loads(json.dumps(evaluations).replace("NaN", "null"))  # strict JSON, as the app writes
    if finished:
        summary["wall_time_s"] = wall
    if best is not None:
        summary["best"] = {"epoch": best[0], "step": 10 * len(test_auc) + 1, **json.loads(json.dumps(results).replace("NaN", "null"))}
    (folder / "summary.json").write_text(json.dumps(summary))


def manifest(exp, runs):
    """``sweep.json`` listing runs as (name, strategy, seed, epochs[, window])."""
    entries = {r[0]: {"name": r[0], "strategy": r[1], "seed": r[2], "epochs": r[3], "window": r[4] if len(r) > 4 else None} for r in runs}
    (exp / "sweep.json").write_text(json.dumps({"runs": entries}))


def truncate_events(folder, before):
    """Cut a run's event file just before the record of scalar ``(tag, epoch)``, as a crash or a full disk would."""
    (path,) = glob.glob(str(folder / "events.out.tfevents.*"))
    data, offset, epoch_steps = open(path, "rb").read(), 0, {}
    while offset < len(data):
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        event = Event.FromString(data[offset + 12 : offset + 12 + length])
        for value in event.summary.value:
            if value.tag == "eval/epoch":
                epoch_steps[event.step] = value.simple_value
            if value.tag == before[0] and epoch_steps.get(event.step) == before[1]:
                open(path, "r+b").truncate(offset)
                return
        offset += 12 + length + 4
    raise AssertionError(f"no {before} in {path}")


def f32(x):
    return float(np.float32(x))  # event files store float32


def mean32(*values):
    return sum(f32(v) for v in values) / len(values)


def hparams_sessions(exp):
    """run folder -> its HParams session's hyperparameters, and run folder -> the scalars written beside."""
    sessions, scalars = {}, {}
    for path in glob.glob(str(exp / "*" / "*.hparams")):
        run = os.path.basename(os.path.dirname(path))
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                if value.tag == metadata.SESSION_START_INFO_TAG:
                    data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
                    sessions[run] = {k: v.string_value or v.number_value for k, v in data.session_start_info.hparams.items()}
                elif value.metadata.plugin_data.plugin_name == "scalars":
                    scalars.setdefault(run, {})[value.tag] = float(tensor_util.make_ndarray(value.tensor))
    return sessions, scalars


def run_compare(*argv):
    """``dlrm-multiepoch compare ARGV`` as the console runs it: (exit code, stdout, stderr); a refusal is exit 2."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = compare_main(list(argv))
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()
