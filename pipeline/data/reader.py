"""Validated shard reader: a shard is either fully usable or rejected with the reason.

A shard is accepted only if it parses, has the columns and types of ``SCHEMA`` without nulls, carries
``execution`` metadata of a readable version (``READABLE_VERSIONS``; older versions are given the
current fields, see :mod:`pipeline.data.schema`) matching its file name, names one execution in every
row, and is complete: exactly one row per rank x phase x window that its metadata declares.
Required phases: those of the kind (:func:`pipeline.vocabulary.kind_phases`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.data.dataset import Dataset, parse_attempt
from pipeline.data.schema import METADATA_KEY, READABLE_VERSIONS, SCHEMA, SCHEMA_VERSION
from pipeline.vocabulary import KINDS, PHASES, kind_phases

# Columns that name the execution: they hold one value in every row of a shard.
IDENTITY_COLUMNS = (
    "execution_id",
    "workload_id",
    "kind",
    "profile",
    "precision",
    "implementation",
    "pipeline",
    "ep",
    "ranks",
    "d_ff",
    "iterations",
    "attempt",
    "job_id",
    "device",
)
# Metadata ``shape`` entries that the published metrics need, all positive integers.
_SHAPE_INTEGERS = (
    "nominal_tokens",
    "d_model",
    "d_ff",
    "num_experts",
    "top_k",
    "num_shared",
    "ep",
    "ranks",
    "windows",
    "iterations",
)
_LAYER_KEYS = {
    "layer",
    "load_factor",
    "factor",
    "budget_rows",
    "routed_rows",
    "retained_rows",
    "recomputed_rows",
}
# One object per timed layer, by schema version.
_SAVED_STATE_KEYS = {1: _LAYER_KEYS | {"overflow"}, 2: _LAYER_KEYS | {"recomputes", "capacity_flag"}}
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
    meta: dict[str, Any]
    identity: dict[str, Any]
    phase: np.ndarray  # phase names
    rank: np.ndarray
    window_ms: np.ndarray
    iterations: np.ndarray

    @property
    def execution_id(self) -> str:
        return self.identity["execution_id"]

    @property
    def attempt(self) -> int:
        return self.identity["attempt"]


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
    if meta["schema_version"] == 1:
        meta = _upgrade_v1(meta, identity["implementation"])
    phase = _phase_index(path, table.column("phase").chunk(0))
    rank = table.column("rank").to_numpy().astype(np.int64)
    window = table.column("window").to_numpy().astype(np.int64)
    _check_complete(path, meta, identity["kind"], phase, rank, window)
    window_ms = table.column("window_ms").to_numpy()
    if not (np.isfinite(window_ms) & (window_ms > 0)).all():
        raise ShardError(path, "window_ms must be positive and finite in every row")
    if identity["iterations"] < 1:
        raise ShardError(path, f"iterations must be >= 1, got {identity['iterations']}")
    return Shard(
        path=path,
        meta=meta,
        identity=identity,
        phase=np.asarray(PHASES)[phase],
        rank=rank,
        window_ms=window_ms,
        iterations=np.full(rank.size, identity["iterations"]),
    )


def _phase_index(path: Path, phase: pa.DictionaryArray) -> np.ndarray:
    """Index into PHASES of every row."""
    names = phase.dictionary.to_pylist()
    unknown = sorted(set(names) - set(PHASES))
    if unknown:
        raise ShardError(path, f"unknown phase(s) {unknown}; allowed: {', '.join(PHASES)}")
    return np.array([PHASES.index(n) for n in names], dtype=np.int64)[phase.indices.to_numpy()]


def _metadata(path: Path, schema: pa.Schema) -> dict[str, Any]:
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise ShardError(path, f"no {METADATA_KEY.decode()!r} metadata")
    try:
        meta = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ShardError(path, f"{METADATA_KEY.decode()!r} metadata is not JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise ShardError(path, f"{METADATA_KEY.decode()!r} metadata is not a JSON object")
    version = meta.get("schema_version")
    if version not in READABLE_VERSIONS:
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise ShardError(path, f"unknown schema_version {version!r}; this reader reads {readable}")
    shape = meta.get("shape")
    if not isinstance(shape, dict):
        raise ShardError(path, "metadata has no 'shape' object")
    for key in _SHAPE_INTEGERS:
        value = shape.get(key)
        if not _positive_int(value):
            raise ShardError(path, f"metadata shape.{key} must be a positive integer, got {value!r}")
    loads = shape.get("layer_loads")
    if not isinstance(loads, list) or not loads or not all(_positive_number(x) for x in loads):
        raise ShardError(
            path, f"metadata shape.layer_loads must be a list of positive numbers, got {loads!r}"
        )
    layer_tokens = shape.get("layer_tokens")
    if (
        not isinstance(layer_tokens, list)
        or len(layer_tokens) != len(loads)
        or not all(_positive_int(x) for x in layer_tokens)
    ):
        raise ShardError(
            path,
            f"metadata shape.layer_tokens must be a list of {len(loads)} positive integers (one per "
            f"layer), got {layer_tokens!r}",
        )
    _check_diagnostics(path, meta)
    return meta


def _check_diagnostics(path: Path, meta: dict[str, Any]) -> None:
    """Diagnostics the published files carry: rates and bytes are null or non-negative numbers."""
    for section, keys in (
        ("memory", ("peak_allocated_bytes",)),
        ("nvlink", ("tx_bytes_per_s", "rx_bytes_per_s")),
    ):
        values = meta.get(section)
        if not isinstance(values, dict):
            raise ShardError(path, f"metadata has no {section!r} object")
        for key in keys:
            value = values.get(key)
            if value is not None and not _non_negative(value):
                raise ShardError(path, f"metadata {section}.{key} must be null or >= 0, got {value!r}")
    version = meta["schema_version"]
    layers = meta.get("saved_state")
    if not isinstance(layers, list) or not all(_valid_layer(x, version) for x in layers):
        flags = "boolean overflow" if version == 1 else "boolean recomputes, boolean or null capacity_flag"
        raise ShardError(
            path,
            "metadata saved_state must be a list of objects with integer layer and *_rows >= 0, "
            f"numeric load_factor and factor, {flags}; got {layers!r:.200}",
        )
    if version >= 2 and not isinstance(meta.get("policy"), dict):
        raise ShardError(path, f"metadata policy must be an object, got {meta.get('policy')!r:.200}")


def _valid_layer(entry: Any, version: int) -> bool:
    if not isinstance(entry, dict) or not _SAVED_STATE_KEYS[version] <= entry.keys():
        return False
    counts = [entry[k] for k in ("layer", "budget_rows", "routed_rows", "retained_rows", "recomputed_rows")]
    numbers = [entry["load_factor"], entry["factor"]]
    flags_ok = (
        isinstance(entry["overflow"], bool)
        if version == 1
        else isinstance(entry["recomputes"], bool) and entry["capacity_flag"] in (True, False, None)
    )
    return (
        all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts)
        and all(_non_negative(n) for n in numbers)
        and flags_ok
    )


def _upgrade_v1(meta: dict[str, Any], implementation: str) -> dict[str, Any]:
    """Version 1 saved state in version 2's fields: Dist-MoE's pooled ``budget_rows`` becomes the
    per-layer share (the pool is the share times the layers), the one ``overflow`` flag becomes
    ``recomputes`` and (Dist-MoE only) ``capacity_flag``; there is no recorded ``policy``."""
    layers = meta["saved_state"]
    balanced = meta["shape"]["nominal_tokens"] * meta["shape"]["top_k"]
    dist = implementation == "dist-moe"
    upgraded: list[dict[str, Any]] = []
    for entry in layers:
        entry = {k: v for k, v in entry.items() if k != "overflow"}
        if dist:
            entry["budget_rows"] //= len(layers)
            entry["factor"] = entry["budget_rows"] / balanced
        entry["recomputes"] = entry["recomputed_rows"] > 0
        entry["capacity_flag"] = layers[len(upgraded)]["overflow"] if dist else None
        upgraded.append(entry)
    return {**meta, "saved_state": upgraded, "policy": None}


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _positive_number(value: Any) -> bool:
    return _non_negative(value) and value > 0


def _non_negative(value: Any) -> bool:
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    )


def _check_columns(path: Path, schema: pa.Schema) -> None:
    got = [(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type) for f in schema]
    want = [(f.name, f.type) for f in SCHEMA]
    if got != want:
        diff = sorted(set(map(str, got)) ^ set(map(str, want)))
        raise ShardError(path, f"columns differ from schema version {SCHEMA_VERSION}: {diff}")


def _identity(path: Path, file: pq.ParquetFile) -> dict[str, Any]:
    """The one value of each identity column. The writer's column statistics decide when present
    (min == max, no nulls, in every row group), which spares decoding; otherwise the column is read."""
    groups = [file.metadata.row_group(g) for g in range(file.metadata.num_row_groups)]
    values: dict[str, Any] = {}
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
    return values


def _check_names(path: Path, meta: dict[str, Any], identity: dict[str, Any]) -> None:
    attempt = parse_attempt(path.name)
    if attempt is None:
        raise ShardError(path, "file name must be attempt-<n>.parquet with n >= 1")
    named = {"execution_id": Dataset.execution_of_shard(path), "attempt": attempt}
    for key in ("execution_id", "workload_id", "attempt", "job_id"):
        if meta.get(key) != identity[key]:
            raise ShardError(path, f"metadata {key}={meta.get(key)!r} but rows say {identity[key]!r}")
        if key in named and named[key] != identity[key]:
            raise ShardError(
                path, f"file name says {key}={named[key]!r} but the shard says {identity[key]!r}"
            )
    for key in ("iterations", "ranks", "ep"):  # d_ff differs at reduced scales: rows name the nominal one
        if meta["shape"][key] != identity[key]:
            raise ShardError(
                path, f"metadata shape.{key}={meta['shape'][key]!r} but rows say {identity[key]!r}"
            )
    if identity["kind"] not in KINDS:
        raise ShardError(path, f"unknown kind {identity['kind']!r}; allowed: {', '.join(KINDS)}")


def _check_complete(
    path: Path, meta: dict[str, Any], kind: str, phase: np.ndarray, rank: np.ndarray, window: np.ndarray
) -> None:
    ranks, windows = meta["shape"]["ranks"], meta["shape"]["windows"]
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
