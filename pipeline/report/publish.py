"""Write the published CSV and JSON files byte-for-byte reproducibly.

Floats are rounded to six significant digits (timing noise is far larger), in both CSV and JSON, so
the two files agree; empty CSV cells and JSON nulls mark values that do not exist. Each file is
written under a temporary name and renamed, so readers never see half a file.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from typing import Any

FLOAT_FORMAT = ".6g"


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


def csv_text(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """CSV with a header row, '\\n' line ends, empty cells for None, true/false for booleans."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row[c]) for c in columns])
    return buffer.getvalue()


def json_text(document: dict[str, Any]) -> str:
    """Indented JSON with sorted keys and published float precision."""
    return json.dumps(rounded(document), sort_keys=True, indent=1, allow_nan=False) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(rounded(value), FLOAT_FORMAT)
    return str(value)
