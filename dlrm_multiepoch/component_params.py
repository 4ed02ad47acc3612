"""TorchX component parameters written from options (:mod:`~dlrm_multiepoch.config_section`) that have the
component's role: the training app's flags (:class:`TrainConfig`: ``Optional``, default None so that the
app's own default applies, passed on as ``--NAME=VALUE`` by :func:`app_flags`), and the launch settings
and the sweep's and search's own options (their type and default, taken back as a checked instance by
:func:`take_options`). TorchX builds a component's command line from ``inspect.signature`` and its help
from the docstring, both of which :func:`add_params` sets; its linter reads the defining file's source,
where the function takes the values as ``**params``.

Example::

    def train(*script_args: str, **params: object) -> specs.AppDef:
        '''Train. Args: script_args: app flags'''
        options = take_options(train, LaunchOptions, params)
        return dist.ddp(*app_flags(train, params, script_args), **options.component_kwargs())

    add_params(train, LaunchOptions, TRAIN_COMPONENT, unit="job")   # train(j="2x4")
    add_params(train, TrainConfig, TRAIN_COMPONENT)                 # train(epochs=3) -> --epochs=3
"""

import dataclasses
import inspect
import typing
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar

from dlrm_multiepoch.config_section import Option, options_of, to_argv
from dlrm_multiepoch.train.config import TrainConfig, config_fields

_ATTR = "__option_params__"  # on a component: {class: {name: its parameter}}
O = TypeVar("O")


def add_params(
    fn: Callable[..., Any], cls: type, role: str, unit: str = "", defaults: Optional[Mapping[str, Any]] = None,
    first: bool = False,
) -> None:  # fmt: skip
    """Give component ``fn`` a keyword-only parameter per option of ``cls`` with ``role``, after its own keyword
    parameters (``first``: right after its ``*args``), and their help at the end of its docstring's ``Args:``
    section, which must be its last (``first``: right after the ``*args``' entry).

    Args:
        cls: :class:`TrainConfig` (the app's flags: ``Optional[type]``, default None, "(app default: ...)"), or
            a dataclass of options whose values the component takes (:func:`take_options`): their type and
            default (or ``defaults``'), None for a dict or a list (TorchX's CLI parses ``A=1,B=2`` and ``a,b``).
        unit: what ``{unit}`` in a help says (a job, a run, a branch).
    """
    app = cls is TrainConfig
    options = [o for o in _options(cls) if role in o.roles]
    added, lines = [], []
    for o in options:
        if app:
            if o.kind not in (str, int, float):
                raise ValueError(f"{fn.__name__}: config field {o.name!r} is {o.kind.__name__}; pass it after --")
            default, annotation, help = None, Optional[o.kind], f"{o.help} (app default: {o.default!r})"
        else:
            default, annotation, help = (defaults or {}).get(o.name, o.default), o.annotation, o.help.replace("{unit}", unit)
            if isinstance(default, (dict, list)):
                default, annotation = None, Optional[o.annotation]
        empty = default is dataclasses.MISSING  # a positional option (the experiment folder) is required
        added.append(inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                                       default=inspect.Parameter.empty if empty else default))  # fmt: skip
        lines.append(f"    {o.name}: {help}")
    _add_parameters(fn, added, lines, first)
    fn.__dict__.setdefault(_ATTR, {})[cls] = {p.name: p for p in added}


def _add_parameters(fn: Callable[..., Any], added: List[inspect.Parameter], lines: List[str], first: bool) -> None:
    signature = inspect.signature(fn)
    own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    clash = [p.name for p in own if p.name in {a.name for a in added}]
    if clash:
        raise ValueError(f"{fn.__name__}: parameters {clash} are given twice")
    at = sum(p.kind is inspect.Parameter.VAR_POSITIONAL for p in own) if first else len(own)
    fn.__signature__ = signature.replace(parameters=own[:at] + added + own[at:])  # type: ignore[attr-defined]
    doc = inspect.cleandoc(fn.__doc__ or "").split("\n")
    at = len(doc)
    if first:  # after the first entry of Args: and its continuation lines (indented deeper)
        at = doc.index("Args:") + 2
        while at < len(doc) and doc[at].startswith("        "):
            at += 1
    fn.__doc__ = "\n".join(doc[:at] + lines + doc[at:]) + "\n"


