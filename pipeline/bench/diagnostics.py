"""Diagnostics of one rank, collected in a pass separate from timing: memory peaks, NVLink byte
rates (NVML GPM, sampled while the workload runs for at least a second) and provenance."""

from __future__ import annotations

import platform
import resource
import subprocess
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

MIB = 1024 * 1024


def peak_rss_bytes() -> int:
    """Peak resident set of this process (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_allocated_bytes(device: torch.device) -> int | None:
    """Peak CUDA memory allocated by torch on this rank (weights, scratch, activations); None on CPU."""
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def nvlink_rates(device: torch.device, work: Callable[[], None], min_seconds: float) -> dict[str, Any]:
    """NVLink TX/RX bytes per second of this GPU while ``work`` repeats for >= ``min_seconds``.

    Null rates with the reason wherever the counters cannot be read (no GPU, no NVML, no GPM)."""
    out: dict[str, Any] = {"tx_bytes_per_s": None, "rx_bytes_per_s": None, "sample_seconds": None}
    if device.type != "cuda":
        return {**out, "reason": "no CUDA device: NVLink counters need a GPU"}
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(_uuid(device))
        if not pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            return {**out, "reason": "NVML GPM metrics are not supported on this GPU"}
        first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
        try:
            pynvml.nvmlGpmSampleGet(handle, first)
            started = time.perf_counter()
            while time.perf_counter() - started < min_seconds:
                work()
                torch.cuda.synchronize(device)
            pynvml.nvmlGpmSampleGet(handle, second)
            seconds = time.perf_counter() - started
            query = pynvml.c_nvmlGpmMetricsGet_t()
            query.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            query.numMetrics = 2
            query.sample1, query.sample2 = first, second
            query.metrics[0].metricId = pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC
            query.metrics[1].metricId = pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC
            pynvml.nvmlGpmMetricsGet(query)
        finally:
            pynvml.nvmlGpmSampleFree(first)
            pynvml.nvmlGpmSampleFree(second)
    except Exception as err:  # NVML raises its own error types for every unsupported case
        return {**out, "reason": f"NVML: {type(err).__name__}: {err}"}
    # GPM reports NVLink throughput in MiB/s.
    return {
        "tx_bytes_per_s": query.metrics[0].value * MIB,
        "rx_bytes_per_s": query.metrics[1].value * MIB,
        "sample_seconds": seconds,
        "reason": None,
    }


def _uuid(device: torch.device) -> str:
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def versions(device: torch.device) -> dict[str, str | None]:
    """Versions of the software stack that shape the timings; None where a component is absent."""
    cuda = device.type == "cuda"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        "driver": _driver() if cuda else None,
        "cutlass_dsl": _package("nvidia-cutlass-dsl"),
    }


def _driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlSystemGetDriverVersion()
    except Exception:  # no NVML library or no driver: the version is unknown
        return None


def _package(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_sha(repo: Path) -> str | None:
    """Commit of the code that ran; None outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
