"""``summary.md`` of a device run, from its results.jsonl alone: per step its verdict, then the
failures and the tables of what was measured. Written whenever the results grow, so a run killed
from outside still leaves it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cutlass_kernels.gating import KERNEL_STAGES
from cutlass_kernels.results import read
from jobs.gpu_records import accounts
from jobs.gpu_run.plan import ENV_FIELDS, PHASES
from pipeline.data.atomic import atomic_write


def write_summary(out: Path) -> None:
    """``summary.md`` from results.jsonl: per stage (and variant) the verdict, then the details."""
    records = read(out / "results.jsonl")
    lines = ["# GPU run summary", ""]
    starts = [r for r in records if r.get("stage") == "run" and r.get("started")]
    if starts:
        last = starts[-1]
        lines += [f"Run {last['run']}: started {last['started']}, arguments `{' '.join(last['argv'])}`", ""]
        if last.get("scale", 1) > 1:
            lines += [f"Dry run on a loaded host: every limit and the total x{last['scale']}", ""]
        ended = [
            r for r in records if r.get("stage") == "run" and r.get("run") == last["run"] and r.get("ended")
        ]
        if ended and (ended[-1].get("reason") or ended[-1].get("error")):
            why = ended[-1].get("reason") or ended[-1]["error"].strip().splitlines()[-1]
            lines += [f"The run ended early: {why}", ""]
    env = next(
        (r for r in reversed(records) if r.get("stage") == "env" and r.get("name") == "versions"), None
    )
    if env:
        lines += [
            "Environment: " + ", ".join(f"{k} {env.get(k)}" for k in ENV_FIELDS if env.get(k) is not None),
            "",
        ]
    gate = next((r for r in reversed(records) if r.get("stage") == "gate"), None)
    if gate:
        why = f" ({gate['reason']})" if gate.get("reason") else ""
        lines += [f"The stages that run layers ran on: {gate['backend']}{why}", ""]
    lines += [
        "| stage | variant | status | seconds | limit s | pass | fail | skip |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in (r for r in records if r.get("name") == "stage"):
        items = [
            r
            for r in records
            if r.get("stage") == s["stage"]
            and r.get("name") != "stage"
            and r.get("variant") == s.get("variant")
        ]
        if s["stage"] in KERNEL_STAGES:
            items = [r for r in items if r.get("verdict") is True]
        count = {k: sum(r.get("status") == k for r in items) for k in ("pass", "fail", "skip")}
        lines.append(
            f"| {s['stage']} | {s.get('variant') or ''} | {s['status']} | {s.get('seconds', '')} "
            f"| {s.get('limit_s', '')} | {count['pass']} | {count['fail']} | {count['skip']} |"
        )
    problems = [r for r in records if r.get("status") in ("fail", "timeout") and r.get("stage") != "run"]
    if problems:
        lines += ["", "## Failures", ""]
        for r in problems:
            what = " ".join(
                str(r[k])
                for k in ("stage", "name", "key", "op", "variant", "case", "out_dtype", "shape")
                if r.get(k) and not (k in ("op", "variant", "out_dtype") and r.get("key"))
            )
            why = r.get("error") or r.get("reason") or r.get("detail") or r.get("note") or ""
            lines.append(f"- {what}: {why}".rstrip(": "))
    timing = [
        r for r in records if r.get("stage") == "timing" and r.get("status") == "pass" and r.get("shape")
    ]
    if timing:
        peak = timing[0].get("dense_peak_tflops")
        lines += ["", "## Timing (BF16 out; graph-replay median unless no CUDA graphs)", ""]
        if peak:
            lines += [f"Dense BF16 peak measured: {float(peak):.4g} TFLOP/s", ""]
        head = ["shape", "op", "variant", "ms min / median / max", "TFLOP/s", "of peak", "vs _grouped_mm"]
        lines += _table([*head, "padded / useful"], [_timing_row(r) for r in timing])
        lines += ["", "Fastest variant per shape and op:", ""]
        lines += _table(["shape", "op", "variant", "TFLOP/s"], _best_rows(timing))
    rows = [r for r in records if r.get("stage") == "pipeline" and r.get("iterationMS") is not None]
    if rows:
        lines += ["", "## Pipeline executions", ""]
        keys = ("name", "iterationMS", "sanityMaxError", "sanityTolerance", "sanityPassed")
        lines += _table(["execution", *keys[1:]], [[r.get(k) for k in keys] for r in rows])
    lines += _rehearsals(records)
    accounted = [r for r in records if r.get("stage") == "account" and r.get("profiled_ms") is not None]
    if accounted:
        lines += ["", "## Where each execution's iteration went (phase account, ms)", ""]

        lines += accounts(accounted).rstrip("\n").splitlines()
    phases = [r for r in records if r.get("stage") == "pipeline" and r.get("name") == "phases"]
    if phases:
        lines += ["", "## Where each pipeline execution's time went (s, rank 0)", ""]
        cols = [*PHASES, "compile", "compiles"]
        cells = [[r.get("execution"), *(r.get(k) for k in cols)] for r in phases]
        lines += _table(["execution", *cols], cells)
    rerun = [r for r in records if r.get("stage") == "run" and r.get("name") == "rerun"]
    if rerun and starts and rerun[-1]["run"] == starts[-1]["run"]:
        lines += ["", f"To finish: `jobs/gpu-run.sh OUT_DIR {' '.join(rerun[-1]['args'])}`"]
    atomic_write(out / "summary.md", "\n".join(lines) + "\n")


def _rehearsals(records: list[dict[str, Any]]) -> list[str]:
    """The summary's tables of the loopback and ranks steps."""
    lines = []
    loop = [r for r in records if r.get("stage") == "loopback" and "replay_error" in r]
    if loop:
        head = "case|collective|captured|all-to-alls in the graphs|replay error|tolerance|status".split("|")
        cells = [
            [
                r["name"], " ".join(filter(None, (r["collective"], r.get("version")))), r["graphs"],
                r["collectives_captured"].get("alltoall_base_", 0), f"{max(r['replay_error'].values()):.3g}",
                f"{r['tolerance']:.3g}", r["status"],
            ]
            for r in loop
        ]  # fmt: skip
        lines += ["", "## Loopback: one rank's exchange inside the captured graphs", "", *_table(head, cells)]
    shared = [r for r in records if r.get("stage") == "ranks" and "slice_rows" in r]
    if shared:
        head = "execution|ranks|GPUs|rows across ranks|gate error / tolerance|GiB a rank|status".split("|")
        cells = [
            [
                r["name"], r["ranks"], len(r["gpus"]) or "cpu", f"{r['crossed_rows']} of {r['slice_rows']}",
                f"{r.get('max_error', float('nan')):.3g} / {r.get('tolerance', float('nan')):.3g}",
                r["peak_gib_per_rank"] and f"{r['peak_gib_per_rank']:.2f}", r["status"],
            ]
            for r in shared
        ]  # fmt: skip
        lines += ["", "## Ranks sharing one GPU (correctness only)", "", *_table(head, cells)]
    return lines


