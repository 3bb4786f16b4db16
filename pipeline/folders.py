"""A folder a command is to write into, checked before the command reads or computes anything: an
existing directory, or one that can be made, that this process can write in. The check writes and
removes a probe (and any folder it had to make for it), so it leaves nothing behind."""

from __future__ import annotations

import os
from pathlib import Path


def check_writable(folder: str | os.PathLike[str]) -> Path:
    """``folder`` as an absolute path; a ValueError (``'/etc/hostname' is a file, not a directory``,
    ``'/proc/x' cannot be written here (No such file or directory)``) says why it will not do."""
    path = Path(os.path.abspath(folder))
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "a file, not a directory" if existing == path else f"not a directory: {existing} is a file"
        raise ValueError(f"{str(folder)!r} is {what}")
    made: list[Path] = []
    try:
        for parent in reversed([path, *path.parents][: len(path.parts) - len(existing.parts)]):
            parent.mkdir()
            made.append(parent)
        probe = path / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"{str(folder)!r} cannot be written here ({err.strerror})") from None
    finally:
        for parent in reversed(made):
            parent.rmdir()
    return path
