"""The estimate's text: a line per execution as it ends, the table, and what needs attention."""

from __future__ import annotations

import time
from typing import Any, TextIO

from pipeline.base.gpu_presets import gpu_preset

COLUMNS = ("execution", "cluster", "timed GiB", "peak GiB", "at", "fits", "device ops", "syncs", "swiglu bwd")


class Progress:
    """One line per finished estimate on ``stream``: count, elapsed time, the execution."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.stream, self.done, self.start = total, stream, 0, time.perf_counter()

    def __call__(self, result: dict[str, Any]) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.start
        what = result.get("error") or f"{result['timed_peak_gib']:.2f} GiB, {result['device_ops']} ops"
        print(f"[{self.done}/{self.total} {elapsed:.0f}s] {result['execution_id']}: {what}", file=self.stream)


def problems(results: list[dict[str, Any]]) -> list[str]:
    """A line for each execution that failed, synchronizes the host in its timed iteration or does
    not fit its preset's GPU memory, saying why."""
    lines = []
    for r in results:
        name = f"{r['execution_id']} ({r.get('cluster', '?')})"
        if "error" in r:
            lines.append(f"{name}: failed: {r['error']}")
            continue
        if r["host_syncs"]:
            sites = ", ".join(r["host_sync_sites"])
            lines.append(f"{name}: {r['host_syncs']} host synchronization(s) per timed iteration: {sites}")
        if not r["fits"]:
            top = sorted(r["held_bytes"].items(), key=lambda kv: -kv[1])[:3]
            held = ", ".join(f"{k} {v / 2**30:.1f}" for k, v in top)
            lines.append(
                f"{name}: does not fit: peak {r['peak_gib']:.1f} GiB in {r['peak_phase']} > "
                f"{r['gpu_memory_gb']:g} GB (at the timed peak: {held} GiB)"
            )
    return lines


def table(results: list[dict[str, Any]]) -> str:
    rows = [COLUMNS]
    for r in results:
        if "error" in r:
            rows.append((r["execution_id"], r.get("cluster", "?"), "failed", "", "", "", "", "", ""))
            continue
        rows.append((
            r["execution_id"], r["cluster"], f"{r['timed_peak_gib']:.2f}", f"{r['peak_gib']:.2f}",
            r["peak_phase"], "yes" if r["fits"] else "NO", str(r["device_ops"]), str(r["host_syncs"]),
            r["swiglu_backward"] or "-",
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    ok = [r for r in results if "error" not in r]
    kernels = sorted({r["kernels"] for r in ok})
    presets = sorted({f"{r['cluster']} ({r['gpu_memory_gb']:g} GB, {r['arch']})" for r in ok})
    lines += [
        "",
        f"{len(results)} estimates on {', '.join(presets) or '-'}; kernels: {', '.join(kernels) or '-'}",
        "timed GiB: the peak of the timed steps (what peakAllocatedGiB measures); peak GiB: of the "
        "whole run (build, gate, steps), which must fit",
    ]
    found = problems(results)
    syncs = sum(r.get("host_syncs", 0) for r in ok)
    lines.append(f"host synchronizations in the timed iterations: {syncs}")
    lines += found or ["every execution fits its preset's GPU memory"]
    lines += groups(ok)
    return "\n".join(lines)


def groups(results: list[dict[str, Any]]) -> list[str]:
    """What a sweep on each preset packs into one job (pipeline.launch.groups: one resource shape):
    per shape, its executions and the group's peak, the largest execution's (each execution releases
    what it holds before the next builds; the weights two of them share are held once), and the NVLink
    domains its ranks span (:meth:`pipeline.base.gpu_presets.GpuPreset.span`)."""
    shapes: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for r in results:
        span = gpu_preset(r["cluster"]).span(r["ep"])
        shapes.setdefault((r["cluster"], span.nodes, r["ep"]), []).append(r)
    lines = ["", "groups of one resource shape (a job runs them one after another, at most its time allows):"]
    for (cluster, _, ep), members in sorted(shapes.items()):
        top = max(members, key=lambda r: r["peak_gib"])
        lines.append(
            f"  {cluster} EP{ep}, {gpu_preset(cluster).span(ep).describe()}: {len(members)} executions, peak "
            f"{top['peak_gib']:.2f} GiB ({top['execution_id']})"
        )
    return lines
