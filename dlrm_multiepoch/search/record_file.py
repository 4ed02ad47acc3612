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
import math
import os
import re
import shutil
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from dlrm_multiepoch.json_io import write_json
from dlrm_multiepoch.metrics import METRIC_NAMES
from dlrm_multiepoch.run_files import read_optional_json, search_record_path
from dlrm_multiepoch.search.candidates import candidate_tree

STATUSES = ("live", "finished", "cut")  # a branch's (BranchRecord.status)
# Expected values: a type (or tuple), ("list", item), ("map", value), ("opt", spec), {field: spec} (all required), or
# ("where", spec, test, what): spec's type and a value no search can have refused (-1 epochs, an unknown candidate).
_NUMBER = (int, float)  # finite: NaN and infinities are written as null, so a file holding them was edited
_AMOUNT = ("where", _NUMBER, lambda v: v >= 0, "a number >= 0")
_COUNT = ("where", int, lambda v: v >= 0, "an integer >= 0")
_NULL_NUMBER = ("opt", _NUMBER)
_NULL_AMOUNT = ("opt", _AMOUNT)
_LAUNCH = {"to_epoch": _AMOUNT, "wall_s": _NULL_AMOUNT}
_BRANCH = {
    "status": ("where", str, lambda v: v in STATUSES, f"one of {', '.join(STATUSES)}"), "reason": str,
    "cut_at": _NULL_AMOUNT, "launches": ("list", _LAUNCH), "curve": ("map", _NULL_NUMBER), "trained_steps": _COUNT,
}  # fmt: skip
_RUNG = {"epoch": _AMOUNT, "judged": ("list", str), "cuts": ("map", str), "kept": ("list", str)}
_DEPLOY = ("opt", {"branch": str, "epoch": _AMOUNT, "checkpoint": ("opt", str), "val_metric": _NULL_NUMBER})
_COST = {"wall_s": _AMOUNT, "launches": _COUNT, "trained_steps": _COUNT, "sweep_steps": _COUNT}
SEED = {"branches": ("map", _BRANCH), "rungs": ("list", _RUNG), "deploy": _DEPLOY, "cost": _COST}
# The search's own flags and the app flags common to its branches: checked against a rerun's. Values no search can
# have (those its flags refuse) are damage too: rebuilt, never "rerun it with --epochs -1".
TOP = {
    "budget": ("where", int, lambda v: v >= 1, "a positive integer"),
    "metric": ("where", str, lambda v: v in METRIC_NAMES, f"one of {', '.join(METRIC_NAMES)}"),
    "task_weights": ("map", _AMOUNT), "eta": ("where", int, lambda v: v >= 2, "an integer >= 2"),
    "rung_fraction": ("where", _NUMBER, lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "common_flags": ("list", str), "candidates": ("list", str),
}  # fmt: skip
# Recorded since a version that older records predate: checked when present.
OPTIONAL_TOP = {
    "j": ("where", str, lambda v: re.fullmatch(r"(\d+:)?\d+x\d+|\d+", v) is not None, "a -j value, e.g. 1x2"),
}
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
    if isinstance(spec, tuple) and spec and spec[0] == "where":
        return spec[3]
    if isinstance(spec, tuple) and spec and isinstance(spec[0], str):
        return {"list": "a list", "map": "an object", "opt": f"null or {_kind(spec[1])}"}[spec[0]]
    types = spec if isinstance(spec, tuple) else (spec,)
    return " or ".join({int: "an integer", float: "a number", str: "a string"}[t] for t in types).replace(
        "an integer or a number", "a number"
    )


def _matches(value: Any, types: Any) -> bool:
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        return False
    return isinstance(value, types)


def problem(value: Any, spec: Any, path: str) -> Optional[str]:
    """The first field of ``value`` that does not match ``spec``, as ``path is X, expected Y`` (None: it matches)."""
    if isinstance(spec, tuple) and spec and spec[0] == "where":
        _, inner, test, _ = spec
        found = problem(value, inner, path)
        return found or (None if test(value) else f"{path} is {field_text(value)}, expected {_kind(spec)}")
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


def _is_candidate(name: str, budget: Optional[int]) -> bool:
    """Whether a search of ``budget`` epochs has a candidate ``name`` (any budget's when it is damaged)."""
    if budget is not None:
        return name in {c.name for c in candidate_tree(budget)}
    return name in {c.name for c in candidate_tree(2)} or re.fullmatch(r"window@[1-9]\d*", name) is not None


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
    for name, spec in OPTIONAL_TOP.items():
        found = problem(record[name], spec, name) if name in record else None
        if found:
            damaged.append((name, found))
        elif name in record:
            intact[name] = record[name]
    if "candidates" in intact:  # names this search's tree has (its budget's, when that is intact)
        unknown = [n for n in intact["candidates"] if not _is_candidate(n, intact.get("budget"))]
        if unknown or not intact["candidates"]:
            damaged.append(("candidates", f"candidates holds {field_text(unknown[0]) if unknown else 'none'}, expected "
                                          "candidates of the search"))  # fmt: skip
            del intact["candidates"]
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
