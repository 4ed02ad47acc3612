"""One declaration for every option (a training-app flag, a sweep or search option, a launch setting)
and one writer each for argparse, argv and, in ``component_params.py``, TorchX component parameters.

An option is a dataclass field made by :func:`option`: default, help, spellings, choices and roles
(:data:`ROLES`: which TorchX components offer it, what the sweep or a search reserves, what a rerun or
a branch may change, what the dataset cache's key leaves out...). The lists the modules read
(``components.TRAIN_PARAMS``, ``start_point.SUFFIX_FIELDS``, ...) are derived from the roles
(``train/config.py``'s ``flags_with``, ``record_paths``); a role on a section's field in
``TrainConfig`` covers the section's every flag. A flag in a small text format is parsed once, by its
section's ``validate()``, into a :func:`parsed` field (not an option: records keep the text as given).
Plain argparse: tyro (torchtitan's) and jsonargparse (Lightning's) would change today's spellings and
``--help``, and write no TorchX component. Torch-free.

Example::

    @dataclass
    class PipelineConfig:
        sharding_types: str = option("table_wise", "sharding types the planner may use")
        progress_bar: bool = option(True, "show a progress bar", roles=(RERUN_MAY_CHANGE, BOOKKEEPING))
        sharding_type_list: Tuple[str, ...] = parsed()   # filled by validate()

    add_arguments(parser, options_of(PipelineConfig))   # --sharding_types, --progress_bar/--no-progress_bar
"""

import argparse
import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar

_PARSED = "parsed"
S = TypeVar("S")
MAX_SEED = 2**64 - 1  # the largest seed torch.manual_seed takes (numpy's generators take no negative one)

TRAIN_COMPONENT = "train_component"
SWEEP_SEARCH_COMPONENT = "sweep_search_component"
PREPROCESS_COMPONENT = "preprocess_component"
RESERVED_BY_SWEEP = "reserved_by_sweep"
RERUN_MAY_CHANGE = "rerun_may_change"
RESERVED_BY_SEARCH = "reserved_by_search"
VARIES_PER_LAUNCH = "varies_per_launch"
BRANCH_MAY_CHANGE = "branch_may_change"
IGNORED_BY_PRETRAINING = "ignored_by_pretraining"
CHANGES_SHAPES = "changes_shapes"
STARTS_OR_PAUSES = "starts_or_pauses"
BOOKKEEPING = "bookkeeping"
OUTSIDE_CACHE_KEY = "outside_cache_key"
CACHE_KEY_IF_SET = "cache_key_if_set"
ROLES: Dict[str, str] = {  # each: what it means (the list derived from it)
    TRAIN_COMPONENT: "a parameter of the TorchX component dlrm_multiepoch.train (components.py TRAIN_PARAMS)",
    SWEEP_SEARCH_COMPONENT: "a parameter of the components .sweep and .search; a flag: of every run (SWEEP_PARAMS)",
    PREPROCESS_COMPONENT: "a parameter of the component .preprocess (components.py PREPROCESS_PARAMS)",
    RESERVED_BY_SWEEP: "the sweep sets it for every run, so the common flags may not (sweep/plan.py SWEEP_FLAGS)",
    RERUN_MAY_CHANGE: "where a run writes, what it shows, how a launch starts or pauses: a rerun of a sweep or "
    "search may change it (sweep/manifest.py PLACE_FLAGS)",
    RESERVED_BY_SEARCH: "a search sets it for each branch, so the common flags may not (search/command.py)",
    VARIES_PER_LAUNCH: "a search sets it for each launch of a branch, so a branch's run folder may record another "
    "value (search/checks.py LAUNCH_FLAGS)",
    BRANCH_MAY_CHANGE: "a branch (--start_from) may set it otherwise than its parent (train/start_point.py)",
    IGNORED_BY_PRETRAINING: "pre-training does not apply it, and says so when set (train/pretrain.py NOT_APPLIED)",
    CHANGES_SHAPES: "it changes parameter or optimizer-state shapes: a checkpoint loads only into a run with its "
    "value (train/checkpoint/compat.py SHAPE_FIELDS)",
    STARTS_OR_PAUSES: "how this launch starts or pauses: a resume does not list it as a change (compat.py)",
    BOOKKEEPING: "it names, places or logs a run, or picks its seed: compare groups runs across it (report/groups.py)",
    OUTSIDE_CACHE_KEY: "where files live or how fast they are read: not in the dataset cache's key (data/config.py)",
    CACHE_KEY_IF_SET: "in the dataset cache's key only when set: caches made before the flag existed stay valid",
}


