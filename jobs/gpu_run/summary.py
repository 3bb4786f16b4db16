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
from jobs.gpu_run.plan import ENV_FIELDS, PHASES, RUN_SPENT, SPENT
from pipeline.data.atomic import atomic_write

Record = dict[str, Any]
LAYER_STAGES = ("pipeline", "packing")  # the steps whose executions publish rows
COST_GOAL = 1.5  # a GPU dataset's grouped job: its wall time at most this over its rank-0 windows


def write_summary(out: Path) -> None:
    """``summary.md`` from results.jsonl: the run and what it ran on, per step the verdict, what did
    not fit, the failures, then what was measured."""
    records = read(out / "results.jsonl")
    lines = ["# GPU run summary", "", *_header(records), *_steps(records), *_not_fit(records)]
    lines += _failures(records) + _timing(records) + _elementwise(records)
    lines += _pairs(records) + _executions(records) + _packing(records) + _rehearsals(records)
    accounted = [r for r in records if r.get("stage") == "account" and r.get("profiled_ms") is not None]
    if accounted:
        lines += ["", "## Where each execution's iteration went (phase account, ms)", ""]
        lines += accounts(accounted).rstrip("\n").splitlines()
    lines += _phases(records)
    starts = _starts(records)
    rerun = [r for r in records if r.get("stage") == "run" and r.get("name") == "rerun"]
    if rerun and starts and rerun[-1]["run"] == starts[-1]["run"]:
        lines += ["", f"To finish: `jobs/gpu-run.sh OUT_DIR {' '.join(rerun[-1]['args'])}`"]
    atomic_write(out / "summary.md", "\n".join(lines) + "\n")


def _starts(records: list[Record]) -> list[Record]:
    return [r for r in records if r.get("stage") == "run" and r.get("started")]


def _latest(records: list[Record], stage: str, name: str) -> Record | None:
    """The newest record of ``stage`` named ``name``."""
    return next((r for r in reversed(records) if r.get("stage") == stage and r.get("name") == name), None)


def _header(records: list[Record]) -> list[str]:
    """The run (its arguments, how it ended), the code, the stack, the kernel cache, the plan's
    reserves, and what the stages that run layers ran on."""
    lines = []
    starts = _starts(records)
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
    if code := _latest(records, "env", "provenance"):
        if code.get("commit"):
            tree = "differs from it" if code["differs"] else "is the commit's"
            check = "the same here" if code["status"] == "pass" else f"NOT the same here: {code['error']}"
            lines += [
                f"Code: prepared from commit {code['commit'][:12]} (the tree {tree}; digest "
                f"{code['tree'][:12]} of {code['files']} files, {check}); the shards name {code['git_sha']}",
                "",
            ]
        else:
            lines += [f"Code: {code['error']}", ""]
    if env := _latest(records, "env", "versions"):
        shown = ", ".join(f"{k} {env.get(k)}" for k in ENV_FIELDS if env.get(k) is not None)
        lines += [f"Environment: {shown}", ""]
    if cache := _latest(records, "env", "kernel cache"):
        lines += [
            f"Kernel cache: {cache['kernels']} kernels, verify {cache['status']}: {cache['output']}",
            "",
        ]
    elif cache := _latest(records, "env", "unpack kernel cache"):
        lines += [f"Kernel cache: {cache.get('reason') or cache.get('error') or cache['status']}", ""]
    if plan := _latest(records, "run", "plan"):
        past = f"; past them: {', '.join(plan['beyond'])}" if plan["beyond"] else ""
        lines += [f"Reserved: {sum(plan['reserve_s']):.0f} s for {len(plan['steps'])} steps{past}", ""]
    if gate := _latest(records, "gate", "default kernels"):
        why = f" ({gate['reason']})" if gate.get("reason") else ""
        lines += [f"The stages that run layers ran on: {gate['backend']}{why}", ""]
    return lines


