"""Per-table flag values: ``"0.05"`` (every table) or ``"0.05,t_user=0.02,t_item=0.1"``.

Used by every flag that can differ per table (``--table_lr``, ``--min_count``,
``--id_dropout``). Errors name the flag and, once the tables are known, the table.

Example::

    values = TableValues.parse("2,t_user=5", "--min_count", int)
    values.check_tables(["t_user", "t_item"])
    values.get("t_user"), values.get("t_item")            # 5, 2
"""

from dataclasses import dataclass, field
from typing import Callable, Dict, Generic, Iterable, Optional, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class TableValues(Generic[T]):
    """A default value plus per-table overrides of one flag.

    Args:
        flag: the flag's name, for error messages (``"--min_count"``).
        default: value of tables without an override (None: no default).
        overrides: table name -> value.
    """

    flag: str
    default: Optional[T] = None
    overrides: Dict[str, T] = field(default_factory=dict)

    @staticmethod
    def parse(
        text: str,
        flag: str,
        kind: Callable[[str], T],
        default: Optional[T] = None,
        check: Optional[Callable[[T], bool]] = None,
        expected: str = "",
    ) -> "TableValues[T]":
        """Parse ``[DEFAULT][,TABLE=VALUE ...]``; ``check`` rejects values (``expected`` says why)."""
        overrides: Dict[str, T] = {}
        for entry in (e.strip() for e in str(text).split(",")):
            if not entry:
                continue
            name, eq, raw = entry.partition("=")
            name, raw = (name.strip(), raw.strip()) if eq else ("", name.strip())
            if eq and not name:
                raise ValueError(f"{flag}: entry {entry!r} names no table (expected TABLE=VALUE)")
            try:
                value = kind(raw)
            except ValueError:
                raise ValueError(f"{flag}: {raw!r} in {text!r} is not a valid {getattr(kind, '__name__', kind)}") from None
            if check is not None and not check(value):
                raise ValueError(f"{flag}: {entry!r} {expected or 'is out of range'}")
            if not eq:
                if "" in overrides:
                    raise ValueError(f"{flag}: two default values in {text!r}")
                overrides[""] = value
                continue
            if name in overrides:
                raise ValueError(f"{flag}: table {name!r} is given twice in {text!r}")
            overrides[name] = value
        base = overrides.pop("", default)
        return TableValues(flag, base, overrides)

    def check_tables(self, tables: Iterable[str]) -> None:
        """Raise naming the flag for an override of a table the model does not have."""
        known = sorted(tables)
        unknown = sorted(set(self.overrides) - set(known))
        if unknown:
            raise ValueError(f"{self.flag}: unknown table(s) {unknown}; tables: {known}")

    def get(self, table: str) -> Optional[T]:
        return self.overrides.get(table, self.default)

    def __bool__(self) -> bool:
        return self.default is not None or bool(self.overrides)
