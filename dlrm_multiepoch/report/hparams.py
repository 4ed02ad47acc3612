"""TensorBoard HParams summaries, so the HParams dashboard lists and sorts an experiment's runs.

Each run folder gets a session (its hyperparameters: strategy, seed, epochs, its
configuration group when the runs differ in common flags, and every config flag that
differs between runs, ``--data_path`` included) plus a few scalars the run does not log
itself (wall time, throughput, the deployed model's validation and test AUC and the best
test AUC per task; undefined ones are not written); the experiment folder gets
the experiment description (hyperparameters and their values, metrics). The metrics
are the runs' own evaluation tags (``test/<task>/auc``, ...), whose last value is the
last evaluation. Files end in ``.hparams``; a new comparison replaces them.

Example::

    write_hparams(comparison)     # then: tensorboard --logdir runs/bx  (HPARAMS tab)
"""

import glob
import json
import os
import socket
import time
from typing import Any, Dict, List, Optional, Sequence

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from dlrm_multiepoch.command_faults import naming
from dlrm_multiepoch.report.compare import Comparison
from dlrm_multiepoch.report.groups import ConfigGroup
from dlrm_multiepoch.report.runs import RunRecord
from dlrm_multiepoch.report.stats import is_defined

SUFFIX = ".hparams"
# Per-run names and places: they differ between every two runs and say nothing about the model.
_IGNORED = {"run_name", "tensorboard_dir"}
_SCALAR = (str, int, float, bool)
# compare/<what>_<task> scalars written per run.
_PER_TASK = ("deployed_val_auc", "deployed_test_auc", "best_test_auc")


def run_hparams(runs: List[RunRecord], groups: Sequence[ConfigGroup] = ()) -> Dict[str, Dict[str, Any]]:
    """run name -> hyperparameters: strategy, seed, epochs, configuration group (when there are
    several) and every config flag whose values differ between runs (``--data_path`` included).

    A flag whose values are not all numbers, all booleans or all text is shown as text in
    every run (``None``, lists), so the dashboard keeps one type per column.
    """
    varying = sorted(
        key
        for key in {k for r in runs for k in r.config}
        if key not in _IGNORED and len({repr(r.config.get(key)) for r in runs}) > 1
    )
    group_of = {r.name: g.label for g in groups for r in g.runs} if len(groups) > 1 else {}
    values = {r.name: {k: r.config.get(k) for k in varying} for r in runs}
    for key in varying:
        column = [v[key] for v in values.values()]
        kinds = {bool if isinstance(x, bool) else float if isinstance(x, (int, float)) else type(x) for x in column}
        if len(kinds) > 1 or not kinds <= {bool, float, str}:
            for v in values.values():
                v[key] = v[key] if isinstance(v[key], str) else json.dumps(v[key])
    out = {}
    for r in runs:
        hparams: Dict[str, Any] = {"strategy": r.strategy, "seed": r.seed, "epochs": r.epochs_done}
        if r.name in group_of:
            hparams["group"] = group_of[r.name]
        hparams.update({k: v for k, v in values[r.name].items() if k not in hparams})
        out[r.name] = {k: v for k, v in hparams.items() if isinstance(v, _SCALAR)}
    return out


def write_hparams(comparison: Comparison, folder: Optional[str] = None) -> List[str]:
    """Write the experiment description and one session per compared run; return the files written.

    Metrics per task: the runs' own evaluation tags (last value: the last evaluation) and
    the deployed model's validation and test AUC and the best test AUC; an undefined value
    (NaN) is not written, so it never sorts.

    Args:
        folder: where to write instead of beside the runs (their folders are read-only): the
            description in ``folder``, each session in ``folder/<run>`` with the last whole-epoch
            value of each evaluation tag beside it (the dashboard reads a session's metrics from its folder).
    """
    runs = comparison.runs
    if not runs:
        return []
    hparams = run_hparams(runs, comparison.groups)
    tasks = sorted({t for r in runs for t in r.tasks})
    splits = [("test", "auc"), ("test", "logloss"), ("train_sample", "auc")]
    if any(r.curve("val", t, "auc") or r.final("val", t, "auc") is not None for r in runs for t in tasks):
        splits.append(("val", "auc"))
    metric_tags = [f"{split}/{task}/{m}" for task in tasks for split, m in splits]
    metric_tags += ["compare/wall_time_s", "compare/samples_per_s"]
    metric_tags += [f"compare/{what}_{t}" for t in tasks for what in _PER_TASK]
    written = [_write(folder or comparison.experiment_dir, _experiment(hparams, metric_tags), {})]
    for run in runs:
        scalars: Dict[str, Any] = {"compare/wall_time_s": run.wall_time_s, "compare/samples_per_s": run.samples_per_s}
        if folder is not None:
            scalars |= {tag: _last(run, tag) for tag in metric_tags if not tag.startswith("compare/")}
        for t in tasks:
            defined = [v for v in run.curve("test", t, "auc").values() if is_defined(v)]
            scalars[f"compare/best_test_auc_{t}"] = max(defined, default=None)
            scalars[f"compare/deployed_val_auc_{t}"] = run.final("val", t, "auc")
            scalars[f"compare/deployed_test_auc_{t}"] = run.final("test", t, "auc")
        where = run.path if folder is None else os.path.join(folder, run.name)
        written.append(_write(where, _session(run.name, hparams[run.name]), scalars))
    return written


