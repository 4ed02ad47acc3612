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
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Type, TypeVar

from dlrm_multiepoch.config_section import options_of, to_argv
from dlrm_multiepoch.train.config import TrainConfig, config_fields

_ATTR = "__option_params__"  # on a component: {class: {parameter: default}}
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
    options = [o for o in (config_fields().values() if app else options_of(cls)) if role in o.roles]
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
    fn.__dict__.setdefault(_ATTR, {})[cls] = {p.name: p.default for p in added}


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
    given: Dict[str, Any] = getattr(fn, _ATTR)[cls]
    values = {}
    for o in options_of(cls):
        if o.name not in given:
            continue
        value = params.pop(o.name, given[o.name])
        if value is inspect.Parameter.empty:
            raise TypeError(f"--{o.name} is required")
        if value is None and isinstance(o.default, (dict, list)):
            value = o.default
        if value is not None and o.kind in (str, int, float):
            _check_kind(o.name, value, o.kind)
        values[o.path] = value
    options = cls(**values)
    options.check()  # type: ignore[attr-defined]
    return options


def _check_kind(name: str, value: Any, kind: type) -> None:
    """Refuse ``value`` unless it is a ``kind``; an int passes for a float."""
    fits = isinstance(value, kind) or (kind is float and isinstance(value, int))
    if not fits or (isinstance(value, bool) and kind is not bool):  # Python counts a bool an int; a flag does not
        raise TypeError(f"--{name} must be {kind.__name__}, got {value!r}")


def app_flags(fn: Callable[..., Any], values: Dict[str, Any], script_args: Sequence[str] = ()) -> List[str]:
    """``--name=value`` for each app flag ``fn`` offers (:func:`add_params` with :class:`TrainConfig`) that is
    set in ``values``, checked against its type.

    Raises:
        TypeError: a name that is not a parameter of ``fn``, or a value of the wrong type.
        ValueError: a string that does not parse as the flag's type, or a flag also in ``script_args``.
    """
    names = getattr(fn, _ATTR)[TrainConfig]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise TypeError(f"{fn.__name__}() got unexpected keyword argument(s) {unknown}")
    options = [o for name, o in config_fields().items() if name in names]
    for o in options:
        value = values.get(o.name)
        if value is None:
            continue
        # TorchX's CLI hands Optional[int] and Optional[float] values over as strings:
        # check them here, so a typo fails at submission rather than after the job queued.
        if isinstance(value, str) and o.kind is not str:
            try:
                values[o.name] = o.kind(value)
            except ValueError:
                raise ValueError(f"--{o.name} must be {o.kind.__name__}, got {value!r}") from None
        else:
            _check_kind(o.name, value, o.kind)
        # argparse keeps the last of repeated flags: a silent override is worse than an error.
        if any(a == f"--{o.name}" or a.startswith(f"--{o.name}=") for a in script_args):
            raise ValueError(
                f"--{o.name} is set both as a component parameter ({value!r}) and in the "
                f"pass-through arguments {list(script_args)}; set it once"
            )
    return to_argv(options, values)
