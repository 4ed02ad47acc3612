"""``search.json``: written atomically, read back field by field, rebuilt from the run folders when damaged.

Every decision of a search follows from its run folders; ``search.json`` is its record
(the flags it ran with, per seed every branch, rung and cost, the checkpoint to deploy)
and the one place that keeps what run folders do not: the launches and wall time of
earlier invocations, which rungs cut which branch. Read back, each field is checked;
a file that is not JSON, or a field of another type, is **damaged**: :func:`read_record`
names the file and the first damaged field, keeps what is intact (the top-level flags,
each seed whose entry is whole) and the caller rebuilds the rest from the run folders.
Torch-free (``compare`` reads it too).

Example::

    loaded = read_record("runs/search")
    if loaded.damage:
        print(loaded.damage)          # "runs/search/search.json: seeds.0.cost.wall_s is 'abc', expected a number"
    write_record("runs/search", loaded.record)
"""

import json
import os
import shutil
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from dlrm_multiepoch.json_io import write_json
from dlrm_multiepoch.run_files import read_optional_json, search_record_path

# Expected types: a type (or tuple), ("list", item), ("map", value), ("opt", spec), or {field: spec} (all required).
_NUMBER = (int, float)
_NULL_NUMBER = ("opt", _NUMBER)
_LAUNCH = {"to_epoch": _NUMBER, "wall_s": _NULL_NUMBER}
_BRANCH = {
    "status": str, "reason": str, "cut_at": _NULL_NUMBER, "launches": ("list", _LAUNCH),
    "curve": ("map", _NULL_NUMBER), "trained_steps": int,
}  # fmt: skip
_RUNG = {"epoch": _NUMBER, "judged": ("list", str), "cuts": ("map", str), "kept": ("list", str)}
_DEPLOY = ("opt", {"branch": str, "epoch": _NUMBER, "checkpoint": ("opt", str), "val_metric": _NULL_NUMBER})
_COST = {"wall_s": _NUMBER, "launches": int, "trained_steps": int, "sweep_steps": int}
SEED = {"branches": ("map", _BRANCH), "rungs": ("list", _RUNG), "deploy": _DEPLOY, "cost": _COST}
# The search's own flags and the app flags common to its branches: checked against a rerun's.
TOP = {
    "budget": int, "metric": str, "task_weights": ("map", _NUMBER), "eta": int, "rung_fraction": _NUMBER,
    "common_flags": ("list", str), "candidates": ("list", str),
}  # fmt: skip
DAMAGED_SUFFIX = ".damaged"


@dataclass
class LoadedRecord:
    """``search.json`` as read: its intact part, and what was damaged.

    Args:
        record: the intact fields (empty when there is no file or nothing is intact); ``seeds``
            holds each seed whose whole entry is intact.
        damage: one line naming the file and the first damaged field (None: intact or absent); a seed
            whose entry was damaged is left out of ``record`` and rebuilt when it is searched.
    """

    record: Dict[str, Any] = field(default_factory=dict)
    damage: Optional[str] = None


def _kind(spec: Any) -> str:
    if isinstance(spec, dict):
        return "an object"
    if isinstance(spec, tuple) and spec and isinstance(spec[0], str):
        return {"list": "a list", "map": "an object", "opt": f"null or {_kind(spec[1])}"}[spec[0]]
    types = spec if isinstance(spec, tuple) else (spec,)
    return " or ".join({int: "an integer", float: "a number", str: "a string"}[t] for t in types).replace(
        "an integer or a number", "a number"
    )


def _matches(value: Any, types: Any) -> bool:
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool):
        return False
    return isinstance(value, types)


