"""Which parameter groups train in which window of a run: the freeze schedule.

A schedule maps *groups* to *windows*. Text form (the ``--freeze_schedule`` flag)::

    tables=frozen@[0,1) train@[1,end); gate:feature_cross=closed

- entries are separated by ``;``; an entry is ``GROUP=PHASE [PHASE ...]``;
- a group is ``tables`` (every embedding table), ``table:NAME`` (one table; it
  overrides ``tables`` where both give a state), ``module:GLOB`` (the non-table
  parameters of every module whose dotted path matches GLOB, e.g.
  ``module:over_arch.*``) or ``gate:NAME`` (a :class:`~dlrm_multiepoch.gates.GradientGate`);
- a phase is ``STATE`` (the whole run) or ``STATE@[START,END)``; STATE is ``train`` or
  ``frozen`` (``open``/``closed`` are accepted for gates and mean the same);
- a bound is epochs (``1.5``), steps (``300step``), percent of the run (``50%``),
  ``end`` or an offset from it (``end-1``, ``end-300step``, ``end-25%``).

Outside its phases a group trains (a gate is open). A preset name (``joint``,
``delayed``, ``early``, ``frozen``) may stand for an entry: ``delayed; gate:x=closed``.

Example::

    schedule = FreezeSchedule.parse("delayed")
    print(schedule)                      # tables=frozen@[0,end-1) train@[end-1,end)
    plan = schedule.resolve(steps_per_epoch=100, num_epochs=2)
    plan.trains("tables", step=99), plan.trains("tables", step=100)   # False, True
"""

import math
import re
import warnings
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

TABLES = "tables"
GROUP_KINDS = ("table:", "module:", "gate:")
_STATES = {"train": True, "open": True, "frozen": False, "closed": False}
_UNITS = ("epoch", "step", "%")


def _fmt_number(x: Fraction) -> str:
    # Parsed bounds are decimals, so the quotient is exact and prints back as typed.
    return str(x.numerator) if x.denominator == 1 else format(Decimal(x.numerator) / Decimal(x.denominator), "f")


@dataclass(frozen=True)
class Bound:
    """A point of the run: ``value`` epochs/steps/percent, from the start or from the end.

    Args:
        value: non-negative amount (a ``Fraction`` keeps ``1.5`` epochs exact).
        unit: ``"epoch"``, ``"step"`` or ``"%"`` (of the whole run).
        from_end: count back from the end of the run (``end-1``).
    """

    value: Fraction
    unit: str = "epoch"
    from_end: bool = False

    def __post_init__(self) -> None:
        if self.unit not in _UNITS:
            raise ValueError(f"bound unit must be one of {_UNITS}, got {self.unit!r}")
        if self.value < 0:
            raise ValueError(f"bound must be non-negative, got {self.value}")
        object.__setattr__(self, "value", Fraction(self.value))

    @staticmethod
    def parse(text: str) -> "Bound":
        t = text.strip().replace(" ", "")
        from_end = False
        if t == "end":
            return END
        if t.startswith("end-"):
            from_end, t = True, t[4:]
        unit = "epoch"
        if t.endswith("step"):
            unit, t = "step", t[: -len("step")]
        elif t.endswith("%"):
            unit, t = "%", t[:-1]
        if not re.fullmatch(r"\d+(\.\d+)?", t):
            raise ValueError(
                f"bad window bound {text!r}: expected epochs (1.5), steps (300step), percent (50%), "
                "end or end-<amount>"
            )
        return Bound(Fraction(t), unit, from_end)

    def to_step(self, steps_per_epoch: int, total_steps: int) -> Fraction:
        """This bound in (possibly fractional) steps from the start of the run."""
        if self.unit == "epoch":
            amount = self.value * steps_per_epoch
        elif self.unit == "step":
            amount = self.value
        else:
            amount = self.value * total_steps / 100
        return total_steps - amount if self.from_end else amount

    def __str__(self) -> str:
        if self.from_end and self.value == 0:
            return "end"
        suffix = {"epoch": "", "step": "step", "%": "%"}[self.unit]
        return ("end-" if self.from_end else "") + _fmt_number(self.value) + suffix


START = Bound(Fraction(0))
END = Bound(Fraction(0), "epoch", from_end=True)


