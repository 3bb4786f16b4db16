"""Synthetic shards in the exact shard format, with random window times.

They exercise the readers and the aggregation at any scale without a cluster (tests, the 10,000-shard
benchmark). Their numbers are random draws, not measurements: never publish them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from pipeline import REPO_ROOT
from pipeline.base.vocabulary import LAYER_PHASES, kind_phases
from pipeline.bench.work import layer_config
from pipeline.data.dataset import Dataset
from pipeline.data.meta import (
    Account,
    Contention,
    EmulationCopies,
    ExecutionMeta,
    Kernels,
    LayerState,
    Memory,
    NVLink,
    Provenance,
    RankAccount,
    Sanity,
    Timing,
    Versions,
)
from pipeline.data.schema import METADATA_KEY, SCHEMA
from pipeline.data.topology import Binding, Topology
from pipeline.matrix import Execution
from pipeline.matrix.scale import Scale, Shape, TimingPlan, scale_from_config, shape_for
from pipeline.moe.policy import SavedStatePolicy, make_policy

SCALE_PRESETS = REPO_ROOT / "conf" / "scale"


def scale_preset(name: str, max_ranks: int | None) -> Scale:
    """A ``conf/scale`` preset by name, with ``max_ranks`` set."""
    path = SCALE_PRESETS / f"{name}.yaml"
    if not path.is_file():
        allowed = ", ".join(sorted(p.stem for p in SCALE_PRESETS.glob("*.yaml")))
        raise ValueError(f"unknown scale {name!r}; allowed: {allowed}")
    return scale_from_config(yaml.safe_load(path.read_text()), max_ranks)


def shard_table(
    execution: Execution,
    attempt: int,
    rng: np.random.Generator,
    *,
    ranks: int | None = None,
    scale: str = "full",
    device: str = "cpu",
    job_id: str | None = None,
    windows: int | None = None,
    level: float | None = None,
    gemm: str | None = None,
    account: bool = False,
    per_node: int = 8,
) -> pa.Table:
    """One complete attempt of ``execution`` on ``ranks`` ranks (default: its EP degree) at a scale
    preset: the shape the execution stage would run, a row per rank x phase x window, random times
    (with ``account``, a random phase account of every rank too: the page then draws its bars).
    ``windows`` overrides the preset's count, as a scale's
    ``min_timed_ms`` calibration does; ``level`` fixes the forward phase's per-iteration ms (default:
    uniform on 0.5 to 20); ``gemm`` the grouped-GEMM backend recorded (default: ``cute-sm100`` on a
    GPU, ``torch`` on the CPU; ``cute-sm90`` is Hopper's, without block-scaled MMA); ``per_node`` the
    ranks its topology places on each node, in order."""
    w, v = execution.workload, execution.variant
    preset = scale_preset(scale, ranks)
    shape, plan = shape_for(w, preset), preset.timing
    if windows is not None:
        plan = replace(plan, windows=windows)
    ranks, windows, iterations = shape.ranks, plan.windows, plan.iterations
    job_id = job_id or f"{int(rng.integers(1, 10**6))}_{attempt}"
    phases = kind_phases(w.kind)
    n = len(phases) * ranks * windows
    phase, rank, window = (
        a.ravel()
        for a in np.meshgrid(np.arange(len(phases)), np.arange(ranks), np.arange(windows), indexing="ij")
    )
    # per-iteration ms by phase: backward about twice forward, combined about their sum
    relative = {"forward": 1.0, "backward": 2.0, "combined": 3.0 if w.kind != "inference" else 1.0}
    forward = rng.uniform(0.5, 20.0) if level is None else level
    base = forward * np.array([relative[p] for p in phases])[phase]
    window_ms = base * rng.lognormal(0.0, 0.1, size=n) * iterations
    columns: dict[str, Any] = {
        "execution_id": [execution.execution_id] * n,
        "workload_id": [execution.workload_id] * n,
        "kind": [w.kind] * n,
        "profile": [w.profile] * n,
        "precision": [v.precision] * n,
        "implementation": [v.implementation] * n,
        "pipeline": [v.pipeline] * n,
        "ep": np.full(n, w.ep, np.int32),
        "ranks": np.full(n, ranks, np.int32),
        "d_ff": np.full(n, w.d_ff, np.int32),
        "rank": rank.astype(np.int32),
        "window": window.astype(np.int32),
        "iterations": np.full(n, iterations, np.int32),
        "phase": np.asarray(phases)[phase],
        "window_ms": window_ms,
        "attempt": np.full(n, attempt, np.int32),
        "job_id": [job_id] * n,
        "device": [device] * n,
    }
    table = pa.table(columns, schema=SCHEMA)
    combined = forward * relative["combined"]
    meta = shard_metadata(
        execution, attempt, job_id, shape, plan, device, rng, scale=scale, gemm=gemm, per_node=per_node
    )
    if account:
        meta = replace(meta, account=synthetic_account(shape, combined, device != "cpu", rng))
    return table.replace_schema_metadata({METADATA_KEY: json.dumps(meta.to_json(), sort_keys=True).encode()})


def shard_metadata(
    execution: Execution,
    attempt: int,
    job_id: str,
    shape: Shape,
    plan: TimingPlan,
    device: str,
    rng: np.random.Generator,
    *,
    scale: str = "full",
    gemm: str | None = None,
    per_node: int = 8,
) -> ExecutionMeta:
    """The shard's metadata, with random diagnostics; its ranks ``per_node`` on each node."""
    w = execution.workload
    on_gpu = device != "cpu"
    policy = _policy(execution, shape)
    topology = synthetic_topology(shape.ranks, on_gpu, per_node)
    return ExecutionMeta(
        schema_version=ExecutionMeta.VERSION,
        execution_id=execution.execution_id,
        workload_id=execution.workload_id,
        attempt=attempt,
        job_id=job_id,
        config={"workload": w.name, "variant": execution.variant.name, "scale": {"name": scale}, "seed": 0},
        shape=shape,
        provenance=Provenance(
            git_sha="0" * 40,
            hosts=tuple(sorted(topology.hosts)),
            job_ids=(job_id,),
            backend="synthetic",
            cluster="synthetic",
            collective="nccl" if on_gpu else "gloo",
            versions=Versions("3.11.7", "2.13.0", None, None, None, None),
        ),
        started_at="2026-01-01T00:00:00Z",
        ended_at="2026-01-01T00:01:00Z",
        timing=Timing(
            clock="barrier + cuda events" if on_gpu else "barrier + perf_counter",
            cuda_graphs=on_gpu,
            cuda_graphs_reason=None if on_gpu else "no CUDA graphs on cpu",
            requested=plan,
            plan=plan,
        ),
        kernels=Kernels(
            gemm=gemm or ("cute-sm100" if on_gpu else "torch"),
            mxfp8=None if execution.variant.precision == "bf16" else "synthetic",
            swiglu_backward=None if w.kind == "inference" else "synthetic",
        ),
        contention=Contention(cores=2, ranks_per_host=shape.ranks, cpu_wait_share=0.01, oversubscribed=False),
        memory=Memory(
            peak_allocated_bytes=int(rng.integers(10, 60) * 2**30) if on_gpu else None,
            peak_rss_bytes=int(rng.integers(1, 8) * 2**30),
            emulation=EmulationCopies(0, 0),
        ),
        nvlink=NVLink(
            tx_bytes_per_s=float(rng.uniform(1e10, 4e11)) if on_gpu else None,
            rx_bytes_per_s=float(rng.uniform(1e10, 4e11)) if on_gpu else None,
            sample_seconds=1.0,
            reason=None if on_gpu else "no GPU",
        ),
        saved_state=saved_state(execution, shape),
        sanity=Sanity(
            True, 1e-7, 1e-5, {"y": 1e-7}, 32, 0.5, 20 * (shape.ranks - 1), 32 * shape.top_k * shape.ranks
        ),
        policy=policy.describe(shape.nominal_tokens, shape.top_k),
        topology=topology,
    )


def synthetic_topology(ranks: int, on_gpu: bool, per_node: int = 8) -> Topology:
    """``ranks`` ranks placed in order on nodes of ``per_node`` (``node0``, ``node1``, ...), each on a GPU
    of its own (or a CPU)."""
    bindings = [
        Binding(
            r, f"node{r // per_node}", r % per_node, f"cuda:{r % per_node}" if on_gpu else "cpu",
            uuid=f"GPU-{r:08d}-0000-0000-0000-000000000000" if on_gpu else None,
        )
        for r in range(ranks)
    ]  # fmt: skip
    return Topology.of(bindings, [{"NCCL_DEBUG": "WARN"} if on_gpu else {}] * ranks)


def synthetic_account(shape: Shape, iteration_ms: float, on_gpu: bool, rng: np.random.Generator) -> Account:
    """Every rank's random phase account of an iteration about ``iteration_ms`` long: the phases a
    Dirichlet draw of it, the unclaimed time a few percent; no communication on one rank."""
    ranks = []
    for rank in range(shape.ranks):
        profiled = iteration_ms * float(rng.lognormal(0.0, 0.05))
        share = rng.dirichlet(np.ones(len(LAYER_PHASES) + 1))
        phases = dict(zip(LAYER_PHASES, (profiled * share[:-1]).tolist(), strict=True))
        if shape.ranks == 1:
            phases |= {"dispatch": 0.0, "combine": 0.0}
        unclaimed = profiled - sum(phases.values())
        rows = tuple(shape.tracked_rows) if rank == 0 else tuple(t * shape.top_k for t in shape.layer_tokens)
        kernels = int(rng.integers(100, 400)) if on_gpu else None
        spans = (profiled * 0.95, profiled, profiled * 1.1)
        ranks.append(RankAccount(rank, 3, spans, 1, 1, profiled, phases, unclaimed, rows, kernels, kernels))
    return Account(tuple(ranks), None, False)


def saved_state(execution: Execution, shape: Shape) -> tuple[LayerState, ...]:
    """Per timed layer, the evidence the layers' own policy (:mod:`pipeline.moe.policy`) gives for the
    tracked GPU's rows, all forwards held before any backward, as a packing stack runs them."""
    policy = _policy(execution, shape)
    return tuple(
        LayerState(
            **asdict(policy.reserve(layer, routed, shape.nominal_tokens, shape.top_k, hold=True).state),
            layer=layer,
            load_factor=load,
        )
        for layer, (load, routed) in enumerate(zip(shape.layer_loads, shape.tracked_rows, strict=True))
    )


def _policy(execution: Execution, shape: Shape) -> SavedStatePolicy:
    """The execution's policy as its layers build it (no device: it only counts)."""
    return make_policy(layer_config(execution, shape), layers=len(shape.layer_loads))


def write_table(dataset: Path, table: pa.Table) -> Path:
    """Write a shard table where the schema puts it (``shard_path``) and return that path."""
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    path = Dataset(dataset).shard_path(meta["execution_id"], meta["attempt"])
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path
