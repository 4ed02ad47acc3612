"""What every config section shares: flag fields, and the parsed values validation fills.

A section is a dataclass whose fields are ``--flags`` (the flag is the field's name,
or ``metadata["flag"]`` where the section's name would repeat it: the pipeline
section's ``name`` is ``--pipeline``). A flag in a small text format is parsed ONCE, by
the section's ``validate()``, into a :func:`parsed` field next to it; builders read the
parsed value. Parsed fields are not flags: :func:`flag_fields` and :func:`flag_values`
leave them out, so run records hold the flags' text exactly as given. A builder that
may receive a section nobody validated (built directly, or copied by
``dataclasses.replace``, which resets parsed fields) reads it through :func:`validated`.

A flag's **roles** beyond parsing (which TorchX components offer it, whether the sweep or
a search sets it, whether it places a run, whether a branch or pre-training may differ
in it...) are ``metadata["roles"]`` of its field, names from :data:`ROLES`; a role on a
section's field in ``TrainConfig`` covers every flag of the section. The lists each
module reads (``components.TRAIN_PARAMS``, ``start_point.SUFFIX_FIELDS``, ...) are derived
from them (:func:`~dlrm_multiepoch.train.config.flags_with`), so a new flag is one field.

Example::

    @dataclass
    class PipelineConfig:
        sharding_types: str = field(default="table_wise", metadata={"help": "..."})
        sharding_type_list: Tuple[str, ...] = parsed()   # filled by validate()

    flag_values(PipelineConfig())   # {"sharding_types": "table_wise"}

    # a flag a rerun may change, and compare groups runs across (MetricsConfig's):
    progress_bar: bool = field(default=True, metadata={"help": "...", "roles": (PLACES, SUFFIX, BOOKKEEPING)})
"""

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, TypeVar, get_type_hints

_PARSED = "parsed"
S = TypeVar("S")
MAX_SEED = 2**64 - 1  # the largest seed torch.manual_seed takes (numpy's generators take no negative one)

# A flag's roles (``metadata["roles"]``), each with what it means and the list derived from it.
TRAIN_COMPONENT = "train_component"
RUNS_COMPONENT = "runs_component"
PREPROCESS_COMPONENT = "preprocess_component"
SWEEP_SETS = "sweep_sets"
PLACES = "places"
SEARCH_SETS = "search_sets"
SEARCH_LAUNCH = "search_launch"
SUFFIX = "suffix"
NOT_PRETRAINED = "not_pretrained"
SHAPES = "shapes"
STARTS = "starts"
BOOKKEEPING = "bookkeeping"
ROLES: Dict[str, str] = {
    TRAIN_COMPONENT: "a typed parameter of the TorchX component dlrm_multiepoch.train, any other flag going after "
    "-- (components.py TRAIN_PARAMS)",
    RUNS_COMPONENT: "a typed parameter of the components dlrm_multiepoch.sweep and .search: common to every run "
    "(components.py SWEEP_PARAMS)",
    PREPROCESS_COMPONENT: "a typed parameter of the component dlrm_multiepoch.preprocess (components.py "
    "PREPROCESS_PARAMS)",
    SWEEP_SETS: "the sweep sets it for every run, so the common flags may not (sweep/plan.py SWEEP_FLAGS)",
    PLACES: "where a run writes, what it shows, how a launch starts or pauses: not what the run is, so a rerun "
    "of a sweep or search may change it (sweep/manifest.py PLACE_FLAGS)",
    SEARCH_SETS: "a search sets it for each branch (its schedule, its checkpoints), so the common flags may not "
    "(search/command.py BRANCH_FLAGS)",
    SEARCH_LAUNCH: "a search sets it for each launch of a branch (where it pauses, what it keeps, where it "
    "starts), so a branch's run folder may record another value (search/checks.py LAUNCH_FLAGS)",
    SUFFIX: "a branch (--start_from) may set it otherwise than its parent: its schedule suffix, folder, launch, "
    "evaluation, logging, checkpoints, where its data lives (train/start_point.py SUFFIX_FIELDS)",
    NOT_PRETRAINED: "pre-training does not apply it, and says so when it is set (train/pretrain.py NOT_APPLIED)",
    SHAPES: "it changes parameter or optimizer-state shapes: a checkpoint loads only into a run with its value "
    "(train/checkpoint/compat.py SHAPE_FIELDS)",
    STARTS: "how this launch starts or pauses: a resume does not list it among the changed settings "
    "(train/checkpoint/compat.py START_FIELDS)",
    BOOKKEEPING: "it names, places or logs a run, or picks its seed: compare puts runs that differ only in it "
    "together (report/groups.py BOOKKEEPING)",
}


