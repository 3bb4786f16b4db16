"""What a rank's GPU ran at while its windows were timed: clocks, throttle reasons, other processes.

Two runs of the same code on GPUs differ by more than their windows show when a GPU runs at other
clocks (a power cap, heat, a slower node's boost table), is throttled, or is shared with another
job: every window of the run moves together. NVML says so. A thread samples this rank's GPU every
``INTERVAL_S`` while the windows run (a few reads of the driver's counters: microseconds of host
time each, no CUDA call, nothing on the GPU): SM and memory clocks, the clock-event reasons active
(NVML's "throttle reasons": what held the clocks below their maximum), and how many compute
processes held the GPU. The record goes into the shard's metadata
(:class:`pipeline.data.meta.Conditions`), where ``pipeline.compare`` and ``pipeline.history`` read it.

Off a GPU, or where NVML cannot read the GPU, the record is unknown and says why.

In ``pipeline/bench/execute.py``: every rank samples around its timed windows and sends its record
to rank 0 with the rest of what it measured; rank 0 merges them into the metadata::

    with phases("windows"), contention.sampled() as host:
        with conditions.sampled(ctx.device, ctx.hostname, ctx.rank) as gpu:
            times = time_windows(steps, clock, plan)
    mine = RankResult(..., conditions=gpu.record())        # a field ``conditions: Conditions``
    meta = ExecutionMeta(..., conditions=conditions.merged([r.conditions for r in ranks]))
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from pipeline.data.meta import Conditions, GpuConditions, unknown_conditions

INTERVAL_S = 0.05  # between samples; a window lasts 30 iterations of milliseconds or more
MIN_SAMPLES = 1  # a sampler that never got one reads as unknown

# NVML's clock-event reasons that hold the clocks down (not the idle state, nor clocks set on purpose:
# those say how the GPU was configured, which the clocks themselves show).
SLOWING = {
    "nvmlClocksEventReasonSwPowerCap": "sw_power_cap",
    "nvmlClocksEventReasonHwSlowdown": "hw_slowdown",
    "nvmlClocksEventReasonSyncBoost": "sync_boost",
    "nvmlClocksEventReasonSwThermalSlowdown": "sw_thermal_slowdown",
    "nvmlClocksEventReasonHwThermalSlowdown": "hw_thermal_slowdown",
    "nvmlClocksEventReasonHwPowerBrakeSlowdown": "hw_power_brake_slowdown",
}


@dataclass
class _Samples:
    """What the sampling thread read, one entry per sample."""

    sm: list[float] = field(default_factory=list)
    memory: list[float] = field(default_factory=list)
    reasons: list[int] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)
    error: str | None = None


@dataclass
class Sampler:
    """This rank's GPU conditions over the block; ``record()`` once the block has ended."""

    node: str
    rank: int
    unknown: str | None = None  # why nothing is sampled (set before the block)
    index: int = 0
    name: str = ""
    max_clocks: tuple[float | None, float | None] = (None, None)
    bits: dict[str, int] = field(default_factory=dict)  # reason name -> NVML bit
    samples: _Samples = field(default_factory=_Samples)

    def record(self) -> Conditions:
        """The conditions of this rank's GPU, or unknown with the reason."""
        s = self.samples
        if self.unknown is not None:
            return unknown_conditions(self.unknown)
        if len(s.sm) < MIN_SAMPLES:
            return unknown_conditions(f"rank {self.rank}: no NVML sample during the windows ({s.error})")
        slowing = [r & sum(self.bits.values()) for r in s.reasons]
        return Conditions(
            (
                GpuConditions(
                    node=self.node,
                    rank=self.rank,
                    index=self.index,
                    name=self.name,
                    samples=len(s.sm),
                    sm_clock_mhz=sum(s.sm) / len(s.sm),
                    memory_clock_mhz=sum(s.memory) / len(s.memory),
                    max_sm_clock_mhz=self.max_clocks[0],
                    max_memory_clock_mhz=self.max_clocks[1],
                    throttle_reasons=tuple(
                        name for name, bit in self.bits.items() if any(r & bit for r in slowing)
                    ),
                    throttled_share=sum(1 for r in slowing if r) / len(slowing),
                    # NVML lists no process where it cannot see PIDs (a container): then unknown
                    processes=max(s.processes) if s.processes and max(s.processes) > 0 else None,
                ),
            ),
            None if s.error is None else f"rank {self.rank}: sampling stopped early ({s.error})",
        )