def _table(head: Sequence[str], rows: list[list[Any]]) -> list[str]:
    def line(cells: Sequence[Any]) -> str:
        return "| " + " | ".join("" if c is None else str(c) for c in cells) + " |"

    return [line(head), line(["---"] * len(head)), *map(line, rows)]


def _timing_row(r: dict[str, Any]) -> list[Any]:
    ms = r.get("graph_ms") or r["dispatch_ms"]
    vs = f"{r['speedup_vs_grouped_mm']:.2f}x" if r.get("speedup_vs_grouped_mm") else None
    spread = f"{ms['min']:.3f} / {ms['median']:.3f} / {ms['max']:.3f}"
    padded = f"{r['padded_flops'] / r['useful_flops']:.3f}"
    return [
        r["shape"],
        r["op"],
        r["variant"],
        spread,
        f"{r['tflops']:.1f}",
        f"{r['frac_of_dense_peak']:.1%}",
        vs,
        padded,
    ]


def _best_rows(timing: list[dict[str, Any]]) -> list[list[Any]]:
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for r in timing:
        k = (r["shape"], r["op"])
        if k not in best or r["tflops"] > best[k]["tflops"]:
            best[k] = r
    return [[s, op, r["variant"], f"{r['tflops']:.1f}"] for (s, op), r in best.items()]
