"""Where an execution's ranks ran, as its shard records it: each rank's GPU (:class:`Binding`) and the
job's :class:`Topology`: its nodes, the ranks on each, every rank's binding and the NCCL environment
(``NCCL_*`` and ``TORCH_NCCL_*``: protocols, algorithms, transports, timeouts), which changes timings
without changing anything else a dataset records, so two datasets that differ only there are told apart
by this record. The collective and its version are the provenance's (:class:`pipeline.data.meta.Provenance`).

The job makes them (:mod:`pipeline.bench.binding`, :mod:`pipeline.bench.distributed`); they sit here,
with the shard's other records, so that every reader of a shard may import them. Read back from a
dataset they are untrusted input: :meth:`Topology.__post_init__` holds the nodes, the ranks and the
bindings to one another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipeline.base.bounds import at_least
from pipeline.data.codec import JsonRecord


@dataclass(frozen=True)
class Binding(JsonRecord):
    """The device one rank bound: ``device`` as torch names it in the rank's process (``cuda:0``, or
    ``cpu``), its entry of the task's ``CUDA_VISIBLE_DEVICES`` (a GPU index, UUID or MIG id; None when
    the variable is unset), and what the GPU is (None on CPUs, and where the driver does not say)."""

    rank: int
    host: str
    local_rank: int
    device: str
    visible: str | None = None
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None  # domain:bus:device.function as Linux names it, 0000:1b:00.0
    numa_node: int | None = None

    def __post_init__(self) -> None:
        at_least(self, 0, "rank", "local_rank", "numa_node")


@dataclass(frozen=True)
class Topology(JsonRecord):
    """The ranks of one job (every execution of its group): the ``hosts`` (the scheduler's node names,
    in order of first rank) with ``ranks_per_node`` of each as measured, every rank's binding in rank
    order, and rank 0's NCCL environment with the ranks whose own differs from it."""

    hosts: tuple[str, ...]
    ranks_per_node: tuple[int, ...]
    bindings: tuple[Binding, ...]
    nccl_env: dict[str, str]
    env_differs: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        ranks = len(self.bindings)
        if not ranks:
            raise ValueError("bindings must hold every rank's binding, got none")
        if [b.rank for b in self.bindings] != list(range(ranks)):
            got = [b.rank for b in self.bindings]
            raise ValueError(f"bindings must be ranks 0 to {ranks - 1} in order, got ranks {got}")
        if len(set(self.hosts)) != len(self.hosts):
            raise ValueError(f"hosts must name each node once, got {list(self.hosts)}")
        counted = tuple(sum(b.host == h for b in self.bindings) for h in self.hosts)
        if counted != self.ranks_per_node or sum(counted) != ranks:
            raise ValueError(
                f"ranks_per_node {list(self.ranks_per_node)} of hosts {list(self.hosts)} are not the "
                f"bindings' {list(counted)} of {ranks} ranks"
            )
        if any(not 0 < r < ranks for r in self.env_differs):
            raise ValueError(f"env_differs must name ranks 1 to {ranks - 1}, got {list(self.env_differs)}")

    @property
    def nodes(self) -> int:
        return len(self.hosts)

    @property
    def most_per_node(self) -> int:
        """The most ranks any node held: the placement in order that puts the ranks where they ran (Slurm
        fills a node before the next)."""
        return max(self.ranks_per_node)

    @classmethod
    def of(cls, bindings: Sequence[Binding], environments: Sequence[Mapping[str, str]]) -> Topology:
        """From every rank's binding and NCCL environment, in rank order."""
        hosts = tuple(dict.fromkeys(b.host for b in bindings))
        per_node = tuple(sum(b.host == h for b in bindings) for h in hosts)
        first = dict(environments[0]) if environments else {}
        differs = tuple(r for r, env in enumerate(environments) if dict(env) != first)
        return cls(hosts, per_node, tuple(bindings), first, differs)
