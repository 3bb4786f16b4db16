"""What an execution's rows crossed and where its ranks sat: the one place that says it, for the rows,
the pairs, the figures and the page (``nccl all-to-all, EP32 over 4 nodes x 8 GPUs, 4 NVLink domains:
inter-node links``, ``nccl all-to-all, EP8 on one node, one NVLink domain``, ``gloo all-to-all, 2
ranks on one node``, ``none: 1 rank``), and for the speed of light (:func:`placement`).

One launched rank sends nothing to another: its dispatch and combine are local copies, no collective
runs and nothing crosses a link, whatever EP its row is named for. More ranks exchange rows over the
process group's collective, across the nodes the ranks ran on: as the shard's topology measured them
(metadata version 7 on), else as the GPU's preset places that many ranks
(:meth:`pipeline.base.gpu_presets.GpuPreset.span`), else on the hosts the shard names. On a GPU of a
preset, the NVLink domains those nodes make say whether rows left a domain for the inter-node links.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.base.gpu_presets import Span, gpu_preset, preset_for_device
from pipeline.data.reader import Shard

NONE = "none: 1 rank"


@dataclass(frozen=True)
class Placement:
    """Where an execution's ranks sat: the ranks on each node (``per_node``; None where only the count
    of ``nodes`` is known), whether the shard measured them (``measured``), and the NVLink domains of
    that placement on the GPU's preset (``span``: None off a GPU preset)."""

    nodes: int
    per_node: tuple[int, ...] | None
    measured: bool
    span: Span | None

    @property
    def ranks_per_node(self) -> int | None:
        """The most ranks on one node as measured (placed in order, they sit where they ran); None
        where the shard did not measure it (the preset's placement stands)."""
        return max(self.per_node) if self.measured and self.per_node else None


def placement(shard: Shard) -> Placement:
    """Where the shard's ranks sat (see the module docstring)."""
    meta, ranks = shard.meta, shard.meta.shape.ranks
    name = preset_for_device(shard.identity.device)
    preset = None if name is None else gpu_preset(name)
    if meta.topology is not None:
        measured = meta.topology
        span = None if preset is None else preset.span(ranks, measured.most_per_node)
        return Placement(measured.nodes, measured.ranks_per_node, True, span)
    if preset is not None:
        span = preset.span(ranks)
        full, rest = divmod(ranks, span.ranks_per_node)
        return Placement(span.nodes, (span.ranks_per_node,) * full + ((rest,) if rest else ()), False, span)
    return Placement(max(1, len(meta.provenance.hosts)), None, False, None)


def communication(collective: str | None, ep: int, ranks: int, where: Placement, gpus: bool) -> str | None:
    """What crossed between ``ranks`` ranks of an EP-``ep`` group (named EP<ep> where all of them ran)
    over ``collective``, on the nodes and NVLink domains of ``where`` (``gpus``: a rank per GPU); None
    where more than one rank ran and the collective was not recorded."""
    if ranks == 1:
        return NONE
    if collective is None:
        return None
    group = f"EP{ep}" if ranks == ep else f"{ranks} ranks"  # fewer than EP: the row's deviation says so
    unit = "GPU" if gpus else "rank"
    per = where.per_node
    if where.nodes == 1:
        nodes = "on one node"
    elif per is not None and len(set(per)) == 1:
        nodes = f"over {where.nodes} nodes x {per[0]} {unit}{'s' if per[0] > 1 else ''}"
    elif per is not None:
        nodes = f"over {where.nodes} nodes of {', '.join(map(str, per))} {unit}s"
    else:
        nodes = f"over {where.nodes} nodes"
    span = where.span
    links = ""
    if span is not None and span.domains == 1:
        links = ", one NVLink domain"
    elif span is not None:
        links = f", {span.domains} NVLink domains: inter-node links"
    return f"{collective} all-to-all, {group} {nodes}{links}"


def ran(shard: Shard) -> bool:
    """Whether the execution's rows crossed between ranks at all."""
    return shard.meta.shape.ranks > 1


def of_shard(shard: Shard) -> str | None:
    """:func:`communication` of what a shard recorded."""
    meta = shard.meta
    gpus = shard.identity.device != "cpu"
    return communication(meta.provenance.collective, meta.shape.ep, meta.shape.ranks, placement(shard), gpus)
