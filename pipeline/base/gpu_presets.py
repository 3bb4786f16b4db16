"""The GPU of each cluster preset, read from its one source: ``conf/cluster/<name>.yaml``.

A preset with GPUs says there what its GPU is: its memory (``gpu_memory_gb``) and the arch its kernels
are compiled for (``arch``), the words of a recorded device name that mean it (``gpus.device_words``;
``gpus.other_variants`` are words of parts with other clocks or links, never matched), and its dense
peak rates, each with the source of the figure (``gpus.peaks``), and how its GPUs connect
(``gpus.links``: GPUs per node, GPUs per NVLink domain, and the inter-node link of each GPU to the other
domains, each with its source). The estimate, the model's predictions, the published %SOL columns and
``pipeline.list`` all read them through this module, so adding a preset is adding one YAML file;
:meth:`GpuPreset.span` says on how many nodes and NVLink domains an EP group's ranks sit. It sits in the
lowest stage, so that every reader may import it; it imports no torch and no Hydra.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from cutlass_kernels.vocabulary import ARCHES
from pipeline import CONFIG_DIR

CLUSTERS = CONFIG_DIR / "cluster"
# The report's hardware: the preset a dataset that ran on none is estimated on, and the estimate's default.
DEFAULT_PRESET = "gb300"
# The peaks of one GPU (dense: no 2:4 sparsity) and their units.
PEAKS = {
    "bf16_tflops": "TFLOP/s",
    "fp8_tflops": "TFLOP/s",
    "hbm_tb_s": "TB/s",
    "nvlink_gb_s": "GB/s per direction",
}
# How the GPUs connect: whole numbers of GPUs, and each GPU's bandwidth to other NVLink domains.
LINKS = {
    "gpus_per_node": "whole number of GPUs",
    "nvlink_domain": "whole number of GPUs",
    "inter_node_gb_s": "GB/s per direction",
}
GPU_KEYS = ("model", "device_words", "other_variants", "peaks", "links")


@dataclass(frozen=True)
class Peak:
    """One peak figure and where it comes from (a datasheet, and how the figure was derived from it)."""

    value: float
    source: str


@dataclass(frozen=True)
class Span:
    """Where the ``ranks`` ranks of one execution sit: ``ranks_per_node`` on each of ``nodes`` nodes, in
    order (as Slurm places a job's tasks), over ``domains`` NVLink domains (of ``domain_gpus`` GPUs) of
    ``domain_ranks`` of them each; rows between domains take the inter-node link, ``inter_node_gb_s``
    per GPU and direction."""

    ranks: int
    nodes: int
    ranks_per_node: int
    domains: int
    domain_ranks: int
    domain_gpus: int
    inter_node_gb_s: float

    def describe(self) -> str:
        """``4 nodes x 8 GPUs, 4 NVLink domains of 8 GPUs, 50 GB/s per GPU between them`` or
        ``16 nodes x 4 GPUs, one NVLink domain of 72 GPUs``."""
        nodes = f"{self.nodes} node{'s' if self.nodes > 1 else ''} x {self.ranks_per_node} GPUs"
        if self.domains == 1:
            return f"{nodes}, one NVLink domain of {self.domain_gpus} GPUs"
        return (
            f"{nodes}, {self.domains} NVLink domains of {self.domain_gpus} GPUs, "
            f"{self.inter_node_gb_s:g} GB/s per GPU between them"
        )


@dataclass(frozen=True)
class GpuPreset:
    """The GPU of one cluster preset: what the estimate fits in and compiles for, which recorded device
    names are this GPU, its peaks (``PEAKS``: the model predicts from them, %SOL divides by them) and its
    links (``LINKS``: where an EP group's rows travel, :meth:`span`)."""

    name: str
    model: str
    memory_gb: float
    arch: str
    device_words: tuple[str, ...]
    other_variants: tuple[str, ...]
    peaks: Mapping[str, Peak]
    links: Mapping[str, Peak]  # LINKS: how the GPUs connect
    ranks_per_node: int = 1  # ranks on one node, one per GPU: how an EP group spreads over nodes

    def peak(self, name: str) -> float:
        """The value of the peak ``name`` (a key of :data:`PEAKS`)."""
        return self.peaks[name].value

    def link(self, name: str) -> float:
        """The value of the link figure ``name`` (a key of :data:`LINKS`)."""
        return self.links[name].value

    def span(self, ranks: int, ranks_per_node: int | None = None) -> Span:
        """Where ``ranks`` ranks sit at ``ranks_per_node`` a node (default: the preset's), placed in
        order: on how many nodes, and how many NVLink domains (part of a node, a node, or several nodes)."""
        per_node = min(ranks, ranks_per_node or self.ranks_per_node)
        nodes = math.ceil(ranks / per_node)
        domain, node_gpus = int(self.link("nvlink_domain")), int(self.link("gpus_per_node"))
        if domain >= node_gpus:  # whole nodes in one domain
            nodes_per_domain = domain // node_gpus
            domains, domain_ranks = (
                math.ceil(nodes / nodes_per_domain),
                min(ranks, per_node * nodes_per_domain),
            )
        else:  # whole domains in one node
            domain_ranks = min(per_node, domain)
            domains = nodes * math.ceil(per_node / domain_ranks)
        return Span(ranks, nodes, per_node, domains, domain_ranks, domain, self.link("inter_node_gb_s"))

    def tensor_tflops(self, precision: str) -> float:
        """The dense tensor-core peak for operands in ``precision`` (MXFP8 at the FP8 rate)."""
        return self.peak("fp8_tflops" if precision == "mxfp8" else "bf16_tflops")

    def means(self, device_name: str) -> bool:
        """Whether a recorded device name ("NVIDIA H200") is this GPU: it has one of its words and none
        of another variant's ("NVIDIA H200 NVL" is not an H200 SXM)."""
        words = set(device_name.upper().replace("-", " ").split())
        return bool(words & set(self.device_words)) and not words & set(self.other_variants)

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> GpuPreset:
        """From a cluster preset's node (its YAML, or the composed ``cluster`` config with overrides); a
        one-line ValueError names the bad value and what is allowed."""
        name = node.get("name")
        gpu = node.get("gpus")
        if not gpu:
            raise ValueError(f"cluster={name} is not a GPU preset (gpus={gpu!r}); allowed: {_allowed()}")
        if not isinstance(gpu, Mapping):
            raise ValueError(
                f"cluster={name}: gpus={gpu!r}; allowed: false (no GPU) or the GPU's mapping of "
                f"{', '.join(GPU_KEYS)}"
            )
        unknown = sorted(set(gpu) - set(GPU_KEYS))
        if unknown:
            listed = ", ".join(f"gpus.{k}" for k in unknown)
            raise ValueError(f"cluster={name}: unknown key(s) {listed}; allowed: {', '.join(GPU_KEYS)}")
        memory, arch = node.get("gpu_memory_gb"), node.get("arch")
        if not _positive(memory):
            raise ValueError(f"cluster={name}: gpu_memory_gb={memory!r}; allowed: a positive number of GB")
        if arch not in ARCHES:
            raise ValueError(f"cluster={name}: arch={arch!r}; allowed: {', '.join(ARCHES)}")
        model = gpu.get("model")
        if not isinstance(model, str) or not model.strip():
            raise ValueError(
                f"cluster={name}: gpus.model={model!r}; allowed: the GPU's name, a non-empty text"
            )
        words = _words(name, "device_words", gpu.get("device_words"), empty=False)
        others = _words(name, "other_variants", gpu.get("other_variants", []), empty=True)
        per_node = node.get("ranks_per_node", 1)
        if not isinstance(per_node, int) or isinstance(per_node, bool) or per_node < 1:
            raise ValueError(f"cluster={name}: ranks_per_node={per_node!r}; allowed: a whole number >= 1")
        peaks = _figures(name, "peaks", gpu.get("peaks"), PEAKS)
        links = _figures(name, "links", gpu.get("links"), LINKS)
        _check_links(name, links, per_node)
        return cls(str(name), model, float(memory), str(arch), words, others, peaks, links, per_node)


def _positive(value: object) -> TypeGuard[int | float]:
    return (
        not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) and value > 0
    )


def _words(name: object, key: str, value: object, *, empty: bool) -> tuple[str, ...]:
    """A list of device-name words, upper-cased (names are matched in any case)."""
    if not (
        isinstance(value, list)
        and (empty or value)
        and all(isinstance(w, str) and w.split() == [w] for w in value)
    ):
        what = "a list of single words" if empty else "a non-empty list of single words"
        raise ValueError(f"cluster={name}: gpus.{key}={value!r}; allowed: {what} of the device name")
    return tuple(w.upper() for w in value)


def _figures(name: object, group: str, node: object, units: Mapping[str, str]) -> dict[str, Peak]:
    """The figures of ``gpus.<group>``: exactly the keys of ``units``, each a mapping of a positive value
    (a whole number where its unit says so) and its source."""
    if not isinstance(node, Mapping) or set(node) != set(units):
        got = sorted(node) if isinstance(node, Mapping) else repr(node)
        raise ValueError(
            f"cluster={name}: gpus.{group} has {got}; allowed: exactly {', '.join(units)}, each a mapping "
            "of value and source"
        )
    figures = {}
    for key, unit in units.items():
        figure = node[key]
        if not isinstance(figure, Mapping) or set(figure) != {"value", "source"}:
            raise ValueError(
                f"cluster={name}: gpus.{group}.{key}={figure!r}; allowed: a mapping of value and source"
            )
        value, source = figure["value"], figure["source"]
        if not _positive(value) or (unit.startswith("whole") and not isinstance(value, int)):
            raise ValueError(
                f"cluster={name}: gpus.{group}.{key}.value={value!r}; allowed: a positive {unit}"
            )
        if not isinstance(source, str) or not source.strip():
            raise ValueError(
                f"cluster={name}: gpus.{group}.{key}.source={source!r}; allowed: a non-empty text naming "
                "where the figure comes from"
            )
        figures[key] = Peak(float(value), source)
    return figures


def _check_links(name: object, links: Mapping[str, Peak], ranks_per_node: int) -> None:
    """Whole nodes in a domain or whole domains in a node, and no more ranks on a node than GPUs."""
    node, domain = int(links["gpus_per_node"].value), int(links["nvlink_domain"].value)
    if domain % node and node % domain:
        raise ValueError(
            f"cluster={name}: gpus.links.nvlink_domain.value={domain}; allowed: a multiple or a divisor of "
            f"gpus_per_node ({node}): whole nodes in a domain, or whole domains in a node"
        )
    if ranks_per_node > node:
        raise ValueError(
            f"cluster={name}: ranks_per_node={ranks_per_node}; allowed: at most gpus.links.gpus_per_node "
            f"({node}), one rank per GPU"
        )


def gpu_presets(folder: Path | None = None) -> dict[str, GpuPreset]:
    """Every preset of ``conf/cluster`` (or ``folder``) with GPUs, by name (one with ``gpus: false`` is
    none); a one-line ValueError names a file's bad value."""
    return _load(CLUSTERS if folder is None else folder)


@cache
def _load(folder: Path) -> dict[str, GpuPreset]:
    presets = {}
    for path in sorted(folder.glob("*.yaml"), key=lambda p: p.stem):
        node = yaml.safe_load(path.read_text())
        if not isinstance(node, Mapping) or node.get("name") != path.stem:
            got = node.get("name") if isinstance(node, Mapping) else node
            raise ValueError(f"{path.name}: name={got!r}; allowed: {path.stem!r} (its file's name)")
        if node.get("gpus"):
            presets[path.stem] = GpuPreset.of(node)
    claimed: dict[str, GpuPreset] = {}
    for preset in presets.values():
        for word in preset.device_words:
            other = claimed.setdefault(word, preset)
            if (other.model, other.peaks) != (preset.model, preset.peaks):
                raise ValueError(
                    f"cluster={preset.name}: gpus.device_words has {word!r}, which cluster={other.name} "
                    "claims for another GPU; allowed: words no preset of another GPU has"
                )
    if DEFAULT_PRESET not in presets:
        found = ", ".join(presets) or "none"
        raise ValueError(
            f"no GPU preset {DEFAULT_PRESET!r} (the report's hardware) in {folder}; found: {found}"
        )
    return presets


def _allowed() -> str:
    return ", ".join(gpu_presets())


def gpu_preset(name: str) -> GpuPreset:
    """The GPU preset of that name; a one-line ValueError lists the allowed ones."""
    presets = gpu_presets()
    if name not in presets:
        raise ValueError(f"unknown GPU preset {name!r}; allowed: {', '.join(presets)}")
    return presets[name]


def preset_for_device(device_name: str) -> str | None:
    """The preset whose GPU a recorded device name is ("NVIDIA H200" -> "h200"; of presets of one GPU,
    the first by name); None for CPUs, unknown GPUs and other variants."""
    return next((p.name for p in gpu_presets().values() if p.means(device_name)), None)
