"""Publish a set of files into one folder so that the set changes whole or not at all.

A publication is the files one ``aggregate`` writes (CSVs, JSON, figures, page) plus its manifest,
``mok-comparison.sha256``: one ``<sha256>  <name>`` line per file, in ``sha256sum`` format, so
``sha256sum -c mok-comparison.sha256`` in the folder checks that every file is of one publication.
How a new set replaces the previous one:

1. stage: every file (the manifest last) is written into a hidden staging folder beside them,
   ``.publishing-*``, and synced to disk; every file of the previous publication (each name this
   publication owns, whether or not its manifest lists it) gets a second name in the staging folder
   (a hard link, or a copy where the filesystem has none). Nothing outside the staging folder changes.
2. commit, with SIGINT and SIGTERM held until it is done: each new file is renamed over its name,
   files of the previous publication that the new one lacks are unlinked (a ``--no-figures``
   publication keeps no figure or page of an earlier one), the folder is synced, then the manifest is
   renamed into place and the folder synced again.
3. the staging folder is removed.

What a failure leaves:

- any error while staging (a full disk, a read-only folder, a permission, an I/O error, an interrupt)
  leaves the previous publication byte-identical: the staging folder is removed and
  :class:`PublishError` (an interrupt: the interrupt) is raised;
- an error during the commit (a rename or unlink refused) is undone by renaming each earlier step's
  previous file back from the staging folder, so again the previous publication is byte-identical
  and :class:`PublishError` says so; if undoing fails too, the error says that the folder may mix
  the two publications;
- a crash (power loss, SIGKILL) before the commit leaves the previous publication untouched beside
  a staging folder, which the next publication into the folder removes; a crash during the commit,
  a few renames in one folder, can leave some new files beside some previous ones, each file whole,
  and then the manifest on disk is still the previous one, so ``sha256sum -c`` names the files that
  differ; the next publication replaces the whole set. Once the new manifest is on disk, every file
  it lists is.

Two publications into one folder at once are serialised by a lock on the folder (``flock``; where
the filesystem has none, such as some network filesystems, they are not, and a folder must get one
publication at a time).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pipeline.base.exits import held
from pipeline.data.atomic import sync_folder

MANIFEST_NAME = "mok-comparison.sha256"
STAGING_PREFIX = ".publishing-"


class PublishError(Exception):
    """A publication that could not be made, in one line: the folder, the file, why, and what was left."""


def manifest(files: Mapping[str, bytes]) -> bytes:
    """The manifest of ``files`` (name -> bytes): ``sha256sum`` lines, sorted by name."""
    return "".join(f"{hashlib.sha256(files[n]).hexdigest()}  {n}\n" for n in sorted(files)).encode()


def publish(out: Path, files: Mapping[str, bytes], owned: Callable[[str], bool]) -> list[Path]:
    """Replace the publication in ``out`` by ``files`` (plain names -> bytes) and their manifest;
    ``owned`` tells the names of a publication (those of an earlier one that this one lacks are
    removed). Returns the paths published, the manifest last; a :class:`PublishError` leaves the
    previous publication as it was (see the module's text for a crash)."""
    out = Path(out)
    bad = [n for n in files if n != Path(n).name or n.startswith(".") or not owned(n) or n == MANIFEST_NAME]
    if bad:
        raise ValueError(f"cannot publish {bad}: names must be plain file names this publication owns")
    staged = {**files, MANIFEST_NAME: manifest(files)}
    doing = "opening the folder"
    try:
        if not out.is_dir():
            out.mkdir(parents=True, exist_ok=True)
        with _locked(out) as locked:
            if locked:  # every publisher holds the lock while its staging folder exists
                _remove_staging(out)
            doing = "staging the files"
            staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out))
            try:
                previous = _stage(staging, out, staged, lambda n: n == MANIFEST_NAME or owned(n))
                doing = "replacing the files"
                with held():
                    _commit(staging, out, staged, previous)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except _Unrestored as err:
        raise PublishError(f"cannot publish into {str(out)!r}: {err}") from None
    except OSError as err:
        raise PublishError(
            f"cannot publish into {str(out)!r}: {_reason(err, out)} ({doing}); "
            "the previous publication is unchanged"
        ) from None
    return [out / name for name in [*sorted(files), MANIFEST_NAME]]


class _Unrestored(Exception):
    """A commit that failed and could not be undone."""


def _stage(staging: Path, out: Path, staged: Mapping[str, bytes], owned: Callable[[str], bool]) -> set[str]:
    """Write and sync every file into ``staging/new``, give every previous file a second name in
    ``staging/previous``; return the previous publication's names."""
    new, kept = staging / "new", staging / "previous"
    new.mkdir()
    kept.mkdir()
    for name in [*sorted(n for n in staged if n != MANIFEST_NAME), MANIFEST_NAME]:
        try:
            _write(new / name, staged[name])
        except OSError as err:  # named as published, not by its staging path
            raise OSError(err.errno, err.strerror, name) from None
    sync_folder(new)
    previous = {p.name for p in out.iterdir() if owned(p.name) and (p.is_file() or p.is_symlink())}
    for name in sorted(previous):
        try:
            os.link(out / name, kept / name, follow_symlinks=False)
        except OSError as err:
            if err.errno == errno.ENOSPC:
                raise
            shutil.copy2(out / name, kept / name, follow_symlinks=False)  # a filesystem without links
    return previous


def _commit(staging: Path, out: Path, staged: Mapping[str, bytes], previous: set[str]) -> None:
    """Rename the new files into place, unlink the previous ones the new set lacks, the manifest
    last; on an error, put every previous file back and re-raise."""
    done: list[str] = []
    try:
        for name in sorted(n for n in staged if n != MANIFEST_NAME):
            os.replace(staging / "new" / name, out / name)
            done.append(name)
        for name in sorted(previous - set(staged)):
            os.unlink(out / name)
            done.append(name)
        sync_folder(out)  # every file of the set is on disk before the manifest that names it
        os.replace(staging / "new" / MANIFEST_NAME, out / MANIFEST_NAME)
        done.append(MANIFEST_NAME)
        sync_folder(out)
    except OSError as err:
        try:
            for name in reversed(done):
                if name in previous:
                    os.replace(staging / "previous" / name, out / name)
                else:
                    os.unlink(out / name)
            sync_folder(out)
        except OSError as undo:
            raise _Unrestored(
                f"{_reason(err, out)} (replacing the files), and putting the previous files back failed "
                f"({_reason(undo, out)}): the folder may mix the two publications; "
                f"'sha256sum -c {MANIFEST_NAME}' there names the files that differ"
            ) from None
        raise


def _write(path: Path, data: bytes) -> None:
    """``data`` into a new file, synced to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def _locked(out: Path) -> Iterator[bool]:
    """Hold an exclusive lock on the folder ``out``; yields whether the filesystem gave one."""
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            locked = True
        except OSError:
            locked = False
        yield locked
    finally:
        os.close(fd)  # releases the lock


def _remove_staging(out: Path) -> None:
    """Remove the staging folders that crashed publications left."""
    for path in out.iterdir():
        if path.name.startswith(STAGING_PREFIX) and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)


def _reason(err: OSError, out: Path) -> str:
    """An OSError as its reason and the published name it concerns (never a staging path)."""
    name = Path(err.filename).name if isinstance(err.filename, str | os.PathLike) else None
    reason = err.strerror or str(err)
    return f"{reason}: {name}" if name and Path(err.filename) != out else reason
