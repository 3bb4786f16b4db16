"""What the estimate needs of a GPU preset: its name, its GPU's memory and arch (read from
``conf/cluster/<name>.yaml`` by :mod:`pipeline.base.gpu_presets`), and the full scale
(``conf/scale/full.yaml``) it estimates at."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from pipeline import REPO_ROOT
from pipeline.base.gpu_presets import GpuPreset, gpu_preset, gpu_presets

CONF = REPO_ROOT / "conf"


@dataclass(frozen=True)
class Preset:
    """A GPU cluster preset as a job carries it to its worker: name, GPU memory (GB, 10^9 bytes, as
    datasheets give it) and arch."""

    name: str
    gpu_memory_gb: float
    arch: str

    @property
    def gpu_memory_bytes(self) -> float:
        return self.gpu_memory_gb * 1e9

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> Preset:
        """From a composed ``cluster`` node; a one-line error when it is not a GPU preset."""
        return cls.from_gpu(GpuPreset.of(node))

    @classmethod
    def named(cls, name: str) -> Preset:
        """A preset of ``conf/cluster`` by name; a one-line error lists the GPU presets."""
        if name not in gpu_presets():
            return cls.of({"name": name})
        return cls.from_gpu(gpu_preset(name))

    @classmethod
    def from_gpu(cls, gpu: GpuPreset) -> Preset:
        return cls(gpu.name, gpu.memory_gb, gpu.arch)


def full_scale() -> dict[str, Any]:
    """The ``scale`` node of ``scale=full``."""
    return dict(yaml.safe_load((CONF / "scale" / "full.yaml").read_text()))