@dataclass(frozen=True)
class Window:
    """A group's state over ``[start, end)``.

    Args:
        trains: ``True`` = train (gate open), ``False`` = frozen (gate closed).
        start: first point of the window (inclusive).
        end: end of the window (exclusive).

    Example::

        Window(False, Bound(0), Bound(1))          # frozen@[0,1)
        Window.epochs(True, 1.5, None)             # train@[1.5,end)
    """

    trains: bool
    start: Bound = START
    end: Bound = END

    @staticmethod
    def epochs(trains: bool, start: float = 0, end: float = None) -> "Window":
        """Window in epochs; ``end=None`` means the end of the run."""
        return Window(trains, Bound(Fraction(str(start))), END if end is None else Bound(Fraction(str(end))))

    @staticmethod
    def steps(trains: bool, start: int = 0, end: int = None) -> "Window":
        """Window in optimizer steps; ``end=None`` means the end of the run."""
        return Window(trains, Bound(Fraction(start), "step"), END if end is None else Bound(Fraction(end), "step"))

    def format(self, group: str) -> str:
        gate = group.startswith("gate:")
        state = ("open" if self.trains else "closed") if gate else ("train" if self.trains else "frozen")
        if self.start == START and self.end == END:
            return state
        return f"{state}@[{self.start},{self.end})"


def _parse_window(text: str, group: str) -> Window:
    state, _, window = text.partition("@")
    if state not in _STATES:
        raise ValueError(f"group {group!r}: state {state!r} must be one of {sorted(_STATES)} (in {text!r})")
    if not window:
        return Window(_STATES[state])
    m = re.fullmatch(r"\[([^,\]]+),([^,\)]+)\)", window.replace(" ", ""))
    if not m:
        raise ValueError(f"group {group!r}: window {window!r} must look like [START,END), e.g. [0,1.5) or [1,end)")
    try:
        return Window(_STATES[state], Bound.parse(m.group(1)), Bound.parse(m.group(2)))
    except ValueError as e:
        raise ValueError(f"group {group!r}: {e}") from None


def _check_group_name(group: str) -> None:
    if group == TABLES:
        return
    for kind in GROUP_KINDS:
        if group.startswith(kind):
            if not group[len(kind) :]:
                raise ValueError(f"group {group!r} names nothing after {kind!r}")
            return
    raise ValueError(
        f"unknown group {group!r}: use 'tables', 'table:NAME', 'module:GLOB' or 'gate:NAME' "
        f"(or a preset: {', '.join(PRESETS)})"
    )


PRESETS: Dict[str, str] = {
    "joint": "tables=train",
    "delayed": "tables=frozen@[0,end-1) train@[end-1,end)",
    "early": "tables=train@[0,1) frozen@[1,end)",
    "frozen": "tables=frozen",
}


@dataclass(frozen=True)
class ResolvedWindow:
    """A window in whole steps: it covers steps ``start <= s < end``."""

    trains: bool
    start: int
    end: int


