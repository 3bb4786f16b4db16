"""The shard's ``execution`` metadata as types: :class:`ExecutionMeta` and the records it nests.

The job builds an :class:`ExecutionMeta` and writes ``to_json()``; a reader gets it back with
``ExecutionMeta.from_json``, which checks every field against its annotation and then the records'
own rules (:mod:`pipeline.data.codec`), so a shard's metadata is valid exactly when it constructs.
The report reads it by attribute. ``docs/dataset.md`` lists every field; the JSON keys are the field
names. Metadata of every version this project has written (``READABLE``) is read into today's
record with what it did not record as unknown (:func:`upgraded`), never made up: such a field is None
(``RECORDED_SINCE`` names the version that first recorded it, from which on it is required) or says
why it is unknown; an unknown version is refused with its number named.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from pipeline.base.bounds import at_least
from pipeline.base.implementations import candidate
from pipeline.base.saved_state import LayerState, Policy
from pipeline.base.vocabulary import LAYER_PHASES
from pipeline.data.codec import JsonRecord, RecordError, decode
from pipeline.data.topology import Topology
from pipeline.matrix import EXECUTION_BY_ID
from pipeline.matrix.scale import Shape, TimingPlan


class MetaError(RecordError):
    """Metadata that does not construct; the message names the field (``shape.windows``) and why."""


@dataclass(frozen=True)
class Sanity:
    """The correctness gate (:mod:`pipeline.bench.sanity`): normwise relative errors of a small slice
    against a float64 reference, worst over ranks; the routed rows of every rank's slice it checked
    (``slice_rows``) and how many of them went to another rank's experts (``crossed_rows``: checked
    across the real dispatch and combine). None where the shard's schema version did not record them
    (before 7)."""

    passed: bool
    max_error: float
    tolerance: float
    errors: dict[str, float]  # tensor name (y, dx, dw1, dw2) -> worst error over ranks
    tokens: int
    seconds: float
    crossed_rows: int | None = None
    slice_rows: int | None = None

    def __post_init__(self) -> None:
        at_least(self, 0, "crossed_rows", "slice_rows")
        crossed, checked = self.crossed_rows, self.slice_rows
        if crossed is not None and checked is not None and crossed > checked:
            raise ValueError(f"crossed_rows {crossed} exceeds slice_rows {checked}")


@dataclass(frozen=True)
class Versions:
    """The software stack that shaped the timings; None where a component is absent."""

    python: str
    torch: str
    cuda: str | None
    nccl: str | None
    driver: str | None
    cutlass_dsl: str | None


# The commit a run was prepared from, for a checkout whose own .git may be stale (a copied tree: the
# device run sets it from its pack's record); unset, the checkout's HEAD (pipeline.bench.diagnostics)
GIT_SHA_ENV = "MOE_BENCH_GIT_SHA"


@dataclass(frozen=True)
class Provenance:
    """Where and with what the execution ran: the launch ``backend`` (local or slurm), the ``cluster``
    preset (``local`` with the local backend) and the process group's ``collective`` (nccl or gloo)."""

    git_sha: str | None
    hosts: tuple[str, ...]
    job_ids: tuple[str, ...]
    backend: str
    cluster: str
    collective: str | None  # None: not recorded (schema_version 1, 2)
    versions: Versions


@dataclass(frozen=True)
class Timing:
    """How the windows were timed: the clock, CUDA graphs or why not, the timing the scale asked
    for (``requested``) and the one that ran (``plan``: calibrated iterations and windows)."""

    clock: str
    cuda_graphs: bool
    cuda_graphs_reason: str | None
    requested: TimingPlan | None  # None: not recorded (schema_version 1, 2)
    plan: TimingPlan


@dataclass(frozen=True)
class Kernels:
    """What computed the layers: the grouped-GEMM backend (``torch``, ``cute-sm90``, ``cute-sm100``),
    how MXFP8 products were formed (None for BF16 layers) and the SwiGLU backward's form (None where
    the kind has no backward)."""

    gemm: str
    mxfp8: str | None
    swiglu_backward: str | None


@dataclass(frozen=True)
class Contention:
    """How crowded the host was during the timing windows (:mod:`pipeline.bench.contention`): the
    cores a rank could run on, ranks per host, the share of its runnable time the most denied rank's
    threads waited for a core (None where unknown) and whether that was oversubscribed. None where the
    shard's schema version did not record them (1 and 2 recorded no contention, 3 no wait share)."""

    cores: int | None
    ranks_per_host: int | None
    cpu_wait_share: float | None
    oversubscribed: bool | None

    def __post_init__(self) -> None:
        at_least(self, 1, "cores", "ranks_per_host")
        at_least(self, 0, "cpu_wait_share")


