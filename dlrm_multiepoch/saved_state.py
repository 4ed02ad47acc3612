"""What a ``Stateful`` part checks before it loads saved state: the fields it needs, of the types it needs.

Each part validates its own state in ``load_state_dict`` and raises :class:`StateMismatch`
naming itself and what disagrees (a missing field, a value of another type, another
schedule); :class:`~dlrm_multiepoch.train.checkpoint.Checkpointer` adds the checkpoint
folder and the part's name. A damaged or foreign state is never half-loaded, nor a
``KeyError``. Torch-free.

Example::

    def load_state_dict(self, state):
        check_state("train progress", state, {"step": int, "epoch": int})
        self.step, self.epoch = state["step"], state["epoch"]
"""

import math
from collections.abc import Mapping
from typing import Any, Optional, Tuple, Type, Union

Kind = Optional[Union[Type[Any], Tuple[Type[Any], ...]]]  # None: any value


class StateMismatch(ValueError):
    """Saved state that does not fit the part loading it; the message names the part and what disagrees."""


def _fits(value: Any, kind: Kind) -> bool:
    if kind is None:
        return True
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool):  # JSON true/false is no count
        return bool in kinds
    if float in kinds and isinstance(value, int):  # JSON writes 2.0 as 2 in some writers
        return True
    return isinstance(value, kinds)


def _name(kind: Kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("a mapping" if k is Mapping else k.__name__ for k in kinds)  # type: ignore[union-attr]


def check_state(part: str, state: Any, fields: Mapping[str, Kind]) -> None:
    """Refuse ``state`` unless it is a mapping holding every field in ``fields`` with a value of its kind.

    Args:
        part: the part's name in messages (``"train progress"``, ``"freeze schedule"``).
        state: the state given to ``load_state_dict``.
        fields: field -> expected type (a tuple of types, or None for any value). ``float``
            accepts ints; ``int`` refuses booleans.

    Raises:
        StateMismatch: naming ``part`` and the first field that is missing or of another type.

    Example::

        check_state("freeze schedule", {"global_step": 5}, {"global_step": int, "schedule": str})
        # StateMismatch: freeze schedule: the saved state has no 'schedule' (it has ['global_step'])
    """
    if not isinstance(state, Mapping):
        kind = type(state).__name__
        raise StateMismatch(f"{part}: the saved state is a {kind}, expected a mapping of {sorted(fields)}")
    for name, kind in fields.items():
        if name not in state:
            raise StateMismatch(f"{part}: the saved state has no {name!r} (it has {sorted(state)})")
        if not _fits(state[name], kind):
            raise StateMismatch(f"{part}: the saved {name!r} is {state[name]!r}, expected {_name(kind)}")


def check_count(part: str, name: str, value: Any) -> int:
    """``value`` as a non-negative whole number (a count or a step), or StateMismatch naming ``part`` and ``name``.

    Accepts ints, integral floats and one-element tensors (states saved in DCP hold tensors).

    Example::

        step = check_count("table LR schedule", "step", state["step"])
    """
    try:
        number = value.item() if hasattr(value, "item") and callable(value.item) else value
    except (RuntimeError, ValueError):  # a tensor of several elements
        number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
        raise StateMismatch(f"{part}: the saved {name!r} is {value!r}, expected a count")
    if number < 0 or not float(number).is_integer():
        raise StateMismatch(f"{part}: the saved {name!r} is {number!r}, expected a whole number >= 0")
    return int(number)
