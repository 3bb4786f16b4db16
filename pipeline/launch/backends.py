"""The launch backends by name: what ``hydra.launcher.backend`` and the ledger's ``backend`` say."""

from __future__ import annotations

from pipeline.launch.debug import DebugBackend
from pipeline.launch.jobs import Backend
from pipeline.launch.local import LocalBackend
from pipeline.launch.slurm import SlurmBackend

BACKENDS: dict[str, Backend] = {b.name: b for b in (LocalBackend(), DebugBackend(), SlurmBackend())}


def backend(name: str) -> Backend:
    """The backend called ``name``; a ValueError lists the allowed names."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"backend {name!r} is not allowed; allowed: {', '.join(BACKENDS)}") from None