def option(default: Any = dataclasses.MISSING, help: str = "", *, flags: Sequence[str] = (), choices: Sequence[str] = (),
           roles: Sequence[str] = (), positional: bool = False, factory: Any = None) -> Any:  # fmt: skip
    """A dataclass field that is an option.

    Args:
        default: its value when not given (none: required); ``factory`` makes a dict or list default.
        help: one line for ``--help`` and the TorchX component's docstring (``{unit}``: a run, a branch...).
        flags: its spellings (default ``--NAME``; a bool's ``--NAME`` and ``--no-NAME``).
        choices: the values argparse accepts. roles: names from :data:`ROLES`.
        positional: given by position on the command line (``experiment_dir``).
    """
    metadata = {"help": help, "flags": tuple(flags), "choices": tuple(choices), "roles": tuple(roles), "positional": positional}
    _check_roles("option", roles)
    kwargs = {"default": default} if factory is None else {"default_factory": factory}
    return dataclasses.field(metadata=metadata, **kwargs)


def parsed(factory: Any = None) -> Any:
    """A field filled from options' text (by ``validate()``, or a resolve step): not an option, not compared."""
    kwargs = {"default": None} if factory is None else {"default_factory": factory}
    return dataclasses.field(init=False, repr=False, compare=False, metadata={_PARSED: True}, **kwargs)


def split_list(value: str) -> List[str]:
    """A comma-separated flag's entries, stripped; empty entries dropped (``"a, b,"`` -> ``["a", "b"]``)."""
    return [v.strip() for v in value.split(",") if v.strip()]


def flag_fields(section: Any) -> List[dataclasses.Field]:
    """The fields of ``section`` (a dataclass or its instance) that are options, in order."""
    return [f for f in dataclasses.fields(section) if not f.metadata.get(_PARSED)]


def flag_name(f: dataclasses.Field) -> str:
    """The option of field ``f``: its first ``--`` spelling without the dashes, else the field's name."""
    return next((s[2:] for s in f.metadata.get("flags", ()) if s.startswith("--")), f.name)


def roles_of(f: dataclasses.Field) -> FrozenSet[str]:
    """The roles of field ``f`` (an option, or a section's field in ``TrainConfig``); an unknown one raises
    ``ValueError`` (a typo would silently leave a list)."""
    return _check_roles(f"field {f.name!r}", f.metadata.get("roles", ()))


def _check_roles(what: str, roles: Iterable[str]) -> FrozenSet[str]:
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise ValueError(f"{what}: unknown roles {unknown}; the roles are {', '.join(ROLES)}")
    return frozenset(roles)


def flag_values(section: Any) -> Dict[str, Any]:
    """``{flag: value}`` of a section instance, parsed fields left out."""
    return {flag_name(f): getattr(section, f.name) for f in flag_fields(section)}


@dataclass(frozen=True)
class Option:
    """One option as the writers read it (:func:`options_of`; ``config_fields()["batch_size"]``).

    Args:
        name: the flag without ``--``: the argparse dest, the record key, the component parameter.
        kind: the value's type, Optional removed (int, float, str, bool; dict and list are text on a command line).
        section, path: its class's name and its dotted path (``loader.batch_size``).
        roles: its field's, and its section's in ``TrainConfig``.
        annotation: its type as declared (``Optional[str]``, ``Dict[str, str]``).
    """

    name: str
    kind: type
    default: Any
    help: str
    section: str
    path: str
    roles: FrozenSet[str] = frozenset()
    flags: Tuple[str, ...] = ()  # empty: positional
    choices: Tuple[str, ...] = ()
    annotation: Any = None

    @property
    def positional(self) -> bool:
        return not self.flags


