"""Timestamps of an interactions file, parsed with one format decided for the whole file.

The file's first present value decides how every value is read: numbers (epoch
seconds or any number: only their order matters), ISO 8601 dates (any precision, any
offset: unambiguous), or the one other date format pandas guesses from that value
(``01/02/2020`` reads as ``%m/%d/%Y``). A later present value that does not read that
way is refused, naming the column and both values, rather than dropped: a guess made
chunk by chunk would keep different rows at different ``--preprocess_chunk_mb``.
Missing values (empty, ``NA``, null) are missing: their rows are dropped and counted.
"""

import warnings
from typing import Any, Dict, Optional

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pandas.tseries.api import guess_datetime_format

MISSING_TIME = np.iinfo(np.int64).min  # a missing datetime (numbers: NaN)
NUMBER = "number"
DATETIME = "datetime"  # a date/timestamp column of a Parquet file
ISO8601 = "ISO8601"


def to_float(values: pa.ChunkedArray) -> np.ndarray:
    """Numbers as float64, NaN for missing or non-numeric text (``pandas.to_numeric``)."""
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return pd.to_numeric(values.to_pandas(), errors="coerce").to_numpy(dtype=np.float64)
    return pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64)


class TimeFormat:
    """How one file's timestamp column is read: decided once, by its first present value.

    Args:
        column: the ``--timestamp_col`` name (messages).
        what: the file, for messages (``--data_path x.csv``).
        first: the column's first present value (None: the column holds none).
        arrow_type: the column's Arrow type.

    Example::

        fmt = TimeFormat("ts", "--data_path events.csv", "2020-01-31", pa.string())
        ticks = fmt.parse(table["ts"])     # int64 ns; MISSING_TIME where missing
    """

    def __init__(self, column: str, what: str, first: Optional[Any], arrow_type: pa.DataType) -> None:
        self.column, self.what, self.first = column, what, first
        if pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type):
            self.kind = DATETIME
        elif pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or first is None:
            self.kind = NUMBER
        elif not (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)):
            raise ValueError(f"--timestamp_col {column!r} of {what} holds {arrow_type} values, not numbers or dates")
        elif np.isfinite(pd.to_numeric(pd.Series([first]), errors="coerce").to_numpy(np.float64)[0]):
            self.kind = NUMBER
        else:
            guessed = guess_datetime_format(str(first))
            if guessed is None:
                raise ValueError(
                    f"--timestamp_col {column!r} of {what}: cannot tell the date format of its first value {first!r}; "
                    "write numbers or ISO 8601 dates (2020-01-31 or 2020-01-31T12:00:00)"
                )
            self.kind = ISO8601 if guessed.startswith("%Y-%m-%d") else guessed

    def describe(self) -> Dict[str, Any]:
        """What a scan report records of the decision (JSON-able)."""
        return {"kind": self.kind, "first": None if self.first is None else str(self.first)}

    def parse(self, values: pa.ChunkedArray) -> np.ndarray:
        """float64 numbers (NaN = missing) or int64 ns ticks (:data:`MISSING_TIME` = missing)."""
        if self.kind == NUMBER:
            parsed = to_float(values)
            failed = np.isnan(parsed)
        else:
            series = values.to_pandas()
            if self.kind == DATETIME:
                parsed_series = pd.to_datetime(series, utc=True)
            else:
                with warnings.catch_warnings():  # the format is given: pandas' dayfirst hint does not apply
                    warnings.simplefilter("ignore", UserWarning)
                    parsed_series = pd.to_datetime(series, format=self.kind, errors="coerce", utc=True)
            failed = parsed_series.isna().to_numpy()
            parsed = parsed_series.to_numpy(dtype="datetime64[ns]").view(np.int64)
        text = pa.types.is_string(values.type) or pa.types.is_large_string(values.type)
        bad = failed & ~values.is_null().to_numpy(zero_copy_only=False) if text else np.zeros(len(failed), bool)
        if bad.any():
            other = values[int(np.flatnonzero(bad)[0])].as_py()
            how = "a number" if self.kind == NUMBER else f"a date in the format {self.kind}"
            raise ValueError(
                f"--timestamp_col {self.column!r} of {self.what} mixes formats: its first value {self.first!r} is "
                f"{how}, which {other!r} is not; write the whole column in one format"
            )
        return parsed
