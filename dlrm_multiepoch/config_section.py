"""What every config section shares: flag fields, and the parsed values validation fills.

A section is a dataclass whose fields are ``--flags`` (the flag is the field's name,
or ``metadata["flag"]`` where the section's name would repeat it: the pipeline
section's ``name`` is ``--pipeline``). A flag in a small text format is parsed ONCE, by
the section's ``validate()``, into a :func:`parsed` field next to it; builders read the
parsed value. Parsed fields are not flags: :func:`flag_fields` and :func:`flag_values`
leave them out, so run records hold the flags' text exactly as given. A builder that
may receive a section nobody validated (built directly, or copied by
``dataclasses.replace``, which resets parsed fields) reads it through :func:`validated`
or :func:`parsed_flags`.

Example::

    @dataclass
    class PipelineConfig:
        sharding_types: str = field(default="table_wise", metadata={"help": "..."})
        sharding_type_list: Tuple[str, ...] = parsed()   # filled by validate()

    flag_values(PipelineConfig())   # {"sharding_types": "table_wise"}
"""

import dataclasses
from typing import Any, Dict, List, TypeVar

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


def validated(section: S) -> S:
    """``section`` with its parsed fields filled: its ``validate()`` runs now unless it already ran
    (for sections whose ``validate()`` takes no arguments and fills every parsed field with a value
    other than None: the data section).

    Example::

        validated(DataConfig(dense_cols="price,age")).dense_col_list   # ("price", "age")
    """
    if _unparsed(section):
        section.validate()  # type: ignore[attr-defined]
    return section


def parsed_flags(section: S) -> S:
    """``section`` with its parsed fields filled by its ``parse_flags()`` (the parsing ``validate()``
    starts with) unless they are: for builders that check the rest themselves (the model's).

    Example::

        parsed_flags(ModelConfig(over_arch_layer_sizes="64,32")).over_arch_sizes   # (64, 32)
    """
    if _unparsed(section):
        section.parse_flags()  # type: ignore[attr-defined]
    return section


def _unparsed(section: Any) -> bool:
    return any(getattr(section, f.name) is None for f in dataclasses.fields(section) if f.metadata.get(_PARSED))