@contextmanager
def sampled(device: torch.device, node: str, rank: int, interval_s: float = INTERVAL_S) -> Iterator[Sampler]:
    """Sample this rank's GPU every ``interval_s`` while the block runs (once at its start and once at
    its end at least). Off a GPU, or where NVML fails, the sampler's record is unknown and why; the
    block runs the same either way."""
    sampler = Sampler(node, rank)
    handle = _open(sampler, device)
    if handle is None:
        yield sampler
        return
    module, gpu = handle
    stop = threading.Event()
    read = _reader(module, gpu, sampler)
    read()
    thread = threading.Thread(target=_loop, args=(read, stop, interval_s), daemon=True, name="gpu-conditions")
    thread.start()
    try:
        yield sampler
    finally:
        stop.set()
        thread.join()
        read()


def merged(per_rank: Sequence[Conditions]) -> Conditions:
    """One execution's record from its ranks': every sampled GPU, and the reasons of those that were not."""
    gpus = tuple(sorted((g for c in per_rank for g in c.gpus), key=lambda g: g.rank))
    reasons = sorted({c.unknown for c in per_rank if c.unknown is not None})
    return Conditions(gpus, "; ".join(reasons) if reasons else None)


def _loop(read: Callable[[], None], stop: threading.Event, interval_s: float) -> None:
    while not stop.wait(interval_s):
        read()


def _open(sampler: Sampler, device: torch.device) -> tuple[Any, Any] | None:
    """NVML and this rank's GPU handle, or None with ``sampler.unknown`` set."""
    if device.type != "cuda":
        sampler.unknown = f"no GPU: the execution ran on {device.type}"
        return None
    try:
        import pynvml as module  # only a GPU rank needs NVML

        module.nvmlInit()
        gpu = module.nvmlDeviceGetHandleByUUID(_uuid(device))
        sampler.index = int(module.nvmlDeviceGetIndex(gpu))
        name = module.nvmlDeviceGetName(gpu)
        sampler.name = name.decode() if isinstance(name, bytes) else str(name)
        sampler.max_clocks = (
            _optional(lambda: float(module.nvmlDeviceGetMaxClockInfo(gpu, module.NVML_CLOCK_SM))),
            _optional(lambda: float(module.nvmlDeviceGetMaxClockInfo(gpu, module.NVML_CLOCK_MEM))),
        )
        sampler.bits = {
            name: int(getattr(module, key)) for key, name in SLOWING.items() if hasattr(module, key)
        }
    except Exception as err:  # NVML raises its own error types for every unsupported case
        sampler.unknown = f"NVML cannot read rank {sampler.rank}'s GPU ({type(err).__name__}: {err})"
        return None
    return module, gpu


def _reader(module: Any, gpu: Any, sampler: Sampler) -> Callable[[], None]:
    """One sample into ``sampler.samples``; the first failure is kept and ends the sampling's use."""
    s = sampler.samples

    def read() -> None:
        if s.error is not None:
            return
        try:
            sm = float(module.nvmlDeviceGetClockInfo(gpu, module.NVML_CLOCK_SM))
            memory = float(module.nvmlDeviceGetClockInfo(gpu, module.NVML_CLOCK_MEM))
            reasons = int(module.nvmlDeviceGetCurrentClocksEventReasons(gpu))
            processes = _optional(lambda: len(module.nvmlDeviceGetComputeRunningProcesses(gpu)))
        except Exception as err:
            s.error = f"{type(err).__name__}: {err}"
            return
        s.sm.append(sm)
        s.memory.append(memory)
        s.reasons.append(reasons)
        if processes is not None:
            s.processes.append(processes)

    return read


def _optional(read: Callable[[], Any]) -> Any:
    """A value NVML may not offer on every GPU or driver: None where it raises."""
    try:
        return read()
    except Exception:
        return None


def _uuid(device: torch.device) -> str:
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
