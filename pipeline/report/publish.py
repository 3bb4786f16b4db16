"""Write the published CSV and JSON files byte-for-byte reproducibly.

Floats are rounded to six significant digits (timing noise is far larger), in both CSV and JSON, so
the two files agree; empty CSV cells and JSON nulls mark values that do not exist. The texts are
published with the figures and the page as one set (:mod:`pipeline.report.publication`).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

FLOAT_FORMAT = ".6g"

# One published value (a CSV cell, a JSON scalar) and one published row: column -> value.
Cell = str | int | float | bool | None
Row = dict[str, Cell]


def number(row: Row, column: str) -> float:
    """A numeric cell of ``row`` (a ValueError when it is empty or not a number)."""
    value = row[column]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{column} is {value!r}, not a number")
    return float(value)


def optional_number(row: Row, column: str) -> float | None:
    """A numeric cell of ``row``, or None where it is empty."""
    return None if row[column] is None else number(row, column)


def rounded(value: Any) -> Any:
    """Floats at the published precision, recursively through lists and dicts."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot publish non-finite value {value!r}")
        return float(format(value, FLOAT_FORMAT))
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    return value


def csv_text(rows: Sequence[Row], columns: Sequence[str]) -> str:
    """CSV with a header row, '\\n' line ends, empty cells for None, true/false for booleans."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row[c]) for c in columns])
    return buffer.getvalue()


def json_text(document: Mapping[str, object]) -> str:
    """Indented JSON with sorted keys and published float precision."""
    return json.dumps(rounded(document), sort_keys=True, indent=1, allow_nan=False) + "\n"


def _cell(value: Cell) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(rounded(value), FLOAT_FORMAT)
    return str(value)
