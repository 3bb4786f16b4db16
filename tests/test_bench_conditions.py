"""The GPU conditions sampler (``pipeline/bench/conditions.py``) against a stand-in for NVML that logs
every value it hands out: the record's means, throttle reasons and shares are recomputed from that
log; off a GPU, or where NVML fails, the record is unknown and says why; the record goes through the
shard metadata's JSON and back."""

from __future__ import annotations

import dataclasses
import itertools
import sys
import time
from typing import Any

import pytest
import torch

from pipeline.bench import conditions
from pipeline.data.meta import Conditions, ExecutionMeta, GpuConditions, MetaError
from pipeline.tools.synthetic_shards import shard_metadata

IDLE, POWER_CAP, HW_SLOWDOWN, APPLICATIONS = 0x1, 0x4, 0x8, 0x2


class FakeNvml:
    """NVML's calls that the sampler makes, each value drawn from a cycle and logged."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    nvmlClocksEventReasonGpuIdle = IDLE
    nvmlClocksEventReasonApplicationsClocksSetting = APPLICATIONS
    nvmlClocksEventReasonSwPowerCap = POWER_CAP
    nvmlClocksEventReasonHwSlowdown = HW_SLOWDOWN
    nvmlClocksEventReasonSyncBoost = 0x10
    nvmlClocksEventReasonSwThermalSlowdown = 0x20
    nvmlClocksEventReasonHwThermalSlowdown = 0x40
    nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80

    def __init__(
        self, sm: list[float], reasons: list[int], processes: list[int], fail_after: int = -1
    ) -> None:
        self.sm, self.reasons, self.processes = (
            itertools.cycle(sm),
            itertools.cycle(reasons),
            itertools.cycle(processes),
        )
        self.log: dict[str, list[Any]] = {"sm": [], "memory": [], "reasons": [], "processes": []}
        self.fail_after = fail_after
        self.uuid: str | None = None

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self.uuid = uuid
        return "handle"

    def nvmlDeviceGetIndex(self, handle: str) -> int:
        return 3

    def nvmlDeviceGetName(self, handle: str) -> bytes:
        return b"NVIDIA H200"

    def nvmlDeviceGetMaxClockInfo(self, handle: str, clock: int) -> int:
        return {1: 1980, 2: 3201}[clock]

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        if clock == self.NVML_CLOCK_SM:
            if len(self.log["sm"]) == self.fail_after:
                raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
            value = next(self.sm)
            self.log["sm"].append(value)
            return int(value)
        self.log["memory"].append(3201 - len(self.log["memory"]) % 2)
        return int(self.log["memory"][-1])

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        self.log["reasons"].append(next(self.reasons))
        return int(self.log["reasons"][-1])

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[object]:
        self.log["processes"].append(next(self.processes))
        return [object()] * self.log["processes"][-1]


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = FakeNvml([1980, 1410, 1755], [IDLE, POWER_CAP | IDLE, APPLICATIONS, HW_SLOWDOWN], [1, 1, 2])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(conditions, "_uuid", lambda device: f"GPU-fake-{device.index}")
    return fake


def _sample(nvml: FakeNvml, seconds: float = 0.05) -> Conditions:
    with conditions.sampled(torch.device("cuda", 2), "node7", 5, interval_s=0.002) as sampler:
        time.sleep(seconds)
    return sampler.record()


def test_the_record_is_what_nvml_said_during_the_block(nvml: FakeNvml) -> None:
    record = _sample(nvml)
    (gpu,) = record.gpus
    log = nvml.log
    n = len(log["sm"])
    assert n >= 3 and gpu.samples == n  # one at the start, one at the end, the thread's between
    assert record.unknown is None and nvml.uuid == "GPU-fake-2"
    assert (gpu.node, gpu.rank, gpu.index, gpu.name) == ("node7", 5, 3, "NVIDIA H200")
    assert gpu.sm_clock_mhz == pytest.approx(sum(log["sm"]) / n, rel=1e-12)
    assert gpu.memory_clock_mhz == pytest.approx(sum(log["memory"]) / n, rel=1e-12)
    assert (gpu.max_sm_clock_mhz, gpu.max_memory_clock_mhz) == (1980.0, 3201.0)
    # idle and application clocks are no slowdown; a power cap and a hardware slowdown are
    slowing = [r & (POWER_CAP | HW_SLOWDOWN) for r in log["reasons"]]
    assert gpu.throttled_share == pytest.approx(sum(1 for r in slowing if r) / n, rel=1e-12)
    seen = {
        name
        for name, bit in (("sw_power_cap", POWER_CAP), ("hw_slowdown", HW_SLOWDOWN))
        if any(r & bit for r in slowing)
    }
    assert set(gpu.throttle_reasons) == seen and seen
    assert gpu.processes == max(log["processes"]) == 2


def test_the_record_survives_the_shard_metadata_json(nvml: FakeNvml, rng) -> None:
    from pipeline.matrix import EXECUTIONS
    from pipeline.matrix.scale import shape_for
    from pipeline.tools.synthetic_shards import scale_preset

    record = conditions.merged(
        [_sample(nvml), conditions.Sampler("node8", 6, unknown="no GPU: cpu").record()]
    )
    assert [g.rank for g in record.gpus] == [5] and record.unknown == "no GPU: cpu"
    e = EXECUTIONS[0]
    preset = scale_preset("ci", None)
    meta = shard_metadata(e, 1, "1_1", shape_for(e.workload, preset), preset.timing, "cuda", rng)
    meta = dataclasses.replace(meta, conditions=record)
    back = ExecutionMeta.from_json(meta.to_json())
    assert back.conditions == record and back.schema_version == ExecutionMeta.VERSION
    data = meta.to_json()
    del data["conditions"]
    with pytest.raises(MetaError, match="metadata conditions is missing"):
        ExecutionMeta.from_json(data)


def test_off_a_gpu_or_without_nvml_the_record_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    with conditions.sampled(torch.device("cpu"), "node1", 0) as sampler:
        pass
    record = sampler.record()
    assert record.gpus == () and record.unknown == "no GPU: the execution ran on cpu"

    class Broken:
        def nvmlInit(self) -> None:
            raise RuntimeError("NVML_ERROR_LIBRARY_NOT_FOUND")

    monkeypatch.setitem(sys.modules, "pynvml", Broken())
    with conditions.sampled(torch.device("cuda", 0), "node1", 3) as sampler:
        pass
    record = sampler.record()
    assert record.gpus == ()
    assert record.unknown == "NVML cannot read rank 3's GPU (RuntimeError: NVML_ERROR_LIBRARY_NOT_FOUND)"


def test_a_gpu_lost_mid_block_keeps_what_was_sampled_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([1500], [0], [1], fail_after=2)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(conditions, "_uuid", lambda device: "GPU-x")
    record = _sample(fake)
    (gpu,) = record.gpus
    assert gpu.samples == 2 and gpu.sm_clock_mhz == 1500 and gpu.throttled_share == 0
    assert record.unknown == "rank 5: sampling stopped early (RuntimeError: NVML_ERROR_GPU_IS_LOST)"
    never = FakeNvml([1500], [0], [1], fail_after=0)
    monkeypatch.setitem(sys.modules, "pynvml", never)
    record = _sample(never)
    assert record.gpus == () and "no NVML sample during the windows" in str(record.unknown)


def test_bad_records_do_not_construct() -> None:
    with pytest.raises(ValueError, match="must say why"):
        Conditions((), None)
    good = dict(
        node="n",
        rank=0,
        index=0,
        name="g",
        samples=1,
        sm_clock_mhz=1.0,
        memory_clock_mhz=1.0,
        max_sm_clock_mhz=None,
        max_memory_clock_mhz=None,
        throttle_reasons=(),
        throttled_share=0.0,
        processes=None,
    )
    GpuConditions(**good)
    for bad, message in (({"samples": 0}, "samples must be >= 1"), ({"throttled_share": 1.5}, "<= 1")):
        with pytest.raises(ValueError, match=message):
            GpuConditions(**(good | bad))
