"""What ``compare`` reads of a run's ``summary.json`` and an experiment's ``sweep.json``, checked field by field.

A field of another type than the app and the sweep write (a string for a number, a list
for an object, a non-finite window) would end in a traceback far from the file, or in a
figure of the wrong run: each reader here raises ``ValueError`` naming the file's field
instead (compare leaves such a run out by name, or refuses a damaged ``sweep.json``).
Torch-free.

Example::

    summary = checked_summary("runs/bx/joint-s0")   # ValueError: "config.epochs is 'abc', expected an integer ..."
    manifest = checked_manifest("runs/bx")
"""

import math
from typing import Any, Dict, Tuple

from dlrm_multiepoch.run_files import manifest_path, read_manifest, read_summary
from dlrm_multiepoch.search.record_file import field_text

# What compare reads of a summary.json, by field: the types the app writes (each field may be absent).
_SUMMARY_FIELDS = {
    "config": (dict, "an object"), "evaluations": (list, "a list"), "best": ((dict, type(None)), "an object or null"),
    "wall_time_s": ((int, float), "a number"), "started_from": (dict, "an object"),
}  # fmt: skip
_CONFIG_FIELDS = ("epochs", "seed")  # integers, where a sweep's manifest does not say them
# What compare reads of a sweep.json entry (name and strategy required; an older sweep's may lack the rest).
_ENTRY_FIELDS: Dict[str, Tuple[type, ...]] = {
    "name": (str,), "strategy": (str,), "seed": (int, type(None)), "epochs": (int, type(None)),
    "window": (int, float, type(None)),
}  # fmt: skip


def checked_summary(run_dir: str) -> Dict[str, Any]:
    """A run's ``summary.json`` (empty when there is none); ValueError naming the field compare cannot read."""
    summary = read_summary(run_dir)
    for name, (kind, what) in _SUMMARY_FIELDS.items():
        if name in summary and not _is(summary[name], kind):
            raise ValueError(f"{name} is {field_text(summary[name])}, expected {what} (damaged)")
    config, best = summary.get("config", {}), summary.get("best") or {}
    inner = [(f"config.{k}", config.get(k), int, "an integer") for k in _CONFIG_FIELDS]
    for name, value, kind, what in [*inner, ("best.epoch", best.get("epoch"), (int, float), "a number")]:
        if value is not None and not _is(value, kind):
            raise ValueError(f"{name} is {field_text(value)}, expected {what} (damaged)")
    return summary


def checked_manifest(experiment_dir: str) -> Dict[str, Any]:
    """An experiment's ``sweep.json``; ValueError naming the file and the field compare cannot read."""
    path = manifest_path(experiment_dir)
    manifest = read_manifest(experiment_dir)
    if not isinstance(manifest.get("runs"), dict):
        raise ValueError(f"{path} is not a sweep manifest (no 'runs'); fix or remove it")
    for key, entry in manifest["runs"].items():
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: runs.{key} is {field_text(entry)}, expected an object (damaged); fix or remove it")
        for name, kinds in _ENTRY_FIELDS.items():
            value = entry.get(name, 0 if name in ("name", "strategy") else None)
            bad = not _is(value, kinds) or (isinstance(value, float) and not math.isfinite(value))
            if bad or (name == "name" and value != key):
                expected = " or ".join(k.__name__ for k in kinds).replace("NoneType", "null") if bad else "its key"
                raise ValueError(
                    f"{path}: runs.{key}.{name} is {field_text(value)}, expected {expected} (damaged); fix or remove it"
                )
    strategies = manifest.get("strategies", {})
    strategies = strategies if isinstance(strategies, dict) else {"": None}
    flags = [s.get("flags", []) if isinstance(s, dict) else None for s in strategies.values()]
    if not all(isinstance(f, list) and all(isinstance(t, str) for t in f) for f in flags):
        raise ValueError(f"{path}: strategies is not a map of each strategy's flags (damaged); fix or remove it")
    return manifest


def _is(value: Any, kind: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, kind)  # a bool is no number
