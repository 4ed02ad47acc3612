"""TorchX component parameters taken from the training app's config dataclass.

A component in ``dlrm_multiepoch/components.py`` names the :class:`TrainConfig` fields
it offers as typed parameters; :func:`add_config_params` gives the function those
parameters (type, help and the app's default from the dataclass field), so nothing is
restated by hand. TorchX builds a component's command line from
``inspect.signature`` and its help from the docstring, both of which this sets; its
linter reads the defining file's source, where the function takes the values as
``**config``. Values left unset (None) are not passed, so the app's defaults apply.

Example::

    def train(*script_args: str, j: str = "1x2", **config: object) -> specs.AppDef:
        '''Train. Args: script_args: app flags; j: nodes x procs'''
        return dist.ddp(*config_flags(train, config, script_args), script="apps/train.py", j=j)

    add_config_params(train, ("dataset", "epochs"))   # train(epochs=3) -> --epochs=3
"""

import inspect
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from dlrm_multiepoch.train.config import config_fields

_PARAMS_ATTR = "__config_params__"


def add_config_params(fn: Callable[..., Any], names: Sequence[str]) -> None:
    """Give component ``fn`` keyword-only parameters ``names`` (``Optional[type]``, default None).

    They come right after ``fn``'s ``*args``; their help lines are appended to the
    ``Args:`` section of ``fn``'s docstring, which must be its last section.
    """
    fields = config_fields()
    unknown = [n for n in names if n not in fields]
    if unknown:
        raise ValueError(f"{fn.__name__}: {unknown} are not fields of TrainConfig or its sections")
    signature = inspect.signature(fn)
    own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    clash = [p.name for p in own if p.name in names]
    if clash:
        raise ValueError(f"{fn.__name__}: parameters {clash} are both its own and config fields")
    for f in (fields[n] for n in names):
        if f.kind not in (str, int, float):
            raise ValueError(f"{fn.__name__}: config field {f.name!r} is {f.kind.__name__}; pass it after --")
    added = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Optional[fields[n].kind])
        for n in names
    ]
    at = next((i + 1 for i, p in enumerate(own) if p.kind is inspect.Parameter.VAR_POSITIONAL), 0)
    fn.__signature__ = signature.replace(parameters=own[:at] + added + own[at:])  # type: ignore[attr-defined]
    lines = [f"    {f.name}: {f.help} (app default: {f.default!r})" for f in (fields[n] for n in names)]
    fn.__doc__ = inspect.cleandoc(fn.__doc__ or "") + "\n" + "\n".join(lines) + "\n"
    setattr(fn, _PARAMS_ATTR, tuple(names))


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
        elif not isinstance(value, kind) and not (kind is float and isinstance(value, int)):
            raise TypeError(f"--{name} must be {kind.__name__}, got {value!r}")
        # argparse keeps the last of repeated flags: a silent override is worse than an error.
        if any(a == f"--{name}" or a.startswith(f"--{name}=") for a in script_args):
            raise ValueError(
                f"--{name} is set both as a component parameter ({value!r}) and in the "
                f"pass-through arguments {list(script_args)}; set it once"
            )
        # One "--flag=value" token: a value starting with "-" (a negative seed) stays a value.
        flags.append(f"--{name}={value}")
    return flags
