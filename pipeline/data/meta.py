"""The shard's ``execution`` metadata as types: :class:`ExecutionMeta` and the records it nests.

The job builds an :class:`ExecutionMeta` and writes ``to_json()``; a reader gets it back with
``ExecutionMeta.from_json``, which checks every field against its annotation and then the records'
own rules (:mod:`pipeline.data.codec`), so a shard's metadata is valid exactly when it constructs.
The report reads it by attribute. ``docs/dataset.md`` lists every field; the JSON keys are the field
names, with one exception kept from schema 2: the scale's timing request and the timing that ran
(:class:`~pipeline.matrix.scale.TimingPlan`) are written inside the ``shape`` object.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from pipeline.bounds import at_least
from pipeline.data.codec import RecordError, decode, encode
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
    """Where and with what the execution ran: ``launcher`` is the backend (local or slurm) and
    ``cluster`` the cluster preset (``local`` with the local backend)."""

    git_sha: str | None
    hosts: tuple[str, ...]
    job_ids: tuple[str, ...]
    launcher: str
    cluster: str
    versions: Versions


@dataclass(frozen=True)
class Timing:
    """How the windows were timed: the clock, and CUDA graphs or why not."""

    clock: str
    cuda_graphs: bool
    cuda_graphs_reason: str | None


@dataclass(frozen=True)
class Memory:
    """Peaks, the largest over ranks: CUDA memory allocated by torch (None on CPUs) and resident set."""

    peak_allocated_bytes: int | None
    peak_rss_bytes: int | None

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
class ExecutionMeta:
    """Everything a shard says about its execution attempt besides its window rows."""

    VERSION: ClassVar[int] = 2

    schema_version: int
    execution_id: str
    workload_id: str
    attempt: int
    job_id: str
    config: dict[str, Any]  # the resolved Hydra config of the execution, as composed (free-form)
    shape: Shape
    plan: TimingPlan  # the timing that ran (written inside ``shape``)
    provenance: Provenance
    started_at: str
    ended_at: str
    timing: Timing
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

    def to_json(self) -> dict[str, object]:
        """The JSON object the shard stores (tuples as lists; the timing plan inside ``shape``)."""
        out = encode(self)
        out["shape"] |= out.pop("plan")
        return dict(out)

    @classmethod
    def from_json(cls, data: object) -> ExecutionMeta:
        """The metadata a shard stores, checked field by field; a :class:`MetaError` names the first
        field that is missing, of the wrong type or out of bounds."""
        if not isinstance(data, dict):
            raise MetaError("metadata is not a JSON object")
        version = data.get("schema_version")
        if version != cls.VERSION:
            raise MetaError(f"unknown schema_version {version!r}; this reader reads {cls.VERSION}")
        shape = data.get("shape")
        if not isinstance(shape, dict):
            raise MetaError("metadata has no 'shape' object")
        plan_keys = {f.name for f in fields(TimingPlan)}
        split = {
            **data,
            "shape": {k: v for k, v in shape.items() if k not in plan_keys},
            "plan": {k: v for k, v in shape.items() if k in plan_keys},
        }
        try:
            return decode(cls, split)
        except RecordError as err:
            raise MetaError(f"metadata {err}") from None
