"""Validated shard reader: a shard is either fully usable or rejected with the reason.

A shard is untrusted input. It is opened only if it is a regular file (a FIFO, a device, a socket or a
directory named like a shard is refused from its ``stat``, never opened: a read of one could block
for ever). It is accepted only if it parses, has the columns and types of ``SCHEMA`` without nulls,
carries ``execution`` metadata that constructs an :class:`~pipeline.data.meta.ExecutionMeta` (of a
readable schema version: an earlier one is read into today's fields, what it did not record unknown,
:func:`~pipeline.data.meta.upgraded`) matching its file name and rows, names one execution of the
matrix (its dataset's suite) in every row with every field that execution's id determines as the id
says (implementation, pipeline, precision, workload, kind, profile, EP, nominal d_ff, the per-layer
loads), is complete
(exactly one row per rank x phase x window that its metadata declares; required phases: those of the kind,
:func:`pipeline.base.vocabulary.kind_phases`) and has window times within the bounds a window can take
(:data:`pipeline.base.bounds.ITERATION_MS_MIN`, :data:`pipeline.base.bounds.WINDOW_MS_MAX`).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.base.bounds import ITERATION_MS_MIN, WINDOW_MS_MAX
from pipeline.base.vocabulary import KINDS, PHASES, kind_phases
from pipeline.data.codec import RecordError, decode
from pipeline.data.dataset import Dataset, parse_attempt
from pipeline.data.meta import ExecutionMeta, MetaError
from pipeline.data.schema import (
    IDENTITY_COLUMNS,
    METADATA_KEY,
    SCHEMA,
    SCHEMA_VERSION,
    Identity,
    ShardIdentity,
)
from pipeline.matrix import REPORT, Suite

_TIMING_COLUMNS = ["phase", "rank", "window", "window_ms"]
_INDEX = {name: i for i, name in enumerate(SCHEMA.names)}
# What a file that is not a regular one is, by the test of its mode.
_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class ShardError(ValueError):
    """A shard that cannot be used; ``reason`` says why."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class Shard:
    """One validated execution attempt: its metadata, identity and window rows as numpy arrays."""

    path: Path
    meta: ExecutionMeta
    identity: ShardIdentity
    phase: np.ndarray  # phase names
    rank: np.ndarray
    window_ms: np.ndarray
    iterations: np.ndarray

    @property
    def execution_id(self) -> str:
        return self.identity.execution_id

    @property
    def attempt(self) -> int:
        return self.identity.attempt


def read_shard(path: Path | str, suite: Suite = REPORT) -> Shard:
    """Read and validate one shard, an execution of ``suite`` (its dataset's); raise ``ShardError``
    naming the path and the reason. Any file is answered so, whatever it holds (empty, another table,
    columns of other types)."""
    path = Path(path)
    try:
        _check_regular(path)
        return _read(path, suite)
    except ShardError:
        raise
    except (OSError, pa.ArrowException, KeyError, IndexError, TypeError, ValueError) as exc:
        raise ShardError(path, f"unreadable parquet ({type(exc).__name__}: {exc})") from None