def _steps(records: list[Record]) -> list[str]:
    """Per step (stage and variant) its status, seconds, limit and its items' verdicts."""
    lines = [
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
    return lines


def _not_fit(records: list[Record]) -> list[str]:
    """What the latest run had no time for: its steps cut (in whole, or some of their kernels) and the
    steps planned past the window's reserves that did not run."""
    starts = _starts(records)
    if not starts:
        return []
    mine = [r for r in records if r.get("run") == starts[-1]["run"]]
    cut = [r for r in mine if r.get("reason") in (SPENT, RUN_SPENT)]
    labels = list(dict.fromkeys(" ".join(filter(None, (r["stage"], r.get("variant")))) for r in cut))
    return ["", "## Did not fit", "", *(f"- {label}" for label in labels)] if labels else []


def _failures(records: list[Record]) -> list[str]:
    problems = [r for r in records if r.get("status") in ("fail", "timeout") and r.get("stage") != "run"]
    if not problems:
        return []
    lines = ["", "## Failures", ""]
    for r in problems:
        what = " ".join(
            str(r[k])
            for k in ("stage", "name", "key", "op", "variant", "case", "out_dtype", "shape")
            if r.get(k) and not (k in ("op", "variant", "out_dtype") and r.get("key"))
        )
        why = r.get("error") or r.get("reason") or r.get("detail") or r.get("note") or ""
        lines.append(f"- {what}: {why}".rstrip(": "))
    return lines


def _timing(records: list[Record]) -> list[str]:
    timing = [
        r for r in records if r.get("stage") == "timing" and r.get("status") == "pass" and r.get("shape")
    ]
    if not timing:
        return []
    peak = timing[0].get("dense_peak_tflops")
    lines = ["", "## Timing (BF16 out; graph-replay median unless no CUDA graphs)", ""]
    if peak:
        lines += [f"Dense BF16 peak measured: {float(peak):.4g} TFLOP/s", ""]
    quantized = {str(r["quantizer"]) for r in records if r.get("verdict") is True and r.get("quantizer")}
    if quantized:
        lines += [f"The MX op quantized A by: {', '.join(sorted(quantized))}", ""]
    head = ["shape", "op", "variant", "ms min / median / max", "TFLOP/s", "of peak", "vs _grouped_mm"]
    lines += _table([*head, "padded / useful"], [_timing_row(r) for r in timing])
    lines += ["", "Fastest variant per shape and op:", ""]
    return lines + _table(["shape", "op", "variant", "TFLOP/s"], _best_rows(timing))


def _elementwise(records: list[Record]) -> list[str]:
    """The elementwise kernels' timings: each shape's fraction of the bandwidth probe and speedup over
    the torch form (per output form where it has several)."""
    found = [r for r in records if r.get("stage") == "timing" and "speedup_vs_torch_form" in r]
    if not found:
        return []
    head = ["kernel", "rows x columns", "status", "of the bandwidth probe", "over the torch form"]
    cells = [
        [
            r.get("name"),
            f"{r['rows']} x {r.get('f', r.get('k'))}",
            r["status"],
            _figures(r.get("frac_of_hbm", r.get("frac_of_copy")), "{:.2f}"),
            _figures(r["speedup_vs_torch_form"], "{:.2f}x"),
        ]
        for r in found
    ]
    return ["", "## Elementwise kernels (timing)", "", *_table(head, cells)]


def _figures(value: Any, form: str) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {form.format(v)}" for k, v in value.items())
    return "" if value is None else form.format(value)


def _pairs(records: list[Record]) -> list[str]:
    """Each matched pair: MoK's iteration over Dist-MoE's with its 95% interval, labelled with the
    ranks and device it ran on."""
    found = [r for r in records if r.get("stage") == "pipeline" and r.get("name") == "pair"]
    if not found:
        return []
    head = ["workload", "Dist-MoE pipeline", "ranks", "device", "MoK ms", "Dist-MoE ms", "speedup [95%]"]
    cells = []
    for r in found:
        low, high = r.get("speedupLow"), r.get("speedupHigh")
        interval = f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else ""
        speedup = f"{r['speedup']:.3f}{interval}" if r.get("speedup") is not None else ""
        cells.append(
            [r.get("workload_id"), r.get("pipeline"), r.get("ranks"), r.get("device"),
             r.get("mokIterationMS"), r.get("distIterationMS"), speedup]
        )  # fmt: skip
    title = "## Matched pairs: MoK's iteration over Dist-MoE's (speedup > 1: Dist-MoE faster)"
    return ["", title, "", *_table(head, cells)]


def _executions(records: list[Record]) -> list[str]:
    rows = [r for r in records if r.get("stage") in LAYER_STAGES and r.get("iterationMS") is not None]
    if not rows:
        return []
    keys = ("name", "iterationMS", "peakAllocatedGiB", "sanityMaxError", "sanityTolerance", "sanityPassed")
    return [
        "",
        "## Pipeline executions",
        "",
        *_table(["execution", *keys[1:]], [[r.get(k) for k in keys] for r in rows]),
    ]


def _packing(records: list[Record]) -> list[str]:
    """The packing execution's measured peak beside its estimate, and what each grouped job cost."""
    lines = []
    peaks = [r for r in records if r.get("stage") == "packing" and r.get("name") == "peak"]
    if peaks:
        head = ["execution", "peak allocated GiB", "estimate GiB (preset)", "measured / estimate"]
        cells = [
            [r["execution"], r.get("peak_allocated_gib"), _estimate(r), r.get("measured_over_estimate")]
            for r in peaks
        ]
        lines += ["", "## The packing execution's peak beside its estimate", "", *_table(head, cells)]
    costs = [r for r in records if r.get("stage") in LAYER_STAGES and r.get("name") == "cost"]
    if costs:
        head = [
            "step",
            "executions",
            "multirun s",
            "rank-0 windows s",
            "over the windows",
            "compiles",
            "loads",
        ]
        cells = [
            [r["stage"], r["executions"], r["multirun_s"], r["windows_s"],
             f"{r['over_windows']}x" if r.get("over_windows") else "", r["compiles"], r["loads"]]
            for r in costs
        ]  # fmt: skip
        title = "## What a dataset cost: the grouped job's wall time over its rank-0 windows"
        title += f" (goal on a GPU: at most {COST_GOAL}x)"
        lines += ["", title, "", *_table(head, cells)]
    return lines


def _estimate(r: Record) -> str:
    return (
        f"{r['estimated_peak_gib']:.2f} ({r['estimate_preset']})" if r.get("estimated_peak_gib") else "none"
    )


def _phases(records: list[Record]) -> list[str]:
    phases = [r for r in records if r.get("stage") in LAYER_STAGES and r.get("name") == "phases"]
    if not phases:
        return []
    cols = [*PHASES, "compile", "compiles", "loads"]
    cells = [[r.get("execution"), *(r.get(k) for k in cols)] for r in phases]
    return [
        "",
        "## Where each pipeline execution's time went (s, rank 0)",
        "",
        *_table(["execution", *cols], cells),
    ]


def _rehearsals(records: list[Record]) -> list[str]:
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
