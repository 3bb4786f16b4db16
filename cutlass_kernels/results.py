"""Results of the GPU checks as JSON lines: each appended the moment it exists (flushed and fsynced),
so a process killed at its time limit loses nothing it had recorded. Torch-free, for the runner."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


def append(path: Path, record: dict[str, Any]) -> None:
    """Append one record as a JSON line, flushed and fsynced (non-finite floats become strings)."""
    line = json.dumps(finite(record), sort_keys=True)
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def read(path: Path) -> list[dict[str, Any]]:
    """Every complete record of ``path`` (a torn last line, from a kill mid-write, is dropped)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value
