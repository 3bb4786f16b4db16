"""The dataset folder: the one owner of its layout and of attempt numbering.

```
<dataset>/
  shards/execution=<execution_id>/attempt-<n>.parquet   one per completed attempt (the shard contract)
  ledger/<ns>-<host>-<pid>-<seq>.json                   the launch ledger, one file per record
  logs/<execution_id>/attempt-<n>/                      submitit's folder of that job (or a link to it)
  logs/arrays/<stamp>-<nodes>x<tasks>-<tag>/            the shared folder of a job of several executions
  claims/<execution_id>/attempt-<n>.json                who writes that attempt (pipeline.data.claims)
  claims/.owners/<sweep>.json                           a live writer's heartbeat
  hydra/                                                Hydra's run and multirun folders
  traces/<execution_id>/attempt-<n>/rank-<r>.json.gz    a rank's profile (keep_traces=true), Chrome format
  kernel-rates.json                                     the device's measured kernel rates, where given
```

Paths recorded inside the dataset (ledger, published metadata) are relative to its root, so a dataset
can be moved or copied; a path or name read back from it is used only where it stays inside it.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path, PurePosixPath

from pipeline.base.folders import check_path, check_writable

SHARDS, LEDGER, CLAIMS, OWNERS = "shards", "ledger", "claims", ".owners"
LOGS, ARRAYS, HYDRA, TRACES = "logs", "arrays", "hydra", "traces"
RATES = "kernel-rates.json"
OWN_FOLDERS = (
    SHARDS,
    LEDGER,
    LOGS,
    CLAIMS,
    HYDRA,
    TRACES,
)  # what the layout keeps: nothing else writes there
MAX_ATTEMPT = 1_000_000  # attempt numbers are bounded: a number read beyond it names no attempt
_ATTEMPT_FILE = re.compile(r"attempt-([1-9][0-9]{0,6})(\.[a-z]+)")
_SHARD_FOLDER = "execution="


_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=-]{0,199}")


def safe_name(name: str, what: str) -> str:
    """``name`` when it can be one path component inside the dataset (letters, digits, ``._=-``, not
    starting with a dot, at most 200 characters): names taken from a dataset's records never lead
    outside it. A ValueError names the bad one."""
    if not _SAFE_NAME.fullmatch(name) or ".." in name:
        shown = name if len(name) <= 80 else f"{name[:77]}..."
        raise ValueError(f"{what} {shown!r} is not a plain name (letters, digits, . _ = -; not .. or /)")
    return name


def own_folder_problem(option: str, out: str | os.PathLike[str], datasets: list[Path]) -> str | None:
    """Why ``out`` (a folder a command writes into) will not do as ``option``: it lies among the own
    records of one of ``datasets`` (its shards, ledger, logs, claims or hydra folder), where every
    reader would then meet a stranger's file; None when it does not."""
    for root in datasets:
        dataset = Dataset(root)
        if (name := dataset.own_folder(Path(out))) is not None:
            return (
                f"{option} {str(out)!r} lies in the {name} folder of the dataset {str(root)!r}, which holds "
                f"only the dataset's own records; allowed: a folder outside its {', '.join(OWN_FOLDERS)}"
            )
    return None


def parse_attempt(file_name: str, suffix: str = ".parquet") -> int | None:
    """n of ``attempt-<n><suffix>`` (1 <= n <= :data:`MAX_ATTEMPT`; a shard by default, ``.json`` a
    claim), else None: a file numbered beyond the bound is no attempt, so it cannot push every later
    attempt's number out of the integers a job, a shard and a scheduler take."""
    match = _ATTEMPT_FILE.fullmatch(file_name)
    if match is None or match.group(2) != suffix:
        return None
    n = int(match.group(1))
    return n if n <= MAX_ATTEMPT else None


def check_attempt(attempt: int) -> int:
    """``attempt`` when it is one the layout names (1 to :data:`MAX_ATTEMPT`); a ValueError otherwise."""
    if not 1 <= attempt <= MAX_ATTEMPT:
        raise ValueError(f"attempt must be >= 1 and <= {MAX_ATTEMPT:,}, got {attempt}")
    return attempt