def _last(run: RunRecord, tag: str) -> Optional[float]:
    """The run's last whole-epoch value of an evaluation tag ``split/task/metric`` (None: not evaluated)."""
    split, rest = tag.split("/", 1)
    task, metric = rest.rsplit("/", 1)
    curve = run.curve(split, task, metric)
    return curve[max(curve)] if curve else None


def _write(folder: str, summaries: List[Summary], scalars: Dict[str, Any]) -> str:
    """One event file of ``summaries`` and ``scalars`` in ``folder`` (replacing the old ones), written here and
    now: TensorBoard's own writer writes from a thread, which prints its own traceback when the disk is full."""
    values = [Summary.Value(tag=tag, simple_value=float(v)) for tag, v in scalars.items() if is_defined(v)]
    now = time.time()
    events = [Event(wall_time=now, file_version="brain.Event:2")]
    events += [Event(wall_time=now, step=0, summary=summary) for summary in [*summaries, Summary(value=values)]]
    path = os.path.join(folder, f"events.out.tfevents.{int(now):010d}.{socket.gethostname()}.{os.getpid()}{SUFFIX}")
    with naming(path):
        for old in glob.glob(os.path.join(glob.escape(folder), f"*{SUFFIX}")):
            os.remove(old)
        os.makedirs(folder, exist_ok=True)
        with open(path, "wb") as f:
            writer = RecordWriter(f)
            for event in events:
                writer.write(event.SerializeToString())
    return path


def _experiment(hparams: Dict[str, Dict[str, Any]], metric_tags: List[str]) -> List[Summary]:
    infos = []
    for name in sorted({k for h in hparams.values() for k in h}):
        values = [h[name] for h in hparams.values() if name in h]
        info = api_pb2.HParamInfo(name=name)
        if all(isinstance(v, str) for v in values):
            info.type = api_pb2.DATA_TYPE_STRING
            info.domain_discrete.extend(sorted(set(values)))
        elif all(isinstance(v, bool) for v in values):
            info.type = api_pb2.DATA_TYPE_BOOL
        else:
            info.type = api_pb2.DATA_TYPE_FLOAT64
        infos.append(info)
    experiment = api_pb2.Experiment(
        hparam_infos=infos,
        metric_infos=[api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag), display_name=tag) for tag in metric_tags],
        time_created_secs=time.time(),
    )
    return [_summary(metadata.EXPERIMENT_TAG, plugin_data_pb2.HParamsPluginData(experiment=experiment))]


def _session(name: str, hparams: Dict[str, Any]) -> List[Summary]:
    start = plugin_data_pb2.SessionStartInfo(group_name=name, start_time_secs=time.time())
    for key, value in hparams.items():
        if isinstance(value, bool):
            start.hparams[key].bool_value = value
        elif isinstance(value, str):
            start.hparams[key].string_value = value
        else:
            start.hparams[key].number_value = float(value)
    end = plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS, end_time_secs=time.time())
    return [
        _summary(metadata.SESSION_START_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_start_info=start)),
        _summary(metadata.SESSION_END_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=end)),
    ]


def _summary(tag: str, data: plugin_data_pb2.HParamsPluginData) -> Summary:
    data.version = metadata.PLUGIN_DATA_VERSION
    plugin = SummaryMetadata.PluginData(plugin_name=metadata.PLUGIN_NAME, content=data.SerializeToString())
    return Summary(value=[Summary.Value(tag=tag, metadata=SummaryMetadata(plugin_data=plugin))])
