"""Which GPU a rank runs on, under whatever binding its scheduler gave the task, and what that GPU is.

Slurm hands a node's GPUs to its tasks in one of three ways: every task sees all of them
(``--gres=gpu:8``: ``CUDA_VISIBLE_DEVICES=0,...,7`` in each task), each task sees its own only
(``--gpus-per-task=1`` or ``--gpu-bind``: local rank 3 sees one device, 0, which is physical GPU 3), or
a site's prolog sets a list (``CUDA_VISIBLE_DEVICES=4,5,6,7``: local rank 3 takes the fourth). A rank
takes the device of its local rank among those its task sees (:func:`choose`, a pure function of the
local rank and the visible devices: ``local_rank mod visible``), so every binding gives each rank a
GPU of its own, and a node whose tasks see fewer GPUs than it has ranks puts two ranks on one GPU.
That is found by the GPUs' UUIDs, which every rank reads for its own device (:func:`identify`, the only
CUDA calls here) and exchanges through the job's store before the process group exists: a timed
execution refuses it in one line, before any work (:func:`exclusive`); only a run for correctness lets
ranks share a GPU. Each rank's :class:`~pipeline.data.topology.Binding` (host, local rank, device, its
``CUDA_VISIBLE_DEVICES`` entry, UUID, PCI bus id, NUMA node) is a record its shard carries.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from pipeline.base.devices import VISIBLE_ENV
from pipeline.data.topology import Binding

PCI_DEVICES = Path("/sys/bus/pci/devices")  # <bus id>/numa_node on Linux


class BindingError(ValueError):
    """This rank cannot have a GPU of its own; one line naming why and what is allowed."""


def visible_entries(listed: str | None) -> list[str] | None:
    """The entries of a ``CUDA_VISIBLE_DEVICES`` value (None: unset, every GPU visible)."""
    if listed is None:
        return None
    return [entry.strip() for entry in listed.split(",") if entry.strip()]


def choose(local_rank: int, visible: int, listed: str | None = None) -> tuple[int, str | None]:
    """This rank's device among the ``visible`` devices its task sees (``torch.cuda.device_count()``,
    which ``listed``, the task's ``CUDA_VISIBLE_DEVICES``, selects): its index there and its entry of
    ``listed``. All of a node's GPUs visible to every task: the local rank's; one bound to the task:
    that one; fewer than the node's ranks: the local rank's modulo the visible ones (ranks then share
    GPUs, which :func:`exclusive` finds)."""
    if local_rank < 0:
        raise BindingError(f"local rank {local_rank}; allowed: 0 or more")
    if visible < 1:
        shown = "unset" if listed is None else repr(listed)
        raise BindingError(
            f"local rank {local_rank} sees no GPU ({VISIBLE_ENV} {shown}); allowed: a task that sees a GPU "
            "(--gpus-per-task=1, or --gres=gpu:N with N the tasks per node)"
        )
    ordinal = local_rank % visible
    entries = visible_entries(listed)
    return ordinal, entries[ordinal] if entries is not None and ordinal < len(entries) else None


def exclusive(bindings: Sequence[Binding]) -> None:
    """Refuse, in one line, two ranks on one GPU (the same UUID): a timed execution needs a GPU per rank.
    Ranks without a UUID (CPUs) are not compared."""
    holders: dict[str, list[Binding]] = {}
    for b in bindings:
        if b.uuid is not None:
            holders.setdefault(b.uuid, []).append(b)
    shared = [sorted(held, key=lambda b: b.rank) for held in holders.values() if len(held) > 1]
    if not shared:
        return
    first = min(shared, key=lambda held: held[0].rank)
    ranks = " and ".join(f"{b.rank} ({b.host}, local rank {b.local_rank})" for b in first)
    raise BindingError(
        f"ranks {ranks} would share GPU {first[0].uuid} ({first[0].pci_bus_id}): a timed execution needs a "
        "GPU of its own per rank; allowed: as many GPUs visible on a node as ranks on it, one per task "
        "(--gpus-per-task=1) or all of them to every task (--gres=gpu:N, N the tasks per node)"
    )


def canonical_uuid(raw: str) -> str:
    """A GPU's UUID as NVIDIA tools print it, ``GPU-<hex groups>`` (torch gives it without the prefix)."""
    text = raw.strip()
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def pci_bus_id(domain: int, bus: int, device: int) -> str:
    """``0000:1b:00.0``: the form of ``/sys/bus/pci/devices`` (a GPU is function 0)."""
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"


def numa_node(bus_id: str | None, devices: Path = PCI_DEVICES) -> int | None:
    """The NUMA node of the PCI device ``bus_id`` (Linux's sysfs); None where it is not known (-1)."""
    if bus_id is None:
        return None
    try:
        node = int((devices / bus_id.lower() / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def identify(ordinal: int) -> tuple[str, str | None, str | None]:
    """(name, UUID, PCI bus id) of CUDA device ``ordinal`` of this process, as the driver reports them."""
    props = torch.cuda.get_device_properties(ordinal)
    uuid = getattr(props, "uuid", None)
    pci = [getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]
    ids = [v for v in pci if isinstance(v, int)]
    where = pci_bus_id(*ids) if len(ids) == 3 else None  # an older torch does not say
    return props.name, None if uuid is None else canonical_uuid(str(uuid)), where


def bind(rank: int, host: str, local_rank: int, cuda: bool, environ: dict[str, str]) -> Binding:
    """This rank's device, made current (CUDA: the local rank's among the visible GPUs, :func:`choose`),
    and its record."""
    if not cuda:
        return Binding(rank, host, local_rank, "cpu")
    ordinal, visible = choose(local_rank, torch.cuda.device_count(), environ.get(VISIBLE_ENV))
    torch.cuda.set_device(ordinal)
    name, uuid, bus = identify(ordinal)
    return Binding(rank, host, local_rank, f"cuda:{ordinal}", visible, name, uuid, bus, numa_node(bus))