class Dataset:
    """One dataset folder; nothing else builds paths inside it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.abspath(root))
        self.shards_dir = self.root / SHARDS
        self.ledger_dir = self.root / LEDGER
        self.claims_dir = self.root / CLAIMS
        self.owners_dir = (
            self.claims_dir / OWNERS
        )  # heartbeats of live owners (no execution id has a dot first)
        self.logs_dir = self.root / LOGS
        self.arrays_dir = self.logs_dir / ARRAYS
        self.hydra_dir = self.root / HYDRA
        self.traces_dir = self.root / TRACES
        self.rates_path = self.root / RATES  # the kernel-rate table (pipeline.data.rates)

    @classmethod
    def existing(cls, root: str | os.PathLike[str]) -> Dataset:
        """The dataset folder at ``root``, which must be a directory; a ValueError says what it is
        instead (the one check every command that reads a dataset makes)."""
        path = Path(check_path(root))  # '' is no folder, nor is a path no system call can take
        if path.is_file():
            raise ValueError(f"{str(root)!r} is a file, not a dataset directory")
        if not path.is_dir():
            raise ValueError(f"dataset directory {str(root)!r} does not exist")
        return cls(path)

    @classmethod
    def writable(cls, root: str | os.PathLike[str]) -> Dataset:
        """The dataset folder at ``root`` for a sweep to write into
        (:func:`pipeline.base.folders.check_writable`); a ValueError says why it will not do."""
        try:
            return cls(check_writable(root))
        except ValueError as err:
            raise ValueError(f"dataset_dir {err}") from None

    def __repr__(self) -> str:
        return f"Dataset({str(self.root)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dataset) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    # shards
    def shard_dir(self, execution_id: str) -> Path:
        return self.shards_dir / f"{_SHARD_FOLDER}{safe_name(execution_id, 'execution id')}"

    def shard_path(self, execution_id: str, attempt: int) -> Path:
        """``shards/execution=<id>/attempt-<n>.parquet``."""
        return self.shard_dir(execution_id) / f"attempt-{check_attempt(attempt)}.parquet"

    def shard_files(self) -> list[Path]:
        """Every ``shards/execution=*/*.parquet`` file, sorted (named right or not: readers say why not)."""
        return sorted(self.shards_dir.glob(f"{_SHARD_FOLDER}*/*.parquet"))

    def shard_attempts(self, execution_id: str) -> list[int]:
        """Attempt numbers of this execution's shard files, named as the contract names them."""
        folder = self.shard_dir(execution_id)
        if not folder.is_dir() or not self.inside(folder):
            return []
        return sorted(n for p in folder.iterdir() if (n := parse_attempt(p.name)) is not None)

    @staticmethod
    def execution_of_shard(path: Path) -> str:
        """The execution id a shard file's folder names."""
        return path.parent.name.removeprefix(_SHARD_FOLDER)

    def executions_with_shards(self) -> set[str]:
        if not self.shards_dir.is_dir():
            return set()
        return {
            p.name.removeprefix(_SHARD_FOLDER)
            for p in self.shards_dir.iterdir()
            if p.name.startswith(_SHARD_FOLDER)
        }

    # ledger, logs, Hydra
    def ledger_record_path(self, time_ns: int, writer: str, seq: int) -> Path:
        """``ledger/<ns>-<writer>-<seq>.json``: one record of one writer; names sort by time."""
        return self.ledger_dir / f"{time_ns:020d}-{writer}-{seq:06d}.json"

    def ledger_record_files(self) -> list[Path]:
        """The record files in name order (temporary files of unfinished writes start with a dot)."""
        if not self.ledger_dir.is_dir():
            return []
        files = self.ledger_dir.iterdir()
        return sorted(p for p in files if p.suffix == ".json" and not p.name.startswith("."))

    def has_ledger(self) -> bool:
        return bool(self.ledger_record_files())

    # claims of attempts, and the heartbeats of their owners (pipeline.data.claims)
    def claim_dir(self, execution_id: str) -> Path:
        return self.claims_dir / safe_name(execution_id, "execution id")

    def claim_path(self, execution_id: str, attempt: int) -> Path:
        """``claims/<execution_id>/attempt-<n>.json``."""
        return self.claim_dir(execution_id) / f"attempt-{check_attempt(attempt)}.json"

    def log_dir(self, execution_id: str, attempt: int) -> Path:
        """``logs/<execution_id>/attempt-<n>/``: submitit's folder for that job."""
        return self.logs_dir / safe_name(execution_id, "execution id") / f"attempt-{attempt}"

    def new_array_dir(self, nodes: int, per_node: int) -> Path:
        """A new ``logs/arrays/<stamp>-<nodes>x<tasks>-<tag>/``, made here: the one log folder of a job
        of several executions, or of a Slurm job array (UTC stamp, a random tag: two never meet)."""
        self.check_folder(self.arrays_dir)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        folder = self.arrays_dir / f"{stamp}-{nodes}x{per_node}-{secrets.token_hex(3)}"
        folder.mkdir(parents=True)
        return folder

    def link_log_dir(self, execution_id: str, attempt: int, folder: Path) -> None:
        """``logs/<execution_id>/attempt-<n>`` -> ``folder``, the shared folder its job writes its logs
        in (a relative link: a moved dataset keeps it)."""
        log_dir = self.log_dir(execution_id, attempt)
        log_dir.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(folder, log_dir.parent), log_dir, target_is_directory=True)

    def trace_path(self, execution_id: str, attempt: int, rank: int) -> Path:
        """``traces/<execution_id>/attempt-<n>/rank-<r>.json.gz``: one rank's profile of the phase
        account, kept on request (a Chrome / Perfetto trace, gzipped; data to open, never run)."""
        folder = self.traces_dir / safe_name(execution_id, "execution id") / f"attempt-{attempt}"
        return folder / f"rank-{rank}.json.gz"

    # paths recorded in the dataset
    def relative(self, path: Path) -> str:
        """``path`` (inside the dataset) as the POSIX path relative to its root that records hold."""
        absolute = Path(os.path.abspath(path))
        try:
            return absolute.relative_to(self.root).as_posix()
        except ValueError:
            raise ValueError(f"{absolute} lies outside the dataset {self.root}") from None

    def locate(self, recorded: str) -> Path:
        """The path a record names (relative to the root, as :meth:`relative` wrote it), which must
        stay inside the dataset, links followed: a ValueError for an absolute path, a ``..`` or a link
        that leads out (a dataset is untrusted input)."""
        path = PurePosixPath(recorded)
        if path.is_absolute() or ".." in path.parts:
            raise ValueError(f"recorded path {recorded!r} leaves the dataset; records hold paths inside it")
        found = self.root / path
        if not self.inside(found):
            raise ValueError(
                f"recorded path {recorded!r} links out of the dataset (to {os.path.realpath(found)})"
            )
        return found

    def inside(self, path: Path) -> bool:
        """Whether ``path``, every link on the way followed, lies inside the dataset."""
        root = os.path.realpath(self.root)
        return os.path.commonpath([root, os.path.realpath(path)]) == root

    # where writers write
    def execution_folders(self, execution_id: str) -> list[Path]:
        """The folders a job of ``execution_id`` writes in: its shards, its claims, its logs."""
        return [
            self.shard_dir(execution_id),
            self.claim_dir(execution_id),
            self.log_dir(execution_id, 1).parent,
        ]

    def shared_folders(self) -> list[Path]:
        """The folders every writer of the dataset shares."""
        return [self.ledger_dir, self.owners_dir, self.arrays_dir, self.shards_dir, self.hydra_dir]

    def check_folder(self, folder: Path) -> Path:
        """``folder`` (of the layout) when a writer may write in it: it and every folder on the way
        from the root that exists is a directory inside the dataset (what does not exist yet is made
        inside it). A ValueError names the first that is a link out or no directory, and the remedy:
        what a writer finds there was not put there by the layout."""
        relative = Path(os.path.abspath(folder)).relative_to(self.root)
        step = self.root
        for name in relative.parts:
            step = step / name
            if not os.path.lexists(step):
                break
            where = step.relative_to(self.root).as_posix()
            if not self.inside(step):
                raise ValueError(
                    f"{where} in {self.root} links out of the dataset (to {os.path.realpath(step)}): "
                    f"nothing is written through it; remove the link"
                )
            if not step.is_dir():
                kind = "a file" if step.is_file() else "not a directory"
                raise ValueError(
                    f"{where} in {self.root} is {kind}, where the layout keeps a folder: "
                    "nothing is written there; remove it"
                )
        return folder

    def own_folder(self, path: Path) -> str | None:
        """The folder of the layout (``ledger``, ``shards``, ...) that ``path`` lies in, links
        followed, or None: what a command publishes never goes among the dataset's own records."""
        target = os.path.realpath(path)
        for name in OWN_FOLDERS:
            folder = os.path.realpath(self.root / name)
            if os.path.commonpath([folder, target]) == folder:
                return name
        return None