@dataclass(frozen=True)
class EmulationCopies:
    """Bytes the tracked rank held that only this project's layers keep (within the peak): the
    dequantized copies of MXFP8 weights kept beside them, and the dispatched rows every routed GEMM
    saves for its backward outside the policy's budget, at most all layers' at once."""

    mx_weight_values: int
    saved_dispatched_rows: int

    def __post_init__(self) -> None:
        at_least(self, 0, "mx_weight_values", "saved_dispatched_rows")

    @property
    def total(self) -> int:
        return self.mx_weight_values + self.saved_dispatched_rows


@dataclass(frozen=True)
class Memory:
    """Peaks, the largest over ranks: CUDA memory allocated by torch (None on CPUs) and resident set."""

    peak_allocated_bytes: int | None
    peak_rss_bytes: int | None
    emulation: EmulationCopies | None  # None: not recorded (schema_version 1, 2)

    def __post_init__(self) -> None:
        at_least(self, 0, "peak_allocated_bytes", "peak_rss_bytes")


@dataclass(frozen=True)
class NVLink:
    """NVLink byte rates averaged over the GPUs that could be read; None with the reason otherwise."""

    tx_bytes_per_s: float | None
    rx_bytes_per_s: float | None
    sample_seconds: float | None
    reason: str | None

    def __post_init__(self) -> None:
        at_least(self, 0, "tx_bytes_per_s", "rx_bytes_per_s", "sample_seconds")


@dataclass(frozen=True)
class GpuConditions:
    """One rank's GPU during its timed windows, sampled through NVML (:mod:`pipeline.bench.conditions`):
    where it was, the mean SM and memory clocks and their maxima, the clock-event (throttle) reasons
    that slowed it in any sample and the share of samples they did, and the most compute processes it
    held at once (the rank's own counts: more than one is a shared GPU). A GPU whose clocks differ
    between two runs runs the same code at another speed, which no window can tell from a change."""

    node: str
    rank: int
    index: int  # NVML's index of the GPU on its node
    name: str
    samples: int
    sm_clock_mhz: float
    memory_clock_mhz: float
    max_sm_clock_mhz: float | None
    max_memory_clock_mhz: float | None
    throttle_reasons: tuple[str, ...]
    throttled_share: float
    processes: int | None

    def __post_init__(self) -> None:
        at_least(self, 0, "rank", "index", "sm_clock_mhz", "memory_clock_mhz", "processes")
        at_least(self, 0, "max_sm_clock_mhz", "max_memory_clock_mhz", "throttled_share")
        at_least(self, 1, "samples")
        if self.throttled_share > 1:
            raise ValueError(f"throttled_share must be <= 1, got {self.throttled_share}")


@dataclass(frozen=True)
class Conditions:
    """The GPUs' measuring conditions during the timed windows (the host's CPU is :class:`Contention`):
    one record per rank whose GPU was sampled, and why the others, or all, are unknown (``unknown``:
    no GPU, no NVML, not recorded by the shard's schema version)."""

    gpus: tuple[GpuConditions, ...]
    unknown: str | None

    def __post_init__(self) -> None:
        if not self.gpus and self.unknown is None:
            raise ValueError("conditions without a sampled GPU must say why (unknown)")


def unknown_conditions(why: str) -> Conditions:
    """No GPU conditions, and why."""
    return Conditions((), why)


# What an execution that did not sample its GPUs records (the default of ExecutionMeta.conditions).
NOT_SAMPLED = unknown_conditions("not sampled: the execution did not sample its GPUs during the windows")

# How far a rank's phases and unclaimed time may sum from its profiled iteration (rounding only).
ACCOUNT_TOLERANCE = 1e-6