class FreezeSchedule:
    """Per-group training windows, independent of the run length until :meth:`resolve`.

    Args:
        groups: group -> windows, e.g. ``{"tables": [Window.epochs(False, 0, 1)]}``.
            Group names: ``tables``, ``table:NAME``, ``module:GLOB``, ``gate:NAME``.

    Example::

        s = FreezeSchedule({"tables": [Window.epochs(False, 0, 1), Window.epochs(True, 1)]})
        assert FreezeSchedule.parse(str(s)) == s
    """

    def __init__(self, groups: Mapping[str, Sequence[Window]] = ()) -> None:
        self.groups: Dict[str, Tuple[Window, ...]] = {}
        for group, windows in dict(groups).items():
            _check_group_name(group)
            if not windows:
                raise ValueError(f"group {group!r} has no window")
            self.groups[group] = tuple(windows)

    @staticmethod
    def preset(name: str) -> "FreezeSchedule":
        """One of ``joint``, ``delayed``, ``early``, ``frozen`` (see ``PRESETS``)."""
        if name not in PRESETS:
            raise ValueError(f"unknown freeze-schedule preset {name!r}; choose from {sorted(PRESETS)}")
        return FreezeSchedule.parse(PRESETS[name])

    @staticmethod
    def parse(text: str) -> "FreezeSchedule":
        """Parse the text form (see the module docstring); an empty text trains everything."""
        groups: Dict[str, List[Window]] = {}
        for entry in (e.strip() for e in text.split(";")):
            if not entry:
                continue
            if entry in PRESETS:
                entries = FreezeSchedule.preset(entry).groups.items()
            else:
                group, eq, phases = entry.partition("=")
                group = group.strip()
                if not eq or not phases.strip():
                    raise ValueError(
                        f"freeze schedule entry {entry!r} must be GROUP=PHASE [PHASE ...] or a preset "
                        f"({', '.join(PRESETS)})"
                    )
                _check_group_name(group)
                # Spaces inside a window ("[0, 1)") are allowed: split phases on "train"/"frozen" words.
                tokens = re.findall(r"[a-z]+(?:@\[[^\)]*\))?", phases.strip())
                if "".join(tokens).replace(" ", "") != phases.replace(" ", ""):
                    raise ValueError(f"group {group!r}: cannot parse phases {phases.strip()!r}")
                entries = [(group, [_parse_window(t, group) for t in tokens])]
            for group, windows in entries:
                if group in groups:
                    raise ValueError(f"group {group!r} appears twice in the freeze schedule {text!r}")
                groups[group] = list(windows)
        return FreezeSchedule(groups)

    def __str__(self) -> str:
        return "; ".join(f"{g}=" + " ".join(w.format(g) for w in ws) for g, ws in self.groups.items())

    def __repr__(self) -> str:
        return f"FreezeSchedule({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FreezeSchedule) and self.groups == other.groups

    def __call__(self) -> "FreezeSchedule":
        """Deprecated: ``freeze.schedule()`` keeps working for 0.2.x (it returns this schedule and warns); the
        schedule is the property ``FreezeScheduleWrapper.schedule``. Calling a schedule fails from 0.3.0."""
        warnings.warn(
            "FreezeScheduleWrapper.schedule is a property: write `freeze.schedule`, not `freeze.schedule()` "
            "(calling it stops working in dlrm-multiepoch 0.3.0)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self

    def resolve(self, steps_per_epoch: int, num_epochs: float) -> "ResolvedSchedule":
        """Turn every window into whole steps and validate it against the run length.

        Step ``s`` (0-based) is at time ``s / steps_per_epoch`` epochs; it is in window
        ``[a, b)`` when ``a <= s / steps_per_epoch < b``.

        Raises:
            ValueError: naming the group and window for inverted, overlapping or
                out-of-run windows.
        """
        if steps_per_epoch <= 0:
            raise ValueError(f"steps_per_epoch must be positive, got {steps_per_epoch}")
        if num_epochs <= 0:
            raise ValueError(f"num_epochs must be positive, got {num_epochs}")
        total = Fraction(str(num_epochs)) * steps_per_epoch
        if total.denominator != 1:
            raise ValueError(f"num_epochs {num_epochs} x steps_per_epoch {steps_per_epoch} is not a whole number of steps")
        total_steps = int(total)
        resolved: Dict[str, Tuple[ResolvedWindow, ...]] = {}
        for group, windows in self.groups.items():
            spans = []
            for w in windows:
                a, b = w.start.to_step(steps_per_epoch, total_steps), w.end.to_step(steps_per_epoch, total_steps)
                where = f"group {group!r} window {w.format(group)}"
                if a < 0 or b > total_steps:
                    raise ValueError(
                        f"{where} reaches beyond the run: steps [{_fmt_number(a)},{_fmt_number(b)}) "
                        f"but the run has {total_steps} steps ({num_epochs} epochs x {steps_per_epoch})"
                    )
                start, end = math.ceil(a), math.ceil(b)
                if start >= end:
                    raise ValueError(f"{where} is empty or inverted: steps [{start},{end})")
                spans.append((start, end, w, ResolvedWindow(w.trains, start, end)))
            spans.sort(key=lambda s: s[0])
            for (_, e1, w1, _), (s2, _, w2, _) in zip(spans, spans[1:]):
                if s2 < e1:
                    raise ValueError(f"group {group!r}: windows {w1.format(group)} and {w2.format(group)} overlap")
            resolved[group] = tuple(s[3] for s in spans)
        return ResolvedSchedule(resolved, total_steps, steps_per_epoch)


class ResolvedSchedule:
    """A schedule bound to a run length: the state of each group at each step.

    Args:
        windows: group -> sorted, disjoint step windows.
        total_steps: steps in the run.
        steps_per_epoch: steps in one epoch.
    """

    def __init__(self, windows: Mapping[str, Sequence[ResolvedWindow]], total_steps: int, steps_per_epoch: int) -> None:
        self.windows = {g: tuple(ws) for g, ws in windows.items()}
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch

    def state(self, group: str, step: int) -> Optional[bool]:
        """``True``/``False`` where a window of ``group`` covers ``step``, else ``None``."""
        for w in self.windows[group]:
            if w.start <= step < w.end:
                return w.trains
        return None

    def trains(self, group: str, step: int) -> bool:
        """Whether ``group`` trains (gate open) at ``step``; uncovered steps train."""
        state = self.state(group, step)
        return True if state is None else state