def _check_regular(path: Path) -> None:
    """Refuse anything but a regular file (or a link to one) from its ``stat`` alone: opening a FIFO
    blocks until a writer comes, reading a device may never end."""
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise ShardError(path, f"a link that leads to no file ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        what = next((name for test, name in _NOT_REGULAR if test(mode)), "a special file")
        raise ShardError(path, f"{what}, not a regular file: not opened")


def _read(path: Path, suite: Suite) -> Shard:
    # The columns are checked against the schema before any is read, so that a file of another table
    # is refused for what it is (not by the first column a read asks for).
    with pa.OSFile(str(path)) as source, pq.ParquetFile(source) as file:
        meta = _metadata(path, file.schema_arrow)
        _check_columns(path, file.schema_arrow)
        if file.metadata.num_rows == 0:
            raise ShardError(path, "no rows")
        identity = _identity(path, file)
        table = file.read(columns=_TIMING_COLUMNS, use_threads=False).combine_chunks()  # parallel per file
    nulls = [name for name in _TIMING_COLUMNS if table.column(name).null_count]
    if nulls:
        raise ShardError(path, f"null values in column(s) {nulls}")
    _check_names(path, meta, identity)
    _check_identity(path, meta, identity, suite)
    phase = _phase_index(path, pc.dictionary_encode(table.column("phase").chunk(0)))
    rank = table.column("rank").to_numpy().astype(np.int64)
    window = table.column("window").to_numpy().astype(np.int64)
    _check_complete(path, meta, identity.kind, phase, rank, window)
    if identity.iterations < 1:
        raise ShardError(path, f"iterations must be >= 1, got {identity.iterations}")
    window_ms = table.column("window_ms").to_numpy()
    _check_windows(path, window_ms, identity.iterations, phase, rank, window)
    return Shard(
        path=path,
        meta=meta,
        identity=identity,
        phase=np.asarray(PHASES)[phase],
        rank=rank,
        window_ms=window_ms,
        iterations=np.full(rank.size, identity.iterations),
    )


def _phase_index(path: Path, phase: pa.DictionaryArray) -> np.ndarray:
    """Index into PHASES of every row."""
    names = phase.dictionary.to_pylist()
    unknown = sorted(set(names) - set(PHASES))
    if unknown:
        raise ShardError(path, f"unknown phase(s) {unknown}; allowed: {', '.join(PHASES)}")
    return np.array([PHASES.index(n) for n in names], dtype=np.int64)[phase.indices.to_numpy()]


def _metadata(path: Path, schema: pa.Schema) -> ExecutionMeta:
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise ShardError(path, f"no {METADATA_KEY.decode()!r} metadata")
    try:
        return ExecutionMeta.from_json(json.loads(raw))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ShardError(path, f"{METADATA_KEY.decode()!r} metadata is not JSON ({exc})") from None
    except MetaError as exc:
        raise ShardError(path, str(exc)) from None


def _check_columns(path: Path, schema: pa.Schema) -> None:
    got = [(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type) for f in schema]
    want = [(f.name, f.type) for f in SCHEMA]
    if got != want:
        diff = sorted(set(map(str, got)) ^ set(map(str, want)))
        raise ShardError(path, f"columns differ from schema version {SCHEMA_VERSION}: {diff}")


def _identity(path: Path, file: pq.ParquetFile) -> ShardIdentity:
    """The one value of each identity column. The writer's column statistics decide when present
    (min == max, no nulls, in every row group), which spares decoding; otherwise the column is read."""
    groups = [file.metadata.row_group(g) for g in range(file.metadata.num_row_groups)]
    values: dict[str, object] = {}
    varying: list[str] = []
    for name in IDENTITY_COLUMNS:
        stats = [group.column(_INDEX[name]).statistics for group in groups]
        if all(s is not None and s.has_min_max and s.null_count == 0 for s in stats):
            distinct = {s.min for s in stats} | {s.max for s in stats}
        else:
            column = file.read(columns=[name], use_threads=False).column(0)
            if column.null_count:
                raise ShardError(path, f"null values in column(s) {[name]}")
            distinct = set(pc.unique(column).to_pylist())
        if len(distinct) == 1:
            values[name] = distinct.pop()
        else:
            varying.append(name)
    if varying:
        raise ShardError(path, f"column(s) {varying} vary between rows; a shard holds one execution attempt")
    try:
        return decode(ShardIdentity, values)
    except RecordError as err:
        raise ShardError(path, f"identity column {err}") from None


def _check_names(path: Path, meta: ExecutionMeta, identity: ShardIdentity) -> None:
    attempt = parse_attempt(path.name)
    if attempt is None:
        raise ShardError(path, "file name must be attempt-<n>.parquet with n >= 1")
    named = {"execution_id": Dataset.execution_of_shard(path), "attempt": attempt}
    for key in ("execution_id", "workload_id", "attempt", "job_id"):
        said, rows = getattr(meta, key), getattr(identity, key)
        if said != rows:
            raise ShardError(path, f"metadata {key}={said!r} but rows say {rows!r}")
        if key in named and named[key] != rows:
            raise ShardError(path, f"file name says {key}={named[key]!r} but the shard says {rows!r}")
    # d_ff differs at reduced scales: rows name the nominal one
    for key, said in (
        ("iterations", meta.timing.plan.iterations),
        ("ranks", meta.shape.ranks),
        ("ep", meta.shape.ep),
    ):
        if said != getattr(identity, key):
            raise ShardError(path, f"metadata shape.{key}={said!r} but rows say {getattr(identity, key)!r}")
    if identity.kind not in KINDS:
        raise ShardError(path, f"unknown kind {identity.kind!r}; allowed: {', '.join(KINDS)}")


def _check_identity(path: Path, meta: ExecutionMeta, identity: ShardIdentity, suite: Suite) -> None:
    """Every field the execution id determines is what the suite's execution of that id says: a
    shard's other fields are only its own word, and a shard that names one execution while its fields
    say another would be published as that other one (a pair lost, or one made up)."""
    execution = suite.execution(identity.execution_id)
    if execution is None:
        raise ShardError(
            path,
            f"execution id {identity.execution_id!r} is not an execution of the matrix (suite {suite.name})",
        )
    said = Identity.of(execution, identity.ranks, identity.iterations, identity.attempt)
    wrong = [
        f"{f.name}={getattr(identity, f.name)!r} (the id says {getattr(said, f.name)!r})"
        for f in fields(Identity)
        if getattr(identity, f.name) != getattr(said, f.name)
    ]
    if tuple(meta.shape.layer_loads) != execution.workload.layer_loads:
        wrong.append(
            f"metadata shape.layer_loads={list(meta.shape.layer_loads)} "
            f"(the id says {list(execution.workload.layer_loads)})"
        )
    if wrong:
        raise ShardError(
            path, f"the shard contradicts its execution id {identity.execution_id!r}: {', '.join(wrong)}"
        )


def _check_windows(
    path: Path,
    window_ms: np.ndarray,
    iterations: int,
    phase: np.ndarray,
    rank: np.ndarray,
    window: np.ndarray,
) -> None:
    """Every window time is one a window can take (:mod:`pipeline.base.bounds`): an attempt of impossible
    times is no measurement, and it must not stand in for an older valid attempt."""
    least = ITERATION_MS_MIN * iterations
    bad = np.flatnonzero(~(np.isfinite(window_ms) & (window_ms >= least) & (window_ms <= WINDOW_MS_MAX)))
    if bad.size:
        first = bad[0]
        raise ShardError(
            path,
            f"window_ms must be positive and finite in every row, within {least:g} ms ({ITERATION_MS_MIN:g} "
            f"ms per iteration, {iterations} iterations) and {WINDOW_MS_MAX:g} ms "
            f"({WINDOW_MS_MAX / 86_400_000:g} days): {bad.size} row(s) are not, the first "
            f"{float(window_ms[first])!r} (phase {PHASES[phase[first]]}, rank {rank[first]}, window "
            f"{window[first]})",
        )


def _check_complete(
    path: Path, meta: ExecutionMeta, kind: str, phase: np.ndarray, rank: np.ndarray, window: np.ndarray
) -> None:
    ranks, windows = meta.shape.ranks, meta.timing.plan.windows
    if rank.min() < 0 or rank.max() >= ranks or window.min() < 0 or window.max() >= windows:
        raise ShardError(path, f"rank or window outside the declared {ranks} ranks x {windows} windows")
    present = sorted({PHASES[i] for i in np.unique(phase)})
    lacking = [p for p in kind_phases(kind) if p not in present]
    if lacking:
        raise ShardError(path, f"incomplete: no rows for phase(s) {lacking}")
    cells = np.unique((phase * ranks + rank) * windows + window).size
    expected = len(present) * ranks * windows
    if cells != expected or phase.size != expected:
        raise ShardError(
            path,
            f"incomplete: {phase.size} rows cover {cells} of {expected} rank x phase x window cells "
            f"({ranks} ranks, {windows} windows, phases {present})",
        )