@dataclass(frozen=True)
class RankAccount:
    """One rank's phase account (:mod:`pipeline.bench.account`): the spans of its profiled iterations
    (``spans_ms``), the run of them it accounts (``first``, ``length``: the one whose mean is nearest
    its timed median) and per iteration of that run its span (``profiled_ms``), each layer phase's
    time and the time no phase claimed, which add up to it; the rows its experts received in each
    timed layer (each phase's work follows from them); on a GPU the kernels of an iteration and how
    many were named (by the op that launched them, or in a CUDA graph by their eager twin), None on
    CPUs."""

    rank: int
    iterations: int
    spans_ms: tuple[float, ...]
    first: int
    length: int
    profiled_ms: float
    phases: dict[str, float]  # every phase of LAYER_PHASES -> ms
    unclaimed_ms: float
    routed_rows: tuple[int, ...]
    kernels: int | None
    named_kernels: int | None

    def __post_init__(self) -> None:
        at_least(self, 0, "rank", "first", "profiled_ms", "unclaimed_ms", "kernels", "named_kernels")
        at_least(self, 1, "iterations", "length")
        if len(self.spans_ms) != self.iterations or self.first + self.length > self.iterations:
            raise ValueError(
                f"spans_ms must hold the {self.iterations} iterations' spans, the run among them"
            )
        run = self.spans_ms[self.first : self.first + self.length]
        if abs(sum(run) / self.length - self.profiled_ms) > ACCOUNT_TOLERANCE * max(self.profiled_ms, 1e-9):
            raise ValueError(f"profiled_ms {self.profiled_ms} is not the mean span of its run {list(run)}")
        if set(self.phases) != set(LAYER_PHASES):
            raise ValueError(f"phases must name exactly {', '.join(LAYER_PHASES)}, got {sorted(self.phases)}")
        if any(not v >= 0 for v in self.phases.values()) or any(r < 0 for r in self.routed_rows):
            raise ValueError("phase times and routed rows must be >= 0")
        total = sum(self.phases.values()) + self.unclaimed_ms
        if abs(total - self.profiled_ms) > ACCOUNT_TOLERANCE * max(self.profiled_ms, 1e-9) + 1e-9:
            raise ValueError(f"phases and unclaimed add up to {total} ms, not profiled_ms {self.profiled_ms}")


@dataclass(frozen=True)
class Account:
    """The execution's phase account: one per rank that profiled, and why any (or all) are missing
    (``unknown``: not recorded by the shard's schema version, or the profiler did not run); ``traces``
    whether each rank's profile was kept in the dataset (``Dataset.trace_path``)."""

    ranks: tuple[RankAccount, ...]
    unknown: str | None
    traces: bool

    def __post_init__(self) -> None:
        if not self.ranks and self.unknown is None:
            raise ValueError("an account without a rank must say why (unknown)")
        if len({r.rank for r in self.ranks}) != len(self.ranks):
            raise ValueError("an account holds one record per rank")

    def of(self, rank: int) -> RankAccount | None:
        """Rank ``rank``'s account, if it has one."""
        return next((r for r in self.ranks if r.rank == rank), None)


# What an execution that profiled nothing records (the default of ExecutionMeta.account).
NOT_ACCOUNTED = Account((), "not accounted: the execution profiled no iteration", False)


@dataclass(frozen=True)
class ExecutionMeta(JsonRecord):
    """Everything a shard says about its execution attempt besides its window rows."""

    # 2: saved state with one meaning per field, the policy; 3: provenance's collective, the timing
    # requested, kernels, contention, emulation copies; 4: contention as the timing thread's CPU wait
    # share; 5: the GPUs' conditions during the windows; 6: the phase account; 7: the topology (nodes,
    # ranks per node, every rank's GPU, the NCCL environment) and the gate's rows across ranks
    VERSION: ClassVar[int] = 7
    READABLE: ClassVar[tuple[int, ...]] = (1, 2, 3, 4, 5, 6, 7)  # earlier ones: see ``upgraded``
    # the fields with a default that today's version must hold (earlier ones read as unknown, ``upgraded``)
    DEFAULTED: ClassVar[tuple[str, ...]] = ("conditions", "account", "topology")

    schema_version: int
    execution_id: str
    workload_id: str
    attempt: int
    job_id: str
    config: dict[str, Any]  # the resolved Hydra config of the execution, as composed (free-form)
    shape: Shape
    provenance: Provenance
    started_at: str
    ended_at: str
    timing: Timing
    kernels: Kernels | None  # None: not recorded (schema_version 1, 2)
    contention: Contention
    memory: Memory
    nvlink: NVLink
    saved_state: tuple[LayerState, ...]
    sanity: Sanity | None  # None: not recorded (schema_version 1, 2 written before the gate)
    policy: Policy | None  # None: not recorded (schema_version 1)
    conditions: Conditions = NOT_SAMPLED
    account: Account = NOT_ACCOUNTED
    topology: Topology | None = None  # None: not recorded (schema_version 1 to 6)

    def __post_init__(self) -> None:
        if self.schema_version not in self.READABLE:
            raise MetaError(_unreadable(self.schema_version))
        if self.attempt < 1:
            raise MetaError(f"attempt must be >= 1, got {self.attempt}")
        layers = len(self.shape.layer_loads)
        if len(self.saved_state) != layers:
            raise MetaError(f"saved_state has {len(self.saved_state)} layers, shape.layer_loads {layers}")
        if self.topology is not None and len(self.topology.bindings) != self.shape.ranks:
            raise MetaError(
                f"topology has {len(self.topology.bindings)} ranks' bindings, shape.ranks {self.shape.ranks}"
            )
        for path, since in RECORDED_SINCE.items():
            if self.schema_version >= since and _at(self, path) is None:
                raise MetaError(f"{path} is null, but schema_version {self.schema_version} records it")

    @classmethod
    def from_json(cls, data: object) -> ExecutionMeta:
        """The metadata a shard stores, checked field by field; a :class:`MetaError` names the first
        field that is missing, of the wrong type or out of bounds."""
        version = data.get("schema_version") if isinstance(data, dict) else None
        if not isinstance(data, dict) or version not in cls.READABLE or isinstance(version, bool):
            raise MetaError(_unreadable(version))
        lacking = [k for k in cls.DEFAULTED if k not in data] if version == cls.VERSION else []
        if lacking:
            raise MetaError(f"metadata {lacking[0]} is missing")
        try:
            return decode(cls, upgraded(data))
        except RecordError as err:
            read_as = "" if version == cls.VERSION else f" (read from schema_version {version})"
            raise MetaError(f"metadata {err}{read_as}") from None


