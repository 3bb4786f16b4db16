"""Run a function on N real gloo ranks (spawned processes) and collect each rank's result: the tests' and
the benchmarks' way to run code on a real process group without a launcher."""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def _worker(rank: int, world: int, backend: str, store: str, out: str, fn: Callable, args: tuple) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    result: dict[str, Any]
    try:
        if world > 0:
            if backend == "nccl":
                torch.cuda.set_device(rank)
            dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world)
        result = {"ok": fn(rank, max(world, 1), *args)}
        if world > 0:
            dist.barrier()
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - reported to the parent verbatim
        result = {"error": traceback.format_exc()}
    torch.save(result, out)


def run_ranks(world: int, fn: Callable, *args: Any, backend: str = "gloo", timeout: float = 300) -> list[Any]:
    """``fn(rank, world, *args)`` on ``world`` ranks of ``backend``; ``world=0`` runs one process with
    no group. A rank that raises, or any rank still running at ``timeout`` (a hang), fails the call."""
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        outs = [os.path.join(tmp, f"rank{r}.pt") for r in range(max(world, 1))]
        procs = [
            ctx.Process(target=_worker, args=(r, world, backend, store, outs[r], fn, args))
            for r in range(len(outs))
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout)
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
        if hung:
            raise AssertionError(f"ranks {hung} of {world} still running after {timeout}s (hang)")
        results = [
            torch.load(o, weights_only=False) if Path(o).exists() else {"error": "no result"} for o in outs
        ]
    errors = [f"rank {r}:\n{res['error']}" for r, res in enumerate(results) if "error" in res]
    if errors:
        raise AssertionError("\n".join(errors))
    return [res["ok"] for res in results]
