"""Where an execution's ranks ran and how they talked: the nodes and ranks per node, each rank's
GPU (:class:`pipeline.bench.binding.Binding`), the collective library and its version, and the NCCL
environment (``NCCL_*`` and ``TORCH_NCCL_*``: protocols, algorithms, transports, timeouts), which
changes timings without changing anything else a dataset records. Two datasets that differ only there
are told apart by this record.

Every rank's binding and environment travel through the job's store once per job
(:mod:`pipeline.bench.distributed`); :meth:`Topology.of` puts them together, a pure function of
what the ranks said.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from pipeline.bench.binding import Binding
from pipeline.data.codec import JsonRecord

NCCL_PREFIXES = ("NCCL_", "TORCH_NCCL_")


def nccl_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that steer NCCL or torch's use of it, sorted by name."""
    return {k: environ[k] for k in sorted(environ) if k.startswith(NCCL_PREFIXES)}


def nccl_version(collective: str) -> str | None:
    """The NCCL version torch runs (``2.28.9``) when the group is NCCL's, else None."""
    if collective != "nccl":
        return None
    return ".".join(map(str, torch.cuda.nccl.version()))


@dataclass(frozen=True)
class Topology(JsonRecord):
    """The ranks of one job (every execution of its group) and how they talked: ``collective`` (nccl,
    gloo), its ``version`` (NCCL's; None for gloo), the ``hosts`` (the scheduler's node names, in order
    of first rank) with ``ranks_per_node`` of each, every rank's binding, and rank 0's NCCL environment
    with the ranks whose own differs from it."""

    collective: str
    version: str | None
    hosts: tuple[str, ...]
    ranks_per_node: tuple[int, ...]
    bindings: tuple[Binding, ...]
    nccl_env: dict[str, str]
    env_differs: tuple[int, ...] = ()

    @property
    def nodes(self) -> int:
        return len(self.hosts)

    @classmethod
    def of(
        cls,
        collective: str,
        version: str | None,
        bindings: Sequence[Binding],
        environments: Sequence[Mapping[str, str]],
    ) -> Topology:
        """From every rank's binding and NCCL environment, in rank order."""
        hosts = tuple(dict.fromkeys(b.host for b in bindings))
        per_node = tuple(sum(b.host == h for b in bindings) for h in hosts)
        first = dict(environments[0]) if environments else {}
        differs = tuple(r for r, env in enumerate(environments) if dict(env) != first)
        return cls(collective, version, hosts, per_node, tuple(bindings), first, differs)

    def describe(self) -> str:
        """``nccl 2.28.9, 32 ranks on 4 nodes x 8`` (``... on 2 nodes: 3, 1`` where nodes differ)."""
        library = self.collective if self.version is None else f"{self.collective} {self.version}"
        ranks = len(self.bindings)
        if len(set(self.ranks_per_node)) == 1:
            where = f"{self.nodes} node{'s' if self.nodes > 1 else ''} x {self.ranks_per_node[0]}"
        else:
            where = f"{self.nodes} nodes: {', '.join(map(str, self.ranks_per_node))}"
        return f"{library}, {ranks} rank{'s' if ranks > 1 else ''} on {where}"