# The fields that a version before the one named did not record and reads as None; from that version
# on each is required, so that None always means "not recorded" (docs/dataset.md, metadata versions).
RECORDED_SINCE: dict[str, int] = {
    "policy": 2,
    "provenance.collective": 3,
    "timing.requested": 3,
    "kernels": 3,
    "contention.cores": 3,
    "contention.ranks_per_host": 3,
    "memory.emulation": 3,
    "sanity": 3,
    "policy.buffers": 3,
    "topology": 7,
    "sanity.crossed_rows": 7,
    "sanity.slice_rows": 7,
}
# The timing plan's fields every version 1 and 2 wrote inside ``shape`` (its minima came later).
_PLAN_RECORDED = ("warmup", "windows", "iterations")
# The launch backends: a version-1 shard written before its launcher fix holds the backend in
# ``cluster`` and the cluster preset (never one of these) in ``launcher``.
_BACKENDS = ("local", "slurm")


def _at(record: object, path: str) -> object:
    for name in path.split("."):
        record = getattr(record, name)
        if record is None:
            return None
    return record


def _unreadable(version: object) -> str:
    readable = ", ".join(map(str, ExecutionMeta.READABLE))
    return f"unknown schema_version {version!r}; this reader reads {readable}"


def upgraded(data: dict[str, Any]) -> dict[str, Any]:
    """Metadata of a readable earlier version in today's fields, what it did not record unknown:

    - 6 recorded no topology and no count of the gate's rows: ``topology`` and ``sanity``'s
      ``crossed_rows`` and ``slice_rows`` None (their defaults);
    - 5 also recorded no phase account: ``account`` unknown, naming the version;
    - 4 also recorded no GPU conditions: ``conditions`` unknown, naming the version;
    - 3 also measured contention as the machine's runnable processes per core, which flagged quiet
      hosts (the gloo threads are runnable beside the ranks) and is not the CPU wait share:
      ``cpu_wait_share`` and ``oversubscribed`` unknown (its cores and ranks per host stay);
    - 2 also recorded no collective, timing request, kernels, contention or emulation copies (None),
      the timing that ran inside ``shape`` (moved to ``timing.plan``) and the backend as ``launcher``;
      early ones no policy buffers, and those written before the gate no ``sanity`` (None);
    - 1 also recorded no policy (None) and its saved state in other terms (:func:`_saved_state_v1`).

    Today's version is returned as it is."""
    version = data.get("schema_version")
    if version == ExecutionMeta.VERSION:
        return data
    out = dict(data)
    if version == 6:
        return out
    unrecorded = f"not recorded (schema_version {version})"
    out["account"] = {"ranks": [], "unknown": unrecorded, "traces": False}
    if version == 5:
        return out
    out["conditions"] = {"gpus": [], "unknown": unrecorded}
    if version == 3 and isinstance(data.get("contention"), dict):
        contention = {k: v for k, v in data["contention"].items() if k != "runnable_per_core"}
        out["contention"] = contention | {"cpu_wait_share": None, "oversubscribed": None}
    if version in (1, 2):
        out |= _before_3(data, version)
    return out


