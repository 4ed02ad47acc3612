"""What every config section shares: flag fields, and the parsed values validation fills.

A section is a dataclass whose fields are ``--flags`` (the flag is the field's name,
or ``metadata["flag"]`` where the section's name would repeat it: the pipeline
section's ``name`` is ``--pipeline``). A flag in a small text format is parsed ONCE, by
the section's ``validate()``, into a :func:`parsed` field next to it; builders read the
parsed value. Parsed fields are not flags: :func:`flag_fields` and :func:`flag_values`
leave them out, so run records hold the flags' text exactly as given. A builder that
may receive a section nobody validated (built directly, or copied by
``dataclasses.replace``, which resets parsed fields) reads it through :func:`validated`.

Example::

    @dataclass
    class PipelineConfig:
        sharding_types: str = field(default="table_wise", metadata={"help": "..."})
        sharding_type_list: Tuple[str, ...] = parsed()   # filled by validate()

    flag_values(PipelineConfig())   # {"sharding_types": "table_wise"}
"""

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, TypeVar, get_type_hints

_PARSED = "parsed"
S = TypeVar("S")


def parsed() -> Any:
    """A field validation fills from a flag's text: not a flag, not compared, not in records."""
    return dataclasses.field(default=None, init=False, repr=False, compare=False, metadata={_PARSED: True})


def flag_fields(section: Any) -> List[dataclasses.Field]:
    """The fields of ``section`` (a dataclass or its instance) that are flags, in order."""
    return [f for f in dataclasses.fields(section) if not f.metadata.get(_PARSED)]


def flag_name(f: dataclasses.Field) -> str:
    """The flag of field ``f`` (without ``--``)."""
    return f.metadata.get("flag", f.name)


def flag_values(section: Any) -> Dict[str, Any]:
    """``{flag: value}`` of a section instance, parsed fields left out."""
    return {flag_name(f): getattr(section, f.name) for f in flag_fields(section)}


@dataclass(frozen=True)
class ConfigField:
    """One flag: its name, type, default, help, and where it lives (its section's class, its dotted path).

    Example::

        config_fields()["batch_size"]   # ConfigField(name='batch_size', kind=int, default=1024, help=...,
                                        #             section='LoaderConfig', path='loader.batch_size')
    """

    name: str
    kind: type
    default: Any
    help: str
    section: str
    path: str


def section_fields(
    section: type, prefix: str = "", leaves: Optional[Sequence[dataclasses.Field]] = None
) -> List[ConfigField]:
    """The flags of ``section`` (a dataclass; ``leaves``: some of its fields, default its flag fields),
    as :class:`ConfigField` s whose paths start with ``prefix`` (the section's name and a dot).

    Example::

        [f.name for f in section_fields(DataConfig)][:2]   # ["dataset", "data_path"]
    """
    hints = get_type_hints(section)
    fields = []
    for f in flag_fields(section) if leaves is None else leaves:
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        help = f.metadata.get("help", "")
        fields.append(ConfigField(flag_name(f), _optional_base(hints[f.name]), default, help, section.__name__, prefix + f.name))
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