def split_list(value: str) -> List[str]:
    """A comma-separated flag's entries, stripped; empty entries dropped (``"a, b,"`` -> ``["a", "b"]``)."""
    return [v.strip() for v in value.split(",") if v.strip()]


def parsed() -> Any:
    """A field validation fills from a flag's text: not a flag, not compared, not in records."""
    return dataclasses.field(default=None, init=False, repr=False, compare=False, metadata={_PARSED: True})


def flag_fields(section: Any) -> List[dataclasses.Field]:
    """The fields of ``section`` (a dataclass or its instance) that are flags, in order."""
    return [f for f in dataclasses.fields(section) if not f.metadata.get(_PARSED)]


def flag_name(f: dataclasses.Field) -> str:
    """The flag of field ``f`` (without ``--``)."""
    return f.metadata.get("flag", f.name)


def roles_of(f: dataclasses.Field) -> FrozenSet[str]:
    """The roles ``metadata["roles"]`` gives field ``f`` (a flag, or a section's field in ``TrainConfig``).

    Raises:
        ValueError: a role that is not in :data:`ROLES` (a typo would silently leave a list).
    """
    roles = frozenset(f.metadata.get("roles", ()))
    unknown = sorted(roles - set(ROLES))
    if unknown:
        raise ValueError(f"field {f.name!r}: unknown roles {unknown}; the roles are {', '.join(ROLES)}")
    return roles


def flag_values(section: Any) -> Dict[str, Any]:
    """``{flag: value}`` of a section instance, parsed fields left out."""
    return {flag_name(f): getattr(section, f.name) for f in flag_fields(section)}


@dataclass(frozen=True)
class ConfigField:
    """One flag: its name, type, default, help, where it lives (its section's class, its dotted path) and its
    roles (its field's, and its section's in ``TrainConfig``).

    Example::

        config_fields()["batch_size"]   # ConfigField(name='batch_size', kind=int, default=1024, help=...,
                                        #             section='LoaderConfig', path='loader.batch_size',
                                        #             roles=frozenset({'train_component', 'runs_component'}))
    """

    name: str
    kind: type
    default: Any
    help: str
    section: str
    path: str
    roles: FrozenSet[str] = frozenset()


def section_fields(
    section: type,
    prefix: str = "",
    leaves: Optional[Sequence[dataclasses.Field]] = None,
    roles: FrozenSet[str] = frozenset(),
) -> List[ConfigField]:
    """The flags of ``section`` (a dataclass; ``leaves``: some of its fields, default its flag fields),
    as :class:`ConfigField` s whose paths start with ``prefix`` (the section's name and a dot), each with
    its field's roles and ``roles`` (the section's).

    Example::

        [f.name for f in section_fields(DataConfig)][:2]   # ["dataset", "data_path"]
    """
    hints = get_type_hints(section)
    fields = []
    for f in flag_fields(section) if leaves is None else leaves:
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        help = f.metadata.get("help", "")
        kind = _optional_base(hints[f.name])
        fields.append(ConfigField(flag_name(f), kind, default, help, section.__name__, prefix + f.name, roles | roles_of(f)))
    return fields


def _optional_base(kind: Any) -> Any:
    args = getattr(kind, "__args__", None)
    if args and type(None) in args:  # Optional[X]
        return next(a for a in args if a is not type(None))
    return kind


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
