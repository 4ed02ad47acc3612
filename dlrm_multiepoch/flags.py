"""``--flags`` from dataclass fields (stdlib only, so any command can use it without torch)."""

import argparse
import dataclasses
from typing import Any, Iterable, Type, get_type_hints


def add_flags(group: Any, cls: Type[Any], fields: Iterable[dataclasses.Field]) -> None:
    """One ``--<name>`` per field, typed by its annotation, defaulting to its default,
    helped by its ``metadata["help"]``; ``bool`` fields get ``--x/--no-x``.

    Example::

        add_flags(parser.add_argument_group("DataConfig"), DataConfig, dataclasses.fields(DataConfig))
    """
    hints = get_type_hints(cls)
    for f in fields:
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        kind = hints[f.name]
        help_text = f.metadata.get("help", "")
        if kind is bool:
            group.add_argument(f"--{f.name}", action=argparse.BooleanOptionalAction, default=default, help=help_text)
        else:
            group.add_argument(f"--{f.name}", type=optional_base(kind), default=default, help=help_text)


def optional_base(kind: Any) -> Any:
    """``X`` of ``Optional[X]``; other annotations unchanged."""
    args = getattr(kind, "__args__", None)
    if args and type(None) in args:
        return next(a for a in args if a is not type(None))
    return kind
