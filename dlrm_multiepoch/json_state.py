"""Tensor-free state in the one form ``torch.distributed.checkpoint`` saves and loads on any sharding.

A part whose state is plain values (a step, a schedule's text, a list of decisions)
hands DCP ``{"version": tensor(1), "json": "<the state as JSON>"}`` from
``state_dict()``, and its ``load_state_dict`` reads that or the plain state
(``trainer_state.json`` of the app's checkpoints holds the plain one).

Why: DCP's default load planner flattens a nested state dict into keys and, when the
checkpoint holds a key this rank's flattened dict lacks, re-flattens it the way
torch < 2.4 did, assuming an old checkpoint. A rank that holds no shard of a table
always lacks keys: ``_flatten_sharded_tensors`` drops a ``ShardedTensor`` without local
shards (and the fused optimizer has no state for it there). The old way stops at every
mapping without a tensor inside and makes it one key (``freeze``), which a checkpoint
saved the new way (``freeze.global_step``, ...) does not have: ``Missing key in
checkpoint state_dict: freeze``. A mapping with a tensor in it flattens the same both
ways, and a JSON string is one value whatever its length (a list of decisions that grew
since the saved state was built).

Example::

    def state_dict(self):
        return pack_json_state({"step": self.step, "schedule": self.text})

    def load_state_dict(self, state):
        state = unpack_json_state("my part", state)
        check_state("my part", state, {"step": int, "schedule": str})
"""

import json
from collections.abc import Mapping
from typing import Any, Dict

import torch

from dlrm_multiepoch.saved_state import StateMismatch

VERSION = 1


def pack_json_state(state: Mapping) -> Dict[str, Any]:
    """``state`` (JSON-able, NaN and infinities allowed) as DCP saves it on any sharding."""
    return {"version": torch.tensor(VERSION), "json": json.dumps(state)}


def is_packed(state: Any) -> bool:
    """Whether ``state`` is what :func:`pack_json_state` returns."""
    return isinstance(state, Mapping) and set(state) == {"version", "json"}


def unpack_json_state(part: str, state: Any) -> Any:
    """The plain state of a packed one; anything else as it is (a plain state, e.g. from ``trainer_state.json``).

    Raises:
        StateMismatch: a packed state of another version, or whose JSON does not parse.
    """
    if not is_packed(state):
        return state
    version = state["version"]
    version = version.item() if isinstance(version, torch.Tensor) else version
    if version != VERSION:
        raise StateMismatch(f"{part}: the saved state has version {version}, this library reads version {VERSION}")
    try:
        return json.loads(state["json"])
    except (TypeError, ValueError) as e:
        raise StateMismatch(f"{part}: the saved state's JSON does not parse ({e})") from None
