"""Many ranks on one GPU, for correctness (never timing): an EP group's processes share the one
device a lent machine has, route rows across ranks as on a cluster and pass every execution's
correctness gate (:mod:`pipeline.bench.sanity`) on the real kernels. NCCL refuses two ranks on one
GPU; gloo carries CUDA tensors (through the host), so the group is gloo's. Each rank is bound as an
execution binds it (:mod:`pipeline.bench.binding`: with one GPU visible, every rank takes it), its
binding exchanged through the group's store (:func:`pipeline.bench.distributed.exchange`), and the
ranks' sharing of one GPU is allowed here alone.

``python -m pipeline.bench.shared_gpu --executions ID,... [--ranks N] [--scale full|ci|cpu]
[--device auto|cuda|cpu]`` spawns N ranks (default: each execution's EP size) that build each
execution's layers at that scale (``max_ranks`` N) and gate them, one after another in the same
processes (the weights two executions share drawn once), and prints one JSON line per execution:
the verdict, its errors and tolerance, how many slice rows crossed ranks, the bindings' devices and
GPU UUIDs, and each rank's peak GPU memory. Exit 1 if an execution failed its gate or could not run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.distributed as dist
import yaml

from pipeline import CONFIG_DIR
from pipeline.base.vocabulary import has_backward
from pipeline.bench import sanity
from pipeline.bench.binding import bind
from pipeline.bench.distributed import exchange, resolve_device
from pipeline.bench.work import Shared, build_work, layer_config
from pipeline.data.codec import JsonRecord
from pipeline.data.meta import Sanity
from pipeline.matrix import EXECUTION_BY_ID
from pipeline.matrix.scale import scale_from_config, shape_for

GIB = 2**30


@dataclass(frozen=True)
class Gated(JsonRecord):
    """One execution's gate on ranks sharing a GPU, as rank 0 prints it (one JSON line): whether it
    passed on every rank, the slowest rank's seconds, the largest peak GiB of a rank and their sum, the
    ranks' devices and GPU UUIDs; where known, the slice rows that crossed ranks among all checked,
    the verdict's errors and tolerance, rank 0's error (and its traceback, unless the gate itself
    failed) and every rank's error by rank."""

    execution_id: str
    scale: str
    ranks: int
    passed: bool
    seconds: float
    peak_gib_per_rank: float | None
    peak_gib_all_ranks: float | None
    devices: tuple[str, ...]
    gpus: tuple[str, ...]
    crossed_rows: int | None = None
    slice_rows: int | None = None
    max_error: float | None = None
    errors: dict[str, float] | None = None
    tolerance: float | None = None
    error: str | None = None
    traceback: str | None = None
    rank_errors: dict[str, str] | None = None
    # left out of the line where unknown (the device run's summary tells outcomes apart by them)
    WHERE_KNOWN: ClassVar[tuple[str, ...]] = (
        "crossed_rows", "slice_rows", "max_error", "errors", "tolerance", "error", "traceback", "rank_errors"
    )  # fmt: skip

    def line(self) -> str:
        said = self.to_json()
        return json.dumps({k: v for k, v in said.items() if v is not None or k not in self.WHERE_KNOWN})


