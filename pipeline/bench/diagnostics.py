"""Diagnostics of one rank, collected in a pass separate from timing: memory peaks and provenance
(NVLink rates: :mod:`pipeline.bench.nvlink`)."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
from importlib import metadata
from pathlib import Path

import torch

from pipeline.data.meta import GIT_SHA_ENV, Versions


def peak_rss_bytes() -> int:
    """Peak resident set of this process since :func:`reset_peaks` (Linux's VmHWM; where the kernel
    cannot reset it, since the process started: ru_maxrss, in KiB)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peaks(device: torch.device) -> None:
    """Start this rank's memory peaks afresh (an execution's own, whatever ran before it in its job):
    torch's allocated peak on a GPU, and the resident peak (writing 5 to /proc/self/clear_refs)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:  # not Linux, or not allowed: the process's own peak stands
        pass


def process_age_s() -> float:
    """Seconds since this process started (Linux: its start time in /proc against the uptime)."""
    stat = Path("/proc/self/stat").read_text()
    start_ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22, after pid and (comm)
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def peak_allocated_bytes(device: torch.device) -> int | None:
    """Peak CUDA memory allocated by torch on this rank (weights, scratch, activations); None on CPU."""
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def versions(device: torch.device) -> Versions:
    """Versions of the software stack that shape the timings; None where a component is absent."""
    cuda = device.type == "cuda"
    return Versions(
        python=platform.python_version(),
        torch=torch.__version__,
        cuda=torch.version.cuda if cuda else None,
        nccl=".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        driver=_driver() if cuda else None,
        cutlass_dsl=_package("nvidia-cutlass-dsl"),
    )


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
    """Commit of the code that ran: the one the environment names (:data:`GIT_SHA_ENV`, a copied tree's
    record), else ``repo``'s HEAD; None outside a git checkout."""
    if named := os.environ.get(GIT_SHA_ENV):
        return named
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
