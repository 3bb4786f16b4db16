"""NVLink TX/RX byte rates of this rank's GPU through NVML's GPM metrics, sampled while the workload
repeats for at least a given time (a diagnostic pass, separate from timing).

The workload holds collectives, so every rank must repeat it the same number of times: the ranks
agree on that count once, before the loop (from the iteration time the timing windows measured,
the largest any rank needs), so the repetitions run back to back with no collective or host
synchronization of their own between them; and every rank runs them whatever NVML could or could not
read on its own GPU.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

from pipeline.data.meta import NVLink

MIB = 1024 * 1024


def repetitions(iteration_ms: float, min_seconds: float, device: torch.device) -> int:
    """How many repetitions of an iteration of ``iteration_ms`` last ``min_seconds`` on the slowest
    rank: one collective, before any repetition."""
    count = torch.tensor([math.ceil(min_seconds * 1e3 / max(iteration_ms, 1e-3))], device=device)
    if dist.is_initialized():
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
    return int(count.item())


def repeat(work: Callable[[], None], times: int, device: torch.device) -> float:
    """Run ``work`` ``times`` times back to back; the seconds until the device has finished them."""
    started = time.perf_counter()
    for _ in range(times):
        work()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started


def nvlink_rates(device: torch.device, work: Callable[[], None], times: int) -> NVLink:
    """This GPU's NVLink byte rates over ``times`` repetitions of ``work`` (:func:`repetitions`); null
    rates with the reason wherever the counters cannot be read (no GPU, no NVML, no GPM support)."""
    if device.type != "cuda":  # the same on every rank of an execution: no loop to keep in step
        return unread("no CUDA device: NVLink counters need a GPU")
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(_uuid(device))
        if not pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            raise RuntimeError("NVML GPM metrics are not supported on this GPU")
        samples = (pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc())
        pynvml.nvmlGpmSampleGet(handle, samples[0])
    except Exception as err:  # NVML raises its own error types for every unsupported case
        repeat(work, times, device)
        return unread(f"{type(err).__name__}: {err}")
    try:
        seconds = repeat(work, times, device)
        pynvml.nvmlGpmSampleGet(handle, samples[1])
        query = pynvml.c_nvmlGpmMetricsGet_t()
        query.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        query.numMetrics = 2
        query.sample1, query.sample2 = samples
        query.metrics[0].metricId = pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC
        query.metrics[1].metricId = pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC
        pynvml.nvmlGpmMetricsGet(query)
    except Exception as err:
        return unread(f"{type(err).__name__}: {err}")
    finally:
        for sample in samples:
            pynvml.nvmlGpmSampleFree(sample)
    # GPM reports NVLink throughput in MiB/s.
    return NVLink(query.metrics[0].value * MIB, query.metrics[1].value * MIB, seconds, None)


def unread(reason: str) -> NVLink:
    """No rates, and why."""
    return NVLink(None, None, None, reason)


def averaged(per_rank: list[NVLink]) -> NVLink:
    """Rates averaged over the GPUs that could be read; none, with the first reason, when none could."""
    read = [r for r in per_rank if r.reason is None]
    if not read:
        return per_rank[0]
    return NVLink(
        tx_bytes_per_s=float(np.mean([r.tx_bytes_per_s for r in read])),
        rx_bytes_per_s=float(np.mean([r.rx_bytes_per_s for r in read])),
        sample_seconds=min(r.sample_seconds for r in read if r.sample_seconds is not None),
        reason=None,
    )


def _uuid(device: torch.device) -> str:
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
