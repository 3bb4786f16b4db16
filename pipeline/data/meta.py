"""The shard's ``execution`` metadata as types: :class:`ExecutionMeta` and the records it nests.

The job builds an :class:`ExecutionMeta` and writes ``to_json()``; a reader gets it back with
``ExecutionMeta.from_json``, which checks every field against its annotation and then the records'
own rules (:mod:`pipeline.data.codec`), so a shard's metadata is valid exactly when it constructs.
The report reads it by attribute. ``docs/dataset.md`` lists every field; the JSON keys are the field
names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from pipeline.bounds import at_least
from pipeline.data.codec import JsonRecord, RecordError, decode
from pipeline.matrix.scale import Shape, TimingPlan


class MetaError(RecordError):
    """Metadata that does not construct; the message names the field (``shape.windows``) and why."""


@dataclass(frozen=True)
class SavedState:
    """Evidence of one layer's forward: how many of its routed rows kept their GEMM-1 outputs for
    backward within the policy's budget (the rest are recomputed)."""

    factor: float  # budget_rows / (T x K)
    budget_rows: int  # saved-activation rows allocated for this layer (Dist-MoE: its share of the slot)
    routed_rows: int
    retained_rows: int
    recomputed_rows: int
    recomputes: bool  # some routed rows are recomputed in backward (recomputed_rows > 0)
    capacity_flag: bool | None  # Dist-MoE's capacity flag (slot or scratch overflow); None for MoK

    @classmethod
    def of(
        cls,
        budget_rows: int,
        routed_rows: int,
        retained_rows: int,
        tokens: int,
        top_k: int,
        flag: bool | None,
    ) -> SavedState:
        """A forward that kept ``retained_rows`` of its ``routed_rows`` within ``budget_rows`` (the
        rest recomputed in backward); ``flag``: the capacity flag (None for MoK)."""
        return cls(
            factor=budget_rows / max(tokens * top_k, 1),
            budget_rows=budget_rows,
            routed_rows=routed_rows,
            retained_rows=retained_rows,
            recomputed_rows=routed_rows - retained_rows,
            recomputes=retained_rows < routed_rows,
            capacity_flag=flag,
        )

    def __post_init__(self) -> None:
        at_least(self, 0, "budget_rows", "routed_rows", "retained_rows", "recomputed_rows", "factor")


@dataclass(frozen=True)
class LayerState(SavedState):
    """The tracked GPU's :class:`SavedState` in one timed layer, with the layer and its load factor."""

    layer: int
    load_factor: float

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least(self, 0, "layer", "load_factor")


@dataclass(frozen=True)
class Buffer:
    """One device buffer of a policy: ``rows`` token-rows of ``row_bytes`` each."""

    name: str
    rows: int
    row_bytes: int
    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("bytes",)

    @property
    def bytes(self) -> int:
        return self.rows * self.row_bytes

    def __post_init__(self) -> None:
        at_least(self, 0, "rows", "row_bytes")


@dataclass(frozen=True)
class Policy:
    """A stack's allocation policy (``describe()`` of :mod:`pipeline.moe.policy`); rows are token-rows,
    factors in units of T x K."""

    implementation: str
    layers: int
    requested_factor: float
    layer_budget_rows: int
    factor: float
    pooled: bool
    activation_rows: int
    scratch_factor: float | None
    scratch_rows: int
    host_scratch_bytes: int
    overflow: str  # what overflow means for the implementation
    buffers: tuple[Buffer, ...]

    def __post_init__(self) -> None:
        at_least(self, 0, "layers", "layer_budget_rows", "activation_rows", "scratch_rows")


@dataclass(frozen=True)
class Sanity:
    """The correctness gate (:mod:`pipeline.bench.sanity`): normwise relative errors of a small slice
    against a float64 reference, worst over ranks."""

    passed: bool
    max_error: float
    tolerance: float
    errors: dict[str, float]  # tensor name (y, dx, dw1, dw2) -> worst error over ranks
    tokens: int
    seconds: float


@dataclass(frozen=True)
class Versions:
    """The software stack that shaped the timings; None where a component is absent."""

    python: str
    torch: str
    cuda: str | None
    nccl: str | None
    driver: str | None
    cutlass_dsl: str | None


@dataclass(frozen=True)
class Provenance:
    """Where and with what the execution ran: the launch ``backend`` (local or slurm), the ``cluster``
    preset (``local`` with the local backend) and the process group's ``collective`` (nccl or gloo)."""

    git_sha: str | None
    hosts: tuple[str, ...]
    job_ids: tuple[str, ...]
    backend: str
    cluster: str
    collective: str
    versions: Versions


@dataclass(frozen=True)
class Timing:
    """How the windows were timed: the clock, CUDA graphs or why not, the timing the scale asked
    for (``requested``) and the one that ran (``plan``: calibrated iterations and windows)."""

    clock: str
    cuda_graphs: bool
    cuda_graphs_reason: str | None
    requested: TimingPlan
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
    threads waited for a core (None where unknown) and whether that was oversubscribed."""

    cores: int
    ranks_per_host: int
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
    emulation: EmulationCopies

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
class ExecutionMeta(JsonRecord):
    """Everything a shard says about its execution attempt besides its window rows."""

    VERSION: ClassVar[int] = 4  # 4: contention as the timing thread's CPU wait share

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
    kernels: Kernels
    contention: Contention
    memory: Memory
    nvlink: NVLink
    saved_state: tuple[LayerState, ...]
    sanity: Sanity
    policy: Policy

    def __post_init__(self) -> None:
        if self.schema_version != self.VERSION:
            raise MetaError(
                f"unknown schema_version {self.schema_version!r}; this reader reads {self.VERSION}"
            )
        if self.attempt < 1:
            raise MetaError(f"attempt must be >= 1, got {self.attempt}")
        layers = len(self.shape.layer_loads)
        if len(self.saved_state) != layers:
            raise MetaError(f"saved_state has {len(self.saved_state)} layers, shape.layer_loads {layers}")

    @classmethod
    def from_json(cls, data: object) -> ExecutionMeta:
        """The metadata a shard stores, checked field by field; a :class:`MetaError` names the first
        field that is missing, of the wrong type or out of bounds."""
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != cls.VERSION:
            raise MetaError(f"unknown schema_version {version!r}; this reader reads {cls.VERSION}")
        try:
            return decode(cls, data)
        except RecordError as err:
            raise MetaError(f"metadata {err}") from None
