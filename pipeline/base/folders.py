"""Paths given on a command line, checked before the command reads, computes or writes anything.

:func:`check_path` is the one check of a path's form (not empty: an empty argument would quietly
mean the current folder; names within the file system's limits: a longer one fails every system call
with a traceback), made by every command for every path it is given, to read or to write.
:func:`check_writable` checks a folder a command is to write into: an existing directory, or one that
can be made, that this process can write in. It writes and removes a probe (and any folder it had to
make for it), so it leaves nothing behind. :func:`shown` is how a refusal names a path (or any value
that may run to thousands of characters) in one line.
"""

from __future__ import annotations

import os
from pathlib import Path

NAME_MAX, PATH_MAX = 255, 4096  # Linux's limits in bytes: one name, a whole path with its final NUL
SHOWN = 120  # the longest word a one-line message shows whole


def cut(word: str) -> str:
    """``word`` fit for a one-line message: whole up to :data:`SHOWN` characters, else its start and
    end around ``...`` with its length (before the punctuation that ends it)."""
    if len(word) <= SHOWN:
        return word
    core = word.rstrip(";,:.)")
    return f"{core[:80]}...{core[-30:]} ({len(core):,} characters){word[len(core) :]}"


def shown(value: str) -> str:
    """``value`` quoted for a one-line message, cut like :func:`cut` when it is long."""
    if len(value) <= SHOWN:
        return repr(value)
    return f"{value[:80] + '...' + value[-30:]!r} ({len(value):,} characters)"


def check_path(value: str | os.PathLike[str]) -> str:
    """``value`` as given when it can name a file here; a ValueError (``'' is an empty path; ...``)
    says why not and what is allowed, before any system call fails on it."""
    text = os.fspath(value)
    allowed = f"allowed: a path of at most {PATH_MAX - 1} bytes whose names have at most {NAME_MAX} bytes"
    if not text:
        raise ValueError("'' is an empty path; allowed: a path ('.' names the current folder)")
    longest = max((len(os.fsencode(name)) for name in Path(text).parts), default=0)
    if longest > NAME_MAX:
        raise ValueError(f"{shown(text)} holds a name of {longest:,} bytes; {allowed}")
    length = len(os.fsencode(os.path.abspath(text)))
    if length >= PATH_MAX:
        raise ValueError(f"{shown(text)} is {length:,} bytes long as an absolute path; {allowed}")
    return text


def check_writable(folder: str | os.PathLike[str]) -> Path:
    """``folder`` as an absolute path; a ValueError (``'/etc/hostname' is a file, not a directory``,
    ``'/proc/x' cannot be written here (No such file or directory)``) says why it will not do."""
    path = Path(os.path.abspath(check_path(folder)))
    for attempt in range(RACES):
        try:
            _probe(path, folder)
            return path
        except FileNotFoundError as err:
            # a parent another process made (and then removed, probing as we do) went away under us
            if attempt == RACES - 1:
                raise ValueError(f"{shown(str(folder))} cannot be written here ({err.strerror})") from None
        except OSError as err:
            raise ValueError(f"{shown(str(folder))} cannot be written here ({err.strerror})") from None
    raise AssertionError("unreachable")


# How often a probe starts again when a parent vanishes under it: probes of one new folder race each other.
RACES = 20


def _probe(path: Path, folder: str | os.PathLike[str]) -> None:
    """Make ``path``'s missing parents, write a file there and remove all it made."""
    made: list[Path] = []
    try:
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            what = "a file, not a directory" if existing == path else f"not a directory: {existing} is a file"
            raise ValueError(f"{shown(str(folder))} is {what}")
        for parent in reversed([path, *path.parents][: len(path.parts) - len(existing.parts)]):
            try:
                parent.mkdir()
            except FileExistsError:  # another process made it meanwhile: it is theirs to keep
                if not parent.is_dir():
                    raise
                continue
            made.append(parent)
        probe = path / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    finally:
        for parent in reversed(made):
            try:
                parent.rmdir()
            except OSError:  # another process has put something in it meanwhile
                break
