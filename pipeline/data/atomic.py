"""Atomic file writes: a file exists under its final name complete or not at all.

Every writer of a dataset or a published file goes through here. The bytes go to a hidden temporary
sibling (same folder, so the same filesystem), are flushed to disk, and the sibling is renamed over
the final name with ``os.replace`` (or, for what is written once, hard-linked to it: a link is made
only where no file of that name exists, so of two writers racing for one name exactly one succeeds
and nothing is ever replaced); the folder is then synced so that the rename itself survives a crash.
A failure at any point removes the temporary file and leaves the final name untouched.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

_names = itertools.count()  # with the pid, keeps the temporary files of two threads apart


def atomic_write(
    path: str | os.PathLike[str], data: str | bytes | Callable[[BinaryIO], object], *, exclusive: bool = False
) -> Path:
    """Write ``data`` (text, bytes, or a function that writes into the open file) to ``path``;
    ``exclusive`` refuses a path that already exists (what is written once is never replaced)."""
    final = Path(path)
    taken = f"{final} already exists; it is written once and never replaced"
    if exclusive and final.exists():
        raise FileExistsError(taken)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.{next(_names)}.tmp")
    try:
        with open(tmp, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:  # a hard link is made only where no name exists: two writers never share one
            try:
                os.link(tmp, final)
            except FileExistsError:
                raise FileExistsError(taken) from None
            tmp.unlink()
        else:
            os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    sync_folder(final.parent)
    return final


def sync_folder(folder: Path) -> None:
    """Make the renames and unlinks in ``folder`` durable: its entries live in the folder."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