def problem(value: Any, spec: Any, path: str) -> Optional[str]:
    """The first field of ``value`` that does not match ``spec``, as ``path is X, expected Y`` (None: it matches)."""
    if isinstance(spec, tuple) and spec and isinstance(spec[0], str):
        kind, inner = spec
        if kind == "opt":
            return None if value is None else problem(value, inner, path)
        if kind == "list":
            if not isinstance(value, list):
                return f"{path} is {field_text(value)}, expected {_kind(spec)}"
            return next((p for i, v in enumerate(value) if (p := problem(v, inner, f"{path}.{i}"))), None)
        if not isinstance(value, dict):
            return f"{path} is {field_text(value)}, expected {_kind(spec)}"
        return next((p for k, v in value.items() if (p := problem(v, inner, f"{path}.{k}"))), None)
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return f"{path} is {field_text(value)}, expected an object"
        missing = [k for k in spec if k not in value]
        if missing:
            return f"{path}.{missing[0]} is missing"
        return next((p for k, s in spec.items() if (p := problem(value[k], s, f"{path}.{k}"))), None)
    return None if _matches(value, spec) else f"{path} is {field_text(value)}, expected {_kind(spec)}"


def field_text(value: Any) -> str:
    """A field's value as a message shows it: JSON, a string quoted, at most 40 characters."""
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _seed_key(key: str) -> bool:
    try:
        return str(int(key)) == key
    except ValueError:
        return False


def check_record(record: Any) -> Tuple[Dict[str, Any], List[Tuple[str, str]]]:
    """The intact part of a parsed ``search.json`` and ``(field, problem)`` for each damaged part."""
    if not isinstance(record, dict):
        return {}, [("(the file)", f"holds {field_text(record)}, not a JSON object")]
    intact: Dict[str, Any] = {}
    damaged: List[Tuple[str, str]] = []
    for name, spec in TOP.items():
        if name not in record:
            damaged.append((name, f"{name} is missing"))
            continue
        found = problem(record[name], spec, name)
        if found:
            damaged.append((name, found))
        else:
            intact[name] = record[name]
    seeds = record.get("seeds")
    if not isinstance(seeds, dict):
        found = f"seeds is {field_text(seeds)}, expected an object" if "seeds" in record else "seeds is missing"
        damaged.append(("seeds", found))
        seeds = {}
    intact["seeds"] = {}
    for key, entry in seeds.items():
        found = None if _seed_key(key) else f"seeds has the key {key!r}, expected a seed (an integer)"
        found = found or problem(entry, SEED, f"seeds.{key}")
        if found:
            damaged.append((f"seeds.{key}", found))
        else:
            intact["seeds"][key] = entry
    return intact, damaged


def read_record(experiment_dir: str) -> LoadedRecord:
    """``search.json`` of ``experiment_dir``, checked (see the module docstring); empty when there is none."""
    path = search_record_path(experiment_dir)
    try:
        raw = read_optional_json(path)
    except ValueError as e:  # not JSON (or not text), or not an object
        return LoadedRecord({}, str(e) if path in str(e) else f"{path} is not valid JSON text ({e})")
    except OSError as e:
        return LoadedRecord({}, f"{path}: cannot be read ({e.strerror or e})")
    if not raw:
        return LoadedRecord() if not os.path.isfile(path) else LoadedRecord({}, f"{path}: holds an empty object")
    intact, damaged = check_record(raw)
    if not damaged:
        return LoadedRecord(intact)
    more = f" (and {len(damaged) - 1} more damaged field(s))" if len(damaged) > 1 else ""
    return LoadedRecord(intact, f"{path}: {damaged[0][1]}{more}")


def keep_damaged(experiment_dir: str) -> Optional[str]:
    """Copy a damaged ``search.json`` aside (``search.json.damaged``) before it is rewritten; returns the copy."""
    path = search_record_path(experiment_dir)
    if not os.path.isfile(path):
        return None
    shutil.copyfile(path, path + DAMAGED_SUFFIX)
    return path + DAMAGED_SUFFIX


def write_record(experiment_dir: str, record: Mapping[str, Any]) -> str:
    """Write ``search.json`` atomically; returns its path."""
    os.makedirs(experiment_dir, exist_ok=True)
    path = search_record_path(experiment_dir)
    write_json(path, record)
    return path