def take_options(fn: Callable[..., Any], cls: Type[O], params: Dict[str, Any]) -> O:
    """Take ``fn``'s parameters of ``cls`` (:func:`add_params`) out of ``params`` as a checked ``cls``.

    Raises:
        ValueError: naming the option (``--seeds``, ``-j``, ...) and what it expects.
        TypeError: a value of another type (``epochs="3"`` from Python; TorchX's CLI hands over typed values),
            or a required option missing.
    """
    options = cls(**{o.path: value for o, value in _take(fn, cls, params)})
    options.check()  # type: ignore[attr-defined]
    return options


def app_flags(fn: Callable[..., Any], values: Dict[str, Any], script_args: Sequence[str] = ()) -> List[str]:
    """``--name=value`` for each app flag ``fn`` offers (:func:`add_params` with :class:`TrainConfig`) that is
    set in ``values``, checked against its type.

    Raises:
        TypeError: a name that is not a parameter of ``fn``, or a value of the wrong type.
        ValueError: a string that does not parse as the flag's type, or a flag also in ``script_args``.
    """
    rest = dict(values)
    given = [(o, value) for o, value in _take(fn, TrainConfig, rest) if value is not None]
    if rest:
        raise TypeError(f"{fn.__name__}() got unexpected keyword argument(s) {sorted(rest)}")
    for o, value in given:  # argparse keeps the last of repeated flags: a silent override is worse than an error
        if any(a == f"--{o.name}" or a.startswith(f"--{o.name}=") for a in script_args):
            raise ValueError(
                f"--{o.name} is set both as a component parameter ({value!r}) and in the "
                f"pass-through arguments {list(script_args)}; set it once"
            )
    return to_argv([o for o, _ in given], {o.name: value for o, value in given})


def _take(fn: Callable[..., Any], cls: type, params: Dict[str, Any]) -> List[Tuple[Option, Any]]:
    """``fn``'s parameters of ``cls``'s options popped from ``params`` (their defaults where absent), each
    value checked against its option's type; a dict's or a list's None is its option's default."""
    offered: Dict[str, inspect.Parameter] = getattr(fn, _ATTR)[cls]
    taken = []
    for o in _options(cls):
        if o.name not in offered:
            continue
        parameter = offered[o.name]
        value = params.pop(o.name, parameter.default)
        if value is inspect.Parameter.empty:
            raise TypeError(f"--{o.name} is required")
        if value is None and isinstance(o.default, (dict, list)):
            value = o.default
        if isinstance(value, str) and o.kind in (int, float) and type(None) in typing.get_args(parameter.annotation):
            # TorchX's CLI hands an Optional[int] or Optional[float] over as a string: parsed here, so that a
            # typo fails at submission rather than after the job queued.
            try:
                value = o.kind(value)
            except ValueError:
                raise ValueError(f"--{o.name} must be {o.kind.__name__}, got {value!r}") from None
        fits = value is None or isinstance(value, o.kind) or (o.kind is float and isinstance(value, int))
        if o.kind in (str, int, float) and (not fits or (isinstance(value, bool) and o.kind is not bool)):
            raise TypeError(f"--{o.name} must be {o.kind.__name__}, got {value!r}")  # Python's bool is an int; a flag's is not
        taken.append((o, value))
    return taken


def _options(cls: type) -> List[Option]:
    """The options of ``cls``: :class:`TrainConfig`'s flags (``config_fields``), or a dataclass of options."""
    return list(config_fields().values()) if cls is TrainConfig else options_of(cls)
