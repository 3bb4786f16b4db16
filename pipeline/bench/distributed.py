"""Join the execution's ``torch.distributed`` group from submitit's job environment.

One process per rank: NCCL with one GPU each when the execution runs on CUDA, gloo on CPUs. The
rendezvous address is the job's first host; the port is derived from the job id, so every task of a
job (on any node) computes the same one without talking to the others first.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from datetime import timedelta

import submitit
import torch
import torch.distributed as dist

DEVICES = ("auto", "cpu", "cuda")
PORT_BASE, PORT_SPAN = 20000, 20000


@dataclass(frozen=True)
class Context:
    """Where this process sits in its execution."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    job_id: str
    hostname: str


def resolve_device(preference: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``."""
    if preference not in DEVICES:
        raise ValueError(f"device {preference!r}; allowed: {', '.join(DEVICES)}")
    if preference == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but no CUDA device is visible; allowed here: cpu, auto")
    if preference == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return preference


def rendezvous_port(job_id: str) -> int:
    return PORT_BASE + zlib.crc32(job_id.encode()) % PORT_SPAN


def init(device: str, timeout_s: float) -> Context:
    """Initialize the default process group of this job's tasks and pick this rank's device."""
    env = submitit.JobEnvironment()
    kind = resolve_device(device)
    if kind == "cuda":
        torch.cuda.set_device(env.local_rank)
        target = torch.device("cuda", env.local_rank)
    else:
        target = torch.device("cpu")
        # Ranks sharing a node split its cores; oversubscribed threads would dominate the timings.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // (env.num_tasks // env.num_nodes)))
    host = "127.0.0.1" if env.num_nodes == 1 else env.hostnames[0]
    dist.init_process_group(
        backend="nccl" if kind == "cuda" else "gloo",
        init_method=f"tcp://{host}:{rendezvous_port(env.job_id)}",
        rank=env.global_rank,
        world_size=env.num_tasks,
        timeout=timedelta(seconds=timeout_s),
    )
    return Context(
        rank=env.global_rank,
        world_size=env.num_tasks,
        local_rank=env.local_rank,
        device=target,
        job_id=env.job_id,
        hostname=env.hostnames[env.node],  # the scheduler's node name: nodes may share a machine
    )


def close() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