def _before_3(data: dict[str, Any], version: int) -> dict[str, Any]:
    """The fields of a version-1 or -2 shard that version 3 added or moved; a field of the wrong type
    is left as it is, for :func:`decode` to name."""
    out: dict[str, Any] = {
        "kernels": None,
        "contention": dict.fromkeys(("cores", "ranks_per_host", "cpu_wait_share", "oversubscribed")),
        "sanity": data.get("sanity"),
    }
    shape, timing = data.get("shape"), data.get("timing")
    if isinstance(shape, dict) and isinstance(timing, dict):
        plan = {f.name for f in fields(TimingPlan)}
        lacking = [k for k in _PLAN_RECORDED if k not in shape]
        if lacking:  # named where this version wrote it
            raise MetaError(f"shape.{lacking[0]} is missing")
        out["shape"] = {k: v for k, v in shape.items() if k not in plan}
        out["timing"] = timing | {"requested": None, "plan": {k: v for k, v in shape.items() if k in plan}}
    provenance = data.get("provenance")
    if isinstance(provenance, dict):
        out["provenance"] = {k: v for k, v in provenance.items() if k != "launcher"} | {"collective": None}
        if "launcher" in provenance:
            backend, cluster = provenance["launcher"], provenance.get("cluster")
            if version == 1 and backend not in _BACKENDS and cluster in _BACKENDS:
                backend, cluster = cluster, backend
            out["provenance"] |= {"backend": backend, "cluster": cluster}
    if isinstance(data.get("memory"), dict):
        out["memory"] = data["memory"] | {"emulation": None}
    if version == 1:
        out["policy"] = None
        out["saved_state"] = _saved_state_v1(data)
    elif isinstance(data.get("policy"), dict) and "buffers" not in data["policy"]:
        out["policy"] = data["policy"] | {"buffers": None}
    return out


def _saved_state_v1(data: dict[str, Any]) -> object:
    """Version 1's saved state in today's terms, from what it recorded: the one ``overflow`` flag
    meant "recomputed" for MoK and was the capacity flag for Dist-MoE (the candidate, the one
    implementation with a pooled slot), whose ``budget_rows`` was the slot of all its layers (its
    layers' equal shares, each floor(factor x T x K) rows) and whose ``factor`` was the requested one.
    So ``recomputes`` is whether rows were recomputed, ``capacity_flag`` is Dist-MoE's ``overflow``
    (None for MoK, which has no flag), and Dist-MoE's ``budget_rows`` and ``factor`` are one layer's
    share."""
    layers, execution_id = data.get("saved_state"), data.get("execution_id")
    if not isinstance(layers, list) or not all(isinstance(x, dict) for x in layers):
        return layers
    execution = EXECUTION_BY_ID.get(execution_id) if isinstance(execution_id, str) else None
    if execution is None:
        raise MetaError(f"saved_state cannot be read: {execution_id!r:.80} is not an execution of the matrix")
    pooled = execution.variant.implementation == candidate().name
    shape = data["shape"] if isinstance(data.get("shape"), dict) else {}
    tokens, top_k = _count(shape.get("nominal_tokens")), _count(shape.get("top_k"))
    balanced = tokens * top_k if min(tokens, top_k) > 0 else 0
    out = []
    for i, entry in enumerate(layers):
        overflow, recomputed = entry.get("overflow"), _count(entry.get("recomputed_rows"))
        if not isinstance(overflow, bool):
            raise MetaError(f"saved_state[{i}].overflow must be a boolean, got {overflow!r:.80}")
        if recomputed < 0:
            raise MetaError(f"saved_state[{i}].recomputed_rows must be an integer >= 0")
        layer = {k: v for k, v in entry.items() if k != "overflow"}
        layer |= {"recomputes": recomputed > 0, "capacity_flag": overflow if pooled else None}
        if pooled:
            pool = _count(entry.get("budget_rows"))
            if pool < 0 or pool % len(layers) or balanced < 1:
                raise MetaError(
                    f"saved_state[{i}].budget_rows must be the pooled slot of {len(layers)} layers' equal "
                    f"shares, got {entry.get('budget_rows')!r:.80} (T x K = {balanced})"
                )
            layer |= {"budget_rows": pool // len(layers), "factor": pool // len(layers) / balanced}
        out.append(layer)
    return out


def _count(value: object) -> int:
    """``value`` where it is an integer >= 0, else -1."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else -1