def _rank(
    rank: int, ranks: int, store_path: str, kind: str, ids: list[str], scale: str, timeout_s: float
) -> None:
    """One rank: bind, join the gloo group, then build and gate each execution; rank 0 prints."""
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks))
    store = dist.FileStore(store_path, ranks)
    mine = bind(rank, socket.gethostname(), rank, kind == "cuda", dict(os.environ))
    topology = exchange(store, mine, ranks)  # sharing one GPU is what this run is for
    dist.init_process_group(
        "gloo", store=dist.PrefixStore("group", store), rank=rank, world_size=ranks,
        timeout=timedelta(seconds=timeout_s),
    )  # fmt: skip
    device = torch.device(mine.device)
    node = yaml.safe_load((CONFIG_DIR / "scale" / f"{scale}.yaml").read_text())
    shared = Shared()
    for execution_id in ids:
        execution = EXECUTION_BY_ID[execution_id]
        began = time.perf_counter()
        rows: tuple[int, int] | tuple[None, None] = (None, None)
        verdict: Sanity | None = None
        error = trace = None
        try:
            shape = shape_for(execution.workload, scale_from_config(node, ranks))
            cfg = layer_config(execution, shape)
            rows = sanity.rows_across(cfg, ranks, 0)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            work = build_work(execution, shape, rank, device, 0, shared)
            verdict = sanity.gate(work.stack, has_backward(execution.workload.kind), seed=0)
            del work
        except Exception as err:  # noqa: BLE001 - this execution's verdict; the next one runs
            error = f"{type(err).__name__}: {err}"[:2000]
            if not isinstance(err, sanity.SanityError):
                trace = traceback.format_exc()[-2000:]
        peak = torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else None
        gathered: list[Any] = [None] * ranks
        dist.all_gather_object(gathered, (peak, time.perf_counter() - began, error))
        if rank == 0:
            peaks = [p for p, _, _ in gathered if p is not None]
            errors = {str(r): e for r, (_, _, e) in enumerate(gathered) if e}
            gated = Gated(
                execution_id=execution_id,
                scale=scale,
                ranks=ranks,
                passed=verdict is not None and verdict.passed and not errors,
                seconds=max(s for _, s, _ in gathered),
                peak_gib_per_rank=max(peaks) if peaks else None,
                peak_gib_all_ranks=sum(peaks) if peaks else None,
                devices=tuple(sorted({b.device for b in topology.bindings})),
                gpus=tuple(sorted({b.uuid for b in topology.bindings if b.uuid})),
                crossed_rows=rows[0],
                slice_rows=rows[1],
                max_error=None if verdict is None else verdict.max_error,
                errors=None if verdict is None else verdict.errors,
                tolerance=None if verdict is None else verdict.tolerance,
                error=error,
                traceback=trace,
                rank_errors=errors or None,
            )
            print(gated.line(), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    dist.destroy_process_group()


def run(ids: list[str], ranks: int, scale: str, kind: str, timeout_s: float) -> int:
    """Spawn the ranks, wait for them (at most ``timeout_s``); 1 if any rank failed or an execution
    failed its gate (rank 0's lines say which)."""
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="shared-gpu-") as tmp:
        store = str(Path(tmp) / "store")
        procs = [
            ctx.Process(target=_rank, args=(r, ranks, store, kind, ids, scale, timeout_s))
            for r in range(ranks)
        ]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    if hung:
        print(f"error: ranks {hung} still running after {timeout_s:g} s", file=sys.stderr)
    return 1 if hung or any(p.exitcode for p in procs) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.bench.shared_gpu", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--executions", required=True, help="execution ids, comma-separated")
    parser.add_argument("--ranks", type=int, default=None, help="ranks launched (default: the EP size)")
    parser.add_argument("--scale", default="full", help="a scale of conf/scale (full, ci, cpu)")
    parser.add_argument("--device", default="auto", help="auto (a GPU when there is one), cuda or cpu")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole run")
    args = parser.parse_args(argv)
    ids = [i for i in args.executions.split(",") if i]
    unknown = [i for i in ids if i not in EXECUTION_BY_ID]
    scales = sorted(p.stem for p in (CONFIG_DIR / "scale").glob("*.yaml"))
    try:
        kind = resolve_device(args.device)
        if not ids or unknown:
            raise ValueError(
                f"--executions {','.join(unknown) or args.executions!r}; allowed: ids of pipeline.list"
            )
        if args.scale not in scales:
            raise ValueError(f"--scale {args.scale!r}; allowed: {', '.join(scales)}")
        eps = {EXECUTION_BY_ID[i].workload.ep for i in ids}
        ranks = args.ranks if args.ranks is not None else min(eps)
        if ranks < 2 or any(ep % ranks for ep in eps):
            raise ValueError(
                f"--ranks {ranks}; allowed: 2 or more, dividing every execution's EP size {sorted(eps)}"
            )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return run(ids, ranks, args.scale, kind, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
