"""Results of the GPU checks as JSON lines: each appended the moment it exists (flushed and fsynced),
so a process killed at its time limit loses nothing it had recorded. Torch-free, for the runner."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def append(path: Path, record: dict[str, Any]) -> None:
    """Append one record as a JSON line, flushed and fsynced (non-finite floats become strings)."""
    line = json.dumps(finite(record), sort_keys=True)
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def each(
    path: Path,
    base: dict[str, Any],
    cases: Sequence[dict[str, Any]],
    measure: Callable[..., dict[str, Any]],
    after: Callable[[], object] = lambda: None,
) -> int:
    """``measure(**case)`` for each case, one record each (``base``, the case's fields and what it
    measured, which says its ``status``) appended as it exists; a case that raises is recorded as
    failed, with its error, and the others still run. ``after`` runs after each case. 0 if every
    record passed, else 1."""
    failures = 0
    for case in cases:
        try:
            record = base | case | measure(**case)
        except Exception as e:  # recorded; the other cases still run
            record = base | case | {"status": "fail", "error": f"{type(e).__name__}: {e}"[:600]}
        failures += record["status"] != "pass"
        append(path, record)
        after()
    return 1 if failures else 0


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
