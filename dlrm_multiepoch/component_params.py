"""TorchX component parameters taken from the dataclasses that define them: the training
app's config (:class:`TrainConfig`), the launch settings (:class:`LaunchOptions`) and the
sweep's and search's own options (:mod:`~dlrm_multiepoch.command_options`).

A component in ``dlrm_multiepoch/components.py`` offers the config fields with its role
(:func:`add_config_params`: ``Optional[type]``, default None, so the app's defaults
apply), the launch settings it takes (:func:`add_launch_params`: the setting's type
and default) and its command's own options (:func:`add_option_params`: their type and
default), so nothing is restated by hand. TorchX builds a component's command line
from ``inspect.signature`` and its help from the docstring, both of which these set; its
linter reads the defining file's source, where the function takes the values as
``**params``; :func:`take_options`, :func:`take_launch_options` and :func:`config_flags`
split them again.

Example::

    def train(*script_args: str, **params: object) -> specs.AppDef:
        '''Train. Args: script_args: app flags'''
        options = take_launch_options(train, params)
        return dist.ddp(*config_flags(train, params, script_args), **options.component_kwargs())

    add_launch_params(train, ("j", "cpu"), unit="job")   # train(j="2x4")
    add_config_params(train, ("dataset", "epochs"))      # train(epochs=3) -> --epochs=3
"""

import dataclasses
import inspect
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type

from dlrm_multiepoch.command_options import ExperimentOptions, option_fields, option_help
from dlrm_multiepoch.launch_options import LaunchOptions, launch_fields
from dlrm_multiepoch.train.config import config_fields

_PARAMS_ATTR = "__config_params__"
_LAUNCH_ATTR = "__launch_params__"
_OPTIONS_ATTR = "__command_options__"


def add_option_params(fn: Callable[..., Any], cls: Type[ExperimentOptions]) -> None:
    """Give component ``fn`` the options of ``cls`` its component offers, right after its ``*args`` (their type and
    default; a positional option is a required keyword), and their help right after the ``*args`` entry of its
    docstring's ``Args:``. Call first: the launch and config parameters come after ``fn``'s own."""
    added, lines = [], []
    for f in option_fields(cls, component=True):
        default = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        added.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=f.type))
        lines.append(f"    {f.name}: {option_help(cls, f)}")
    _add_parameters(fn, added, lines, first=True)
    setattr(fn, _OPTIONS_ATTR, cls)


def take_options(fn: Callable[..., Any], params: Dict[str, Any]) -> ExperimentOptions:
    """Take ``fn``'s command options out of ``params`` as checked options (:func:`add_option_params`' class).

    Raises:
        ValueError: naming the option (``--seeds``, ``--eta``, ...) and what it expects.
        TypeError: a value of another type (``epochs="3"`` from Python; TorchX's CLI hands over typed values), or
            no ``experiment_dir``.
    """
    cls: Type[ExperimentOptions] = getattr(fn, _OPTIONS_ATTR)
    values = {f.name: params.pop(f.name) for f in option_fields(cls, component=True) if f.name in params}
    for f in option_fields(cls, component=True):
        value = values.get(f.name, f.default)
        if value is dataclasses.MISSING:  # a positional option (the experiment folder) has no default
            raise TypeError(f"--{f.name} is required")
        _check_kind(f.name, value, f.type)
    options = cls(**values)
    options.check()
    return options


def add_config_params(fn: Callable[..., Any], names: Sequence[str]) -> None:
    """Give component ``fn`` keyword-only parameters ``names`` (``Optional[type]``, default None).

    They come right after ``fn``'s ``*args``; their help lines are appended to the
    ``Args:`` section of ``fn``'s docstring, which must be its last section.
    """
    fields = config_fields()
    unknown = [n for n in names if n not in fields]
    if unknown:
        raise ValueError(f"{fn.__name__}: {unknown} are not fields of TrainConfig or its sections")
    for f in (fields[n] for n in names):
        if f.kind not in (str, int, float):
            raise ValueError(f"{fn.__name__}: config field {f.name!r} is {f.kind.__name__}; pass it after --")
    added = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Optional[fields[n].kind])
        for n in names
    ]
    lines = [f"    {f.name}: {f.help} (app default: {f.default!r})" for f in (fields[n] for n in names)]
    _add_parameters(fn, added, lines)
    setattr(fn, _PARAMS_ATTR, tuple(names))


