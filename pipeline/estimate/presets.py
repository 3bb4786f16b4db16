"""What the estimate needs of a cluster preset (``conf/cluster/<name>.yaml``): its GPU's memory and
arch, and the full scale (``conf/scale/full.yaml``) it estimates at."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from pipeline import REPO_ROOT

CONF = REPO_ROOT / "conf"
ARCHES = ("sm_90a", "sm_100a")
# Datasets without a GPU preset (the local launcher, local-slurm's CPU nodes) publish the estimate
# of the report's hardware.
DEFAULT_PRESET = "gb300"


@dataclass(frozen=True)
class Preset:
    """A GPU cluster preset: name, GPU memory (GB, 10^9 bytes, as datasheets give it) and arch."""

    name: str
    gpu_memory_gb: float
    arch: str

    @property
    def gpu_memory_bytes(self) -> float:
        return self.gpu_memory_gb * 1e9

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> Preset:
        """From a composed ``cluster`` node; a one-line error when it is not a GPU preset."""
        name = node.get("name")
        memory, arch = node.get("gpu_memory_gb"), node.get("arch")
        if not node.get("gpus") or memory is None or arch is None:
            allowed = ", ".join(p.stem for p in sorted((CONF / "cluster").glob("*.yaml")) if _is_gpu(p.stem))
            raise ValueError(
                f"cluster={name} is not a GPU preset with gpu_memory_gb and arch; allowed: {allowed}"
            )
        if isinstance(memory, bool) or not isinstance(memory, int | float) or not memory > 0:
            raise ValueError(f"cluster={name}: gpu_memory_gb={memory!r}; allowed: a positive number of GB")
        if arch not in ARCHES:
            raise ValueError(f"cluster={name}: arch={arch!r}; allowed: {', '.join(ARCHES)}")
        return cls(str(name), float(memory), str(arch))

    @classmethod
    def named(cls, name: str) -> Preset:
        path = CONF / "cluster" / f"{name}.yaml"
        if not path.is_file():
            return cls.of({"name": name})
        return cls.of(yaml.safe_load(path.read_text()))


def _is_gpu(name: str) -> bool:
    node = yaml.safe_load((CONF / "cluster" / f"{name}.yaml").read_text())
    return bool(node.get("gpus")) and node.get("gpu_memory_gb") is not None and node.get("arch") is not None


def full_scale() -> dict[str, Any]:
    """The ``scale`` node of ``scale=full``."""
    return dict(yaml.safe_load((CONF / "scale" / "full.yaml").read_text()))
