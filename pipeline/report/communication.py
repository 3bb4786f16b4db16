"""What an execution's rows crossed: the one place that says it, for the rows, the pairs, the figures
and the page (``nccl all-to-all, 8 ranks, 1 node``, ``gloo all-to-all, 2 ranks, 1 node``, ``none: 1
rank``).

One launched rank sends nothing to another: its dispatch and combine are local copies, no collective
runs and nothing crosses a link, whatever EP its row is named for. More ranks exchange rows over the
process group's collective, across the hosts the ranks ran on. (A topology that knows NVLink domains
and the links between nodes adds them here.)
"""

from __future__ import annotations

from pipeline.data.reader import Shard

NONE = "none: 1 rank"


def communication(collective: str | None, ranks: int, nodes: int) -> str | None:
    """What crossed between ``ranks`` ranks on ``nodes`` hosts over ``collective``; None where more
    than one rank ran and the collective was not recorded."""
    if ranks == 1:
        return NONE
    if collective is None:
        return None
    return f"{collective} all-to-all, {ranks} ranks, {nodes} node{'s' if nodes != 1 else ''}"


def ran(shard: Shard) -> bool:
    """Whether the execution's rows crossed between ranks at all."""
    return shard.meta.shape.ranks > 1


def of_shard(shard: Shard) -> str | None:
    """:func:`communication` of what a shard recorded (its hosts are its nodes)."""
    meta = shard.meta
    return communication(meta.provenance.collective, meta.shape.ranks, max(1, len(meta.provenance.hosts)))
