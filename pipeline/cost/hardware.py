"""The hardware presets the model predicts for: the GPU presets of ``conf/cluster`` by name, with their
peak rates, and the map from a recorded device name to one (all read by :mod:`pipeline.base.gpu_presets`,
the presets' one reader, so that a preset is one YAML file)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from pipeline.base.gpu_presets import GpuPreset, gpu_preset, gpu_presets, preset_for_device

# Peak rates of one GPU: dense tensor-core TFLOP/s per precision, HBM TB/s, NVLink GB/s per direction.
Hardware = GpuPreset


def hardware_for_device(device_name: str) -> str | None:
    """Preset key for a recorded device name ("NVIDIA H200" -> "h200"); None for CPUs or unknown GPUs."""
    return preset_for_device(device_name)


def preset(key: str) -> Hardware:
    """Look a preset up by key; a clear error lists the allowed keys."""
    if key not in gpu_presets():
        raise ValueError(f"unknown hardware {key!r}; allowed: {', '.join(gpu_presets())}")
    return gpu_preset(key)


class _Presets(Mapping[str, Hardware]):
    """Every preset by key, read when asked (never a copy that could go stale)."""

    def __getitem__(self, key: str) -> Hardware:
        return gpu_presets()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(gpu_presets())

    def __len__(self) -> int:
        return len(gpu_presets())


HARDWARE: Mapping[str, Hardware] = _Presets()
