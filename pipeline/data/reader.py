"""Validated shard reader: a shard is either fully usable or rejected with the reason.

A shard is accepted only if it parses, has the columns and types of ``SCHEMA`` without nulls, carries
``execution`` metadata that constructs an :class:`~pipeline.data.meta.ExecutionMeta` (of this schema
version) matching its file name and rows, names one execution in every row, and is complete: exactly
one row per rank x phase x window that its metadata declares. Required phases: those of the kind
(:func:`pipeline.vocabulary.kind_phases`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.data.codec import RecordError, decode
from pipeline.data.dataset import Dataset, parse_attempt
from pipeline.data.meta import ExecutionMeta, MetaError
from pipeline.data.schema import IDENTITY_COLUMNS, METADATA_KEY, SCHEMA, SCHEMA_VERSION, ShardIdentity
from pipeline.vocabulary import KINDS, PHASES, kind_phases

_TIMING_COLUMNS = ["phase", "rank", "window", "window_ms"]
_INDEX = {name: i for i, name in enumerate(SCHEMA.names)}


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


def read_shard(path: Path | str) -> Shard:
    """Read and validate one shard; raise ``ShardError`` naming the path and the reason."""
    path = Path(path)
    try:
        with pa.OSFile(str(path)) as source, pq.ParquetFile(source, read_dictionary=["phase"]) as file:
            meta = _metadata(path, file.schema_arrow)
            _check_columns(path, file.schema_arrow)
            if file.metadata.num_rows == 0:
                raise ShardError(path, "no rows")
            identity = _identity(path, file)
            table = file.read(
                columns=_TIMING_COLUMNS, use_threads=False
            ).combine_chunks()  # parallel per file
    except (OSError, pa.ArrowException) as exc:
        raise ShardError(path, f"unreadable parquet ({exc})") from None
    nulls = [name for name in _TIMING_COLUMNS if table.column(name).null_count]
    if nulls:
        raise ShardError(path, f"null values in column(s) {nulls}")
    _check_names(path, meta, identity)
    phase = _phase_index(path, table.column("phase").chunk(0))
    rank = table.column("rank").to_numpy().astype(np.int64)
    window = table.column("window").to_numpy().astype(np.int64)
    _check_complete(path, meta, identity.kind, phase, rank, window)
    window_ms = table.column("window_ms").to_numpy()
    if not (np.isfinite(window_ms) & (window_ms > 0)).all():
        raise ShardError(path, "window_ms must be positive and finite in every row")
    if identity.iterations < 1:
        raise ShardError(path, f"iterations must be >= 1, got {identity.iterations}")
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