def add_launch_params(
    fn: Callable[..., Any], names: Sequence[str], unit: str, defaults: Optional[Mapping[str, Any]] = None
) -> None:
    """Give component ``fn`` keyword-only parameters ``names`` of :class:`LaunchOptions`: its type and
    default (or ``defaults``), its help (``{unit}``: what one launch is: job, run, branch).

    Dicts and lists default to None (TorchX's CLI parses ``A=1,B=2`` and ``a,b``); call
    before :func:`add_config_params`, so the launch parameters come first.
    """
    settings = {f.name: f for f in launch_fields()}
    defaults = defaults or {}
    unknown = [n for n in [*names, *defaults] if n not in settings]
    if unknown:
        raise ValueError(f"{fn.__name__}: {unknown} are not LaunchOptions settings")
    base = LaunchOptions()
    added, lines = [], []
    for f in (settings[n] for n in names):
        default = defaults.get(f.name, getattr(base, f.name))
        kind = f.type
        if isinstance(default, (dict, list)):
            default, kind = None, Optional[f.type]
        added.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind))
        lines.append(f"    {f.name}: {f.metadata['help'].replace('{unit}', unit)}")
    _add_parameters(fn, added, lines)
    setattr(fn, _LAUNCH_ATTR, {p.name: p.default for p in added})


def _add_parameters(fn: Callable[..., Any], added: List[inspect.Parameter], lines: List[str], first: bool = False) -> None:
    """Insert ``added`` after ``fn``'s own keyword parameters (before ``**params``), or with ``first`` right after
    its ``*args``; put their help ``lines`` at the end of the docstring's ``Args:`` section, which must be its
    last, or with ``first`` right after its first entry (the ``*args``')."""
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


def take_launch_options(fn: Callable[..., Any], params: Dict[str, Any]) -> LaunchOptions:
    """Take ``fn``'s launch parameters out of ``params`` (the rest are config values) as checked
    :class:`LaunchOptions`; a bad value is refused naming its flag.

    Raises:
        ValueError: naming the parameter (``-j``, ``--cpu``, ...) and what it expects.
        TypeError: a number of another type (``cpu="4"`` from Python).
    """
    given: Dict[str, Any] = getattr(fn, _LAUNCH_ATTR)
    values = {name: params.pop(name, default) for name, default in given.items()}
    base = dataclasses.asdict(LaunchOptions())
    options = LaunchOptions(**{k: base[k] if v is None and isinstance(base[k], (dict, list)) else v for k, v in values.items()})
    for name in ("cpu", "gpu", "memMB", "max_retries"):  # TorchX's CLI hands ints over as ints; Python callers may not
        _check_kind(name, getattr(options, name), int)
    options.check()
    return options


def _check_kind(name: str, value: Any, kind: type) -> None:
    """Refuse ``value`` unless it is a ``kind``; an int passes for a float."""
    fits = isinstance(value, kind) or (kind is float and isinstance(value, int))
    if not fits or (isinstance(value, bool) and kind is not bool):  # Python counts a bool an int; a flag does not
        raise TypeError(f"--{name} must be {kind.__name__}, got {value!r}")


def config_flags(fn: Callable[..., Any], values: Dict[str, Any], script_args: Sequence[str] = ()) -> List[str]:
    """``--name=value`` for each config parameter of ``fn`` that is set, checked against its field type.

    Raises:
        TypeError: a name that is not a config parameter of ``fn``, or a value of the wrong type.
        ValueError: a string that does not parse as the field's type, or a flag also in ``script_args``.
    """
    names: Tuple[str, ...] = getattr(fn, _PARAMS_ATTR)
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise TypeError(f"{fn.__name__}() got unexpected keyword argument(s) {unknown}")
    fields = config_fields()
    flags = []
    for name in names:
        value = values.get(name)
        if value is None:
            continue
        kind = fields[name].kind
        # TorchX's CLI hands Optional[int] and Optional[float] values over as strings:
        # check them here, so a typo fails at submission rather than after the job queued.
        if isinstance(value, str) and kind is not str:
            try:
                value = kind(value)
            except ValueError:
                raise ValueError(f"--{name} must be {kind.__name__}, got {value!r}") from None
        else:
            _check_kind(name, value, kind)
        # argparse keeps the last of repeated flags: a silent override is worse than an error.
        if any(a == f"--{name}" or a.startswith(f"--{name}=") for a in script_args):
            raise ValueError(
                f"--{name} is set both as a component parameter ({value!r}) and in the "
                f"pass-through arguments {list(script_args)}; set it once"
            )
        # One "--flag=value" token: a value starting with "-" (a negative seed) stays a value.
        flags.append(f"--{name}={value}")
    return flags