def options_of(
    cls: type, prefix: str = "", leaves: Optional[Sequence[dataclasses.Field]] = None, roles: FrozenSet[str] = frozenset()
) -> List[Option]:
    """The options of dataclass ``cls`` (``leaves``: some of its fields), their paths starting with ``prefix``
    (a section's name and a dot), each with its field's roles and ``roles``."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in flag_fields(cls) if leaves is None else leaves:
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        name, kind, meta = flag_name(f), _base(hints[f.name]), f.metadata
        flags = meta.get("flags") or ((f"--{name}", f"--no-{name}") if kind is bool else (f"--{name}",))
        out.append(Option(name, kind, default, meta.get("help", ""), cls.__name__, prefix + f.name, roles | roles_of(f),
                          () if meta.get("positional") else flags, meta.get("choices", ()), hints[f.name]))  # fmt: skip
    return out


def _base(kind: Any) -> Any:
    """``Optional[X]`` -> ``X``; ``Dict[str, str]`` -> ``dict``."""
    if type(None) in typing.get_args(kind):
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    return typing.get_origin(kind) or kind


def add_arguments(parser: Any, options: Iterable[Option], unit: str = "") -> None:
    """One argument per option on ``parser`` (or an argument group), ``{unit}`` in a help said as ``unit``. A
    bool spelled ``--no-NAME`` too takes either, one spelled only ``--NAME`` switches on; a dict or a list is
    text here (:func:`from_args` parses it)."""
    for o in options:
        help = o.help.replace("{unit}", unit)
        if o.positional:
            parser.add_argument(o.name, help=help)
        elif o.kind is bool:
            on = [s for s in o.flags if not s.startswith("--no-")]
            action = argparse.BooleanOptionalAction if len(on) < len(o.flags) else "store_true"
            parser.add_argument(*on, dest=o.name, action=action, default=o.default, help=help)
        else:
            text = o.kind in (dict, list)
            parser.add_argument(*o.flags, dest=o.name, type=str if text else o.kind, default="" if text else o.default,
                                choices=o.choices or None, help=help)  # fmt: skip


C = TypeVar("C")


def from_args(cls: Type[C], args: argparse.Namespace) -> C:
    """The options of ``cls`` that :func:`add_arguments` parsed into ``args``, as a ``cls`` (not checked): a
    list's text ``a,b`` split, a dict's ``A=1,B=2`` too (``ValueError`` naming the flag for an entry without
    ``=``: TorchX would fold it into the one before)."""
    values = {}
    for o in options_of(cls):
        value = getattr(args, o.name)
        if o.kind is list:
            value = split_list(value)
        elif o.kind is dict:
            entries = [e for e in value.split(",") if e.strip()]
            bad = [e for e in entries if "=" not in e or not e.split("=", 1)[0].strip()]
            if bad:
                raise ValueError(f"--{o.name} {value!r}: expected NAME=VALUE pairs separated by commas, got {bad[0]!r}")
            value = {k.strip(): v for k, v in (e.split("=", 1) for e in entries)}
        values[o.path.rsplit(".", 1)[-1]] = value
    return cls(**values)


def to_argv(options: Iterable[Option], values: Mapping[str, Any]) -> List[str]:
    """``values`` by option name (None or absent: left out) as the command line :func:`add_arguments` parses
    back, in the options' order: a positional's value, a bool's ``--NAME`` or ``--no-NAME``, else one token
    ``--NAME=VALUE`` (a value starting with "-", a negative seed, stays a value; a dict as ``A=1,B=2``)."""
    argv = []
    for o in options:
        value = values.get(o.name)
        if value is None:
            continue
        if o.positional:
            argv.append(str(value))
        elif o.kind is bool:
            argv.append(f"--{o.name}" if value else f"--no-{o.name}")
        else:
            value = [f"{k}={v}" for k, v in value.items()] if isinstance(value, dict) else value
            argv.append(f"--{o.name}={','.join(value) if isinstance(value, list) else value}")
    return argv


def argv_of(instance: Any, role: Optional[str] = None) -> List[str]:
    """The options of ``instance`` (with ``role``) that differ from their defaults, positional ones always, as
    :func:`to_argv` writes them: a command leaves the rest to its own defaults."""
    options = [o for o in options_of(type(instance)) if role is None or role in o.roles]
    return to_argv(options, {o.name: value for o in options if (value := getattr(instance, o.path)) != o.default})


def validated(section: S, parse_only: bool = False) -> S:
    """``section`` with its parsed fields filled, unless they are: by its ``validate()`` (which takes
    no arguments and fills every parsed field: the data and model sections), or with ``parse_only``
    by its ``parse_flags()`` alone, for builders that check the rest themselves (the model's).

    Example::

        validated(DataConfig(dense_cols="price,age")).dense_col_list   # ("price", "age")
    """
    if any(getattr(section, f.name) is None for f in dataclasses.fields(section) if f.metadata.get(_PARSED)):
        section.parse_flags() if parse_only else section.validate()  # type: ignore[attr-defined]
    return section
