"""One execution, run by every task of its job: time the layers, collect diagnostics, and let rank 0
write the shard. A failure anywhere raises (the job exits non-zero) after rank 0 records it."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch.distributed as dist

from pipeline import REPO_ROOT
from pipeline.bench import distributed, graphs, sanity
from pipeline.bench.diagnostics import device_name, git_sha, peak_allocated_bytes, peak_rss_bytes, versions
from pipeline.bench.nvlink import nvlink_rates
from pipeline.bench.timing import Clock, calibrated, time_windows
from pipeline.bench.work import build_work
from pipeline.data import ledger
from pipeline.data.dataset import Dataset
from pipeline.data.writer import write_shard
from pipeline.matrix import Execution, execution_of
from pipeline.matrix.scale import Shape, shape_of
from pipeline.metrics import phase_ms

GROUP_TIMEOUT_S = 900.0
NVLINK_SAMPLE_S = 1.0


def run_execution(config: dict[str, Any], attempt: int, launcher: str, cluster: str) -> dict[str, Any] | None:
    """Body of each task, run by the ``launcher`` backend on the ``cluster`` preset. Returns rank 0's
    summary (shard path, iteration ms per phase), else None."""
    execution, shape = execution_of(config), shape_of(config)
    dataset = Dataset(config["dataset_dir"])
    ctx = distributed.init(config["device"], GROUP_TIMEOUT_S)
    execution_id = execution.execution_id
    try:
        if ctx.world_size != shape.ranks:
            raise ValueError(f"the job has {ctx.world_size} tasks but {execution_id} needs {shape.ranks}")
        if ctx.rank == 0:
            ledger.append(dataset, ledger.Started(execution_id, attempt, ctx.job_id))
        started_at = ledger.now()
        work = build_work(execution, shape, ctx.rank, ctx.device, config["seed"])
        backward = work.backward if work.grads is not None else None
        verdict = sanity.gate(work.stack, backward is not None, config["seed"])
        clock = Clock(ctx.device)
        steps = graphs.capture(work.forward, backward, ctx.device, shape.warmup)
        shape = calibrated(shape, steps.forward, steps.backward, clock)
        times = time_windows(
            steps.forward, steps.backward, clock, shape.warmup, shape.windows, shape.iterations
        )
        ended_at = ledger.now()
        mine = {
            "rank": ctx.rank,
            "host": ctx.hostname,
            "job_id": ctx.job_id,
            "device": device_name(ctx.device),
            "times": times,
            "saved_state": work.saved_state(),
            "nvlink": nvlink_rates(ctx.device, steps.iteration, NVLINK_SAMPLE_S),
            "peak_allocated_bytes": peak_allocated_bytes(ctx.device),
            "peak_rss_bytes": peak_rss_bytes(),
        }
        ranks: list[dict[str, Any]] = [{} for _ in range(ctx.world_size)]
        dist.all_gather_object(ranks, mine)
        summary = None
        if ctx.rank == 0:
            rows = shard_rows(execution, shape, attempt, ranks)
            meta = {
                "workload_id": execution.workload_id,
                "job_id": ctx.job_id,
                "config": config,
                "shape": shape.metadata(),
                "provenance": {
                    "git_sha": git_sha(REPO_ROOT),
                    "hosts": sorted({r["host"] for r in ranks}),
                    "job_ids": sorted({r["job_id"] for r in ranks}),
                    "launcher": launcher,
                    "cluster": cluster,
                    "versions": versions(ctx.device),
                },
                "started_at": started_at,
                "ended_at": ended_at,
                "timing": {
                    "clock": clock.name,
                    "cuda_graphs": steps.graphs,
                    "cuda_graphs_reason": steps.reason,
                },
                "memory": {
                    "peak_allocated_bytes": _max(r["peak_allocated_bytes"] for r in ranks),
                    "peak_rss_bytes": _max(r["peak_rss_bytes"] for r in ranks),
                },
                "nvlink": nvlink_summary([r["nvlink"] for r in ranks]),
                "saved_state": saved_state_evidence(shape, ranks[0]["saved_state"]),
                "sanity": verdict,
                "policy": work.policy(),
            }
            path = write_shard(dataset, execution_id, attempt, rows, meta)
            ledger.append(
                dataset, ledger.Finished(execution_id, attempt, ctx.job_id, shard=dataset.relative(path))
            )
            summary = {"shard": str(path), "iteration_ms": iteration_ms(rows)}
        dist.barrier()
        return summary
    except BaseException as err:
        if ctx.rank == 0:
            reason = f"{type(err).__name__}: {err}"
            ledger.append(dataset, ledger.Failed(execution_id, attempt, ctx.job_id, reason=reason))
        raise
    finally:
        distributed.close()


def shard_rows(
    execution: Execution, shape: Shape, attempt: int, ranks: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One row per rank x phase x window, as the shard schema defines them."""
    w, v = execution.workload, execution.variant
    identity = {
        "execution_id": execution.execution_id,
        "workload_id": execution.workload_id,
        "kind": w.kind,
        "profile": w.profile,
        "precision": v.precision,
        "implementation": v.implementation,
        "pipeline": v.pipeline,
        "ep": w.ep,
        "ranks": shape.ranks,
        "d_ff": w.d_ff,
        "iterations": shape.iterations,
        "attempt": attempt,
    }
    return [
        {
            **identity,
            "rank": r["rank"],
            "window": i,
            "phase": phase,
            "window_ms": ms,
            "job_id": r["job_id"],
            "device": r["device"],
        }
        for r in ranks
        for phase, windows in r["times"].items()
        for i, ms in enumerate(windows)
    ]


def iteration_ms(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Slowest-rank median iteration time per phase (the published reduction)."""
    cols = {k: np.array([r[k] for r in rows]) for k in ("phase", "rank", "window_ms", "iterations")}
    return phase_ms(cols["phase"], cols["rank"], cols["window_ms"], cols["iterations"])


def saved_state_evidence(shape: Shape, states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rank 0's (the tracked GPU's) state per timed layer; factors in units of the nominal T x K rows."""
    return [
        {**s, "layer": i, "load_factor": load}
        for i, (s, load) in enumerate(zip(states, shape.layer_loads, strict=True))
    ]


def nvlink_summary(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """Rates averaged over the GPUs that could be read; null with the first reason when none could."""
    read = [r for r in per_rank if r["reason"] is None]
    if not read:
        return {
            "tx_bytes_per_s": None,
            "rx_bytes_per_s": None,
            "sample_seconds": None,
            "reason": per_rank[0]["reason"],
        }
    return {
        "tx_bytes_per_s": float(np.mean([r["tx_bytes_per_s"] for r in read])),
        "rx_bytes_per_s": float(np.mean([r["rx_bytes_per_s"] for r in read])),
        "sample_seconds": min(r["sample_seconds"] for r in read),
        "reason": None,
    }


def _max(values: Any) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None
