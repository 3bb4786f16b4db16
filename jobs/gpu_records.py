"""A device run's records, as its document's tables and as the kernel-rate table they measured.

Each run on a GPU keeps its raw records beside its document: ``docs/gpu-runs/<run>.md`` and the
folder ``docs/gpu-runs/<run>/`` holding ``results.jsonl`` (every record of ``jobs/gpu-run.sh``, its
``OUT_DIR``'s), ``mok-comparison.csv`` and ``summary.md``; a run whose raw records were lost holds
``records.jsonl`` instead, the document's tables transcribed into the same records, which says so in
its first record. Every table of the document sits between ``<!-- records: NAME -->`` and
``<!-- /records -->`` and is regenerated from the records by one command::

    python3 jobs/gpu_records.py docs/gpu-runs/2026-12-04-h200.md          # rewrite the tables
    python3 jobs/gpu_records.py docs/gpu-runs/2026-12-04-h200.md --check  # exit 1 where one differs

The tables: ``steps`` (each step's verdict), ``kernels-default`` and ``kernels-best`` (the grouped
GEMMs' rates), ``swiglu`` (the SwiGLU backward kernel), ``pipeline`` (the single-GPU executions),
``phases`` (where each execution's seconds went), ``accounts`` (each execution's phase account),
``expectation`` (the layer's cost fed the run's measured kernel rates (:func:`kernel_rates`, the
default kernels' as the pipeline ran them), beside the measured iteration and the speed of light at
the preset's datasheet peaks), ``pairs`` (the matched pairs published), ``elementwise`` (the MX
quantization and SwiGLU forward kernels), ``loopback`` and ``ranks`` (the multi-rank rehearsals),
``packing`` (the packing execution's peak beside its estimate) and ``costs`` (each grouped job's time
over its windows). :func:`kernel_rates` is also what the device run hands the pipeline's
aggregation (``--rates``). Torch-free, like the device run's scheduler.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cutlass_kernels.gating import MX_QUANT_KEY, SWIGLU_FWD_KEY  # noqa: E402
from pipeline.base.vocabulary import LAYER_PHASES  # noqa: E402
from pipeline.matrix import EXECUTION_BY_ID  # noqa: E402
from pipeline.matrix.scale import scale_from_config, shape_for  # noqa: E402

Record = dict[str, Any]
MARK = re.compile(r"(<!-- records: ([a-z-]+) -->\n)(.*?)(<!-- /records -->)", re.DOTALL)
SHAPE = re.compile(r"D(\d+)-F(\d+)-EP(\d+)-(up|down)")
TIMED_OPS = ("fprop", "dgrad", "wgrad")
RUN_PHASES = (
    *("process", "init", "connect", "build", "gate", "compile", "compiles", "capture", "calibrate"),
    *("windows", "account", "record"),
)
DEFAULT = "default"
ELEMENTWISE = (MX_QUANT_KEY, SWIGLU_FWD_KEY)  # the keys of the elementwise kernels' timing records


def records(folder: Path) -> list[Record]:
    """The run's records: ``results.jsonl`` as the run wrote it, else the transcribed ``records.jsonl``."""
    for name in ("results.jsonl", "records.jsonl"):
        path = folder / name
        if path.is_file():
            return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    raise ValueError(f"{folder} holds neither results.jsonl nor records.jsonl")


def _num(value: Any) -> float | None:
    """A record's number (the pipeline's records carry the CSV's text), None where it is empty."""
    return None if value in (None, "") else float(value)


def _timing(found: Iterable[Record]) -> list[Record]:
    return [r for r in found if r.get("stage") == "timing" and r.get("op") and r.get("tflops")]


def kernel_rates(found: Sequence[Record], device: str, source: str, variant: str = DEFAULT) -> Record:
    """The kernel-rate table (``pipeline.cost.KernelRates`` as JSON) of ``variant``'s grouped GEMMs at
    the report's shapes, the dense BF16 peak the timing children measured and the HBM bandwidth of the
    SwiGLU check's streaming probe; no link rate (one GPU measures none)."""
    timing = _timing(found)
    gemms = []
    for r in timing:
        shape = SHAPE.fullmatch(str(r["shape"]))
        if shape is None or r["variant"] != variant:
            continue
        d, f, _, projection = shape.groups()
        gemms.append(
            {"op": r["op"], "d_model": int(d), "d_ff": int(f), "groups": int(r["groups"]),
             "projection": projection, "tflops": float(r["tflops"])}
        )  # fmt: skip
    dense = max((float(r["dense_peak_tflops"]) for r in timing if r.get("dense_peak_tflops")), default=None)
    probes = [r for r in found if r.get("name") == "swiglu_backward" and r.get("hbm_gb_per_s")]
    hbm = max((float(r["hbm_gb_per_s"]) for r in probes), default=None)
    if not gemms or dense is None or hbm is None:
        raise ValueError("the records hold no timed GEMMs, dense peak or HBM probe to make kernel rates of")
    return {"device": device, "source": source, "dense_tflops": dense, "hbm_gb_s": hbm, "link_gb_s": None,
            "gemms": gemms}  # fmt: skip


def device_of(found: Sequence[Record]) -> str:
    """The GPU the run ran on (its env record's), else the one its pipeline rows name."""
    for r in found:
        if r.get("stage") == "env" and r.get("device"):
            return str(r["device"])
    rows = [r for r in found if r.get("stage") == "pipeline" and r.get("device")]
    return str(rows[0]["device"]) if rows else "unknown"


# ------------------------------------------------------------------------------------------- tables


def table(head: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def line(cells: Sequence[Any]) -> str:
        return "|" + "|".join(" " if c in (None, "") else f" {c} " for c in cells) + "|"

    return "\n".join([line(head), line(["---"] * len(head)), *map(line, rows)]) + "\n"


def steps(found: Sequence[Record]) -> str:
    """Each step's verdict: the transcribed steps, or the run's stage records."""
    written = [r for r in found if r.get("stage") == "step"]
    if written:
        return table(["step", "result", "seconds"], ([r["name"], r["result"], r["seconds"]] for r in written))
    rows = []
    for r in found:
        if r.get("name") != "stage":
            continue
        label = " ".join(filter(None, (r["stage"], r.get("variant"))))
        tally = ", ".join(f"{n} {k}" for k, n in (r.get("verdicts") or {}).items() if n)
        said = "; ".join(filter(None, (r["status"], tally, r.get("note"), r.get("reason"))))
        rows.append([label, said, r.get("seconds", "")])
    return table(["step", "result", "seconds"], rows)


def _by_shape(timing: list[Record], variant: str) -> dict[str, dict[str, Record]]:
    out: dict[str, dict[str, Record]] = {}
    for r in timing:
        if r["variant"] == variant:
            out.setdefault(str(r["shape"]), {})[str(r["op"])] = r
    return out


def _pct(r: Record) -> str:
    return f"{round(100 * float(r['frac_of_dense_peak']))}%"


def kernels_default(found: Sequence[Record]) -> str:
    """The default kernels: TFLOP/s, % of the dense peak and x torch._grouped_mm per op and shape."""
    rows = []
    for shape, ops in _by_shape(_timing(found), DEFAULT).items():
        cells: list[Any] = [shape, ops["fprop"]["groups"]]
        for op in TIMED_OPS:
            r = ops[op]
            cells.append(f"{r['tflops']:.0f} ({_pct(r)}, {float(r['speedup_vs_grouped_mm']):.2f}x)")
        mx = ops["mx"]
        ratio = mx.get("mx_over_fprop_time") or float(ops["fprop"]["tflops"]) / float(mx["tflops"])
        cells += [f"{mx['tflops']:.0f} ({_pct(mx)})", f"{float(ratio):.2f}"]
        rows.append(cells)
    head = ["shape", "G", "fprop TFLOP/s (% peak, x _grouped_mm)", "dgrad", "wgrad"]
    return table([*head, "MX (sm90: BF16 values on fprop)", "MX / fprop time"], rows)


def kernels_best(found: Sequence[Record]) -> str:
    """The fastest variant per shape and op, its % of the peak and its gain over the default."""
    timing = _timing(found)
    default = _by_shape(timing, DEFAULT)
    best: dict[str, dict[str, Record]] = {}
    for r in timing:
        mine = best.setdefault(str(r["shape"]), {})
        if r["op"] not in mine or float(r["tflops"]) > float(mine[r["op"]]["tflops"]):
            mine[str(r["op"])] = r
    rows = []
    for shape, ops in best.items():
        cells: list[Any] = [shape]
        for op in (*TIMED_OPS, "mx"):
            r = ops[op]
            gain = r.get("gain_over_default") or float(r["tflops"]) / float(default[shape][op]["tflops"])
            cells.append(f"{r['variant']} {r['tflops']:.0f} ({_pct(r)}, x{float(gain):.2f})")
        rows.append(cells)
    return table(["shape", "fprop", "dgrad", "wgrad", "MX"], rows)


def swiglu(found: Sequence[Record]) -> str:
    """The fused SwiGLU backward kernel against the streaming probe of the same bytes."""
    rows = [
        [
            f"{r['rows']:,} x {r['f']:,}",
            f"{r['ms']['kernel']['median']:.3f}",
            f"{r['gb_per_s']['kernel']:,.0f}",
            f"{r['gb_per_s']['add']:,.0f}",
            f"{r['frac_of_hbm']:.3f}",
            f"{r['speedup_vs_torch_form']:.1f}x",
        ]
        for r in found
        if r.get("name") == "swiglu_backward" and r.get("gb_per_s")
    ]
    head = ["rows x F", "kernel ms", "GB/s", "BF16 add of the same bytes GB/s", "of that"]
    return table([*head, "over the unfused torch form"], rows)


def _executions(found: Sequence[Record]) -> list[Record]:
    return [r for r in found if r.get("stage") == "pipeline" and r.get("name") in EXECUTION_BY_ID]


def pipeline(found: Sequence[Record]) -> str:
    """The single-GPU executions: times, rate, graphs, gate, memory against the fake-tensor estimate."""
    rows = []
    for r in _executions(found):
        estimate = _num(r.get("estimatedPeakGiB"))
        if _num(r.get("iterationMS")) is None:
            rows.append([r["name"], r.get("detail", r.get("status")), "", "", "", "", _two(estimate), ""])
            continue
        ms, fwd, bwd = (_num(r.get(k)) for k in ("iterationMS", "forwardMS", "backwardMS"))
        times = f"{ms:.2f} ({fwd:.2f}" + (f" / {bwd:.2f})" if bwd is not None else ")")
        peak = _num(r.get("peakAllocatedGiB"))
        ratio = r.get("measured_over_estimate") or (peak / estimate if peak and estimate else None)
        graphs = str(r.get("cudaGraphs")).lower()
        gate = f"{_num(r['sanityMaxError']):.4f} / {_num(r['sanityTolerance']):.4f}"
        rows.append([r["name"], times, f"{_num(r['usefulTFLOPsPerGPU']):.0f}", graphs, gate, _two(peak),
                     _two(estimate), None if ratio is None else f"{float(ratio):.3f}"])  # fmt: skip
    head = ["execution", "iteration ms (fwd / bwd)", "useful TFLOP/s", "graphs", "gate error / tolerance"]
    return table([*head, "peak allocated GiB", "fake-tensor estimate GiB", "measured / estimate"], rows)


def _two(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}"


def phases(found: Sequence[Record]) -> str:
    """Each execution's seconds by part (its job log's ``phases`` line)."""
    lines = [r for r in found if r.get("stage") == "pipeline" and r.get("name") == "phases"]
    shown = [p for p in RUN_PHASES if any(p in r for r in lines)]
    rows = [
        [r["execution"], *(r.get(p) if p == "compiles" else _two(_num(r.get(p))) for p in shown)]
        for r in lines
    ]
    return table(["execution", *shown], rows)


def accounts(found: Sequence[Record]) -> str:
    """Each execution's phase account (the account step's records): ms per phase, unclaimed, the
    profiled iteration beside the timed one, the kernels named."""
    lines = [r for r in found if r.get("stage") == "account" and r.get("profiled_ms") is not None]
    if not lines:
        return "No phase account was recorded in this run (the phase account came after it).\n"
    rows = [
        [r["name"], *(_two(_num(r["phases"].get(p))) for p in LAYER_PHASES), _two(r["unclaimed_ms"]),
         _two(r["profiled_ms"]), _two(r["timed_ms"]), f"{r.get('named_kernels')} of {r.get('kernels')}"]
        for r in lines
    ]  # fmt: skip
    return table(["execution", *LAYER_PHASES, "unclaimed", "profiled ms", "timed ms", "kernels named"], rows)


def expectation(found: Sequence[Record]) -> str:
    """The layer's cost at the run's measured kernel rates (the default kernels', the pipeline's) beside
    each measured iteration and the speed of light, for the single-GPU executions of the run."""
    from pipeline import cost
    from pipeline.cost.products import EMULATED, routed_peak

    device = device_of(found)
    rates = cost.KernelRates(**{**(raw := kernel_rates(found, device, "the run's timing stage")),
                                "gemms": tuple(cost.GemmRate(**g) for g in raw["gemms"])})  # fmt: skip
    preset = cost.hardware_for_device(device)
    full = scale_from_config(_full_scale(), 1)
    rows = []
    for r in _executions(found):
        measured = _num(r.get("iterationMS"))
        if measured is None:
            continue
        execution = EXECUTION_BY_ID[r["name"]]
        shape = shape_for(execution.workload, full)
        v = execution.variant
        layer = cost.LayerShape(
            execution.workload.kind, shape.nominal_tokens, shape.d_model, shape.d_ff, shape.num_experts,
            shape.top_k, shape.ep, v.precision, shape.layer_loads, shape.num_shared, 2, shape.ranks,
        )  # fmt: skip
        dispatch = "mxfp8" if v.pipeline == "fp8-dispatch" else "bf16"
        products = EMULATED if v.precision == "mxfp8" else None  # the sm90 kernels, as the run's
        expected = cost.expected_phases(
            layer, shape.layer_tokens, shape.tracked_rows, rates, dispatch=dispatch, products=products
        )
        light = None
        if preset is not None:
            peak = cost.HARDWARE[preset].peak(
                routed_peak(v.precision, "cute-sm90", "bfloat16") or "bf16_tflops"
            )
            light = cost.speed_of_light_ms(layer, preset, dispatch=dispatch, routed_tflops=peak)
        total = None if expected is None else sum(expected.values())
        over_expected = None if total is None else f"{measured / total:.2f}"
        over_light = None if light is None else f"{measured / light:.2f}"
        rows.append([r["name"], f"{measured:.2f}", _two(total), over_expected, _two(light), over_light])
    head = ["execution", "measured ms", "expected ms (measured rates)", "measured / expected"]
    return table([*head, "speed of light ms", "measured / speed of light"], rows)


def pairs(found: Sequence[Record]) -> str:
    """The matched pairs the pipeline stage published: MoK's iteration over Dist-MoE's, with the
    speedup's interval, on how many ranks of which device."""
    lines = [r for r in found if r.get("stage") == "pipeline" and r.get("name") == "pair"]
    rows = [
        [r["workload_id"], r["mok_execution_id"], r["dist_execution_id"], f"{r['ranks']} x {r['device']}",
         _two(r["mokIterationMS"]), _two(r["distIterationMS"]),
         f"{r['speedup']:.3f} {_interval(r['speedupLow'], r['speedupHigh'])}"]
        for r in lines
    ]  # fmt: skip
    head = ["workload", "MoK", "Dist-MoE", "ranks", "MoK ms", "Dist-MoE ms"]
    return table([*head, "speedup: MoK ms / Dist-MoE ms [95%]"], rows)


def _interval(low: float | None, high: float | None) -> str:
    return "[no interval]" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def elementwise(found: Sequence[Record]) -> str:
    """The elementwise kernels' timings, per output form: median ms, GB/s, the fraction of the
    bandwidth probe (a copy of the same bytes), and the speed over the torch form."""
    rows = []
    for r in found:
        if r.get("stage") != "timing" or r.get("key") not in ELEMENTWISE or not r.get("ms"):
            continue
        probe = r.get("frac_of_copy") or r.get("frac_of_hbm") or {}
        size = f"{r['rows']} x {r.get('k', r.get('f'))}"
        for form, over_torch in r.get("speedup_vs_torch_form", {}).items():
            median, rate = r["ms"][form]["median"], r["gb_per_s"][form]
            rows.append([r["name"], size, form, f"{median:.4f}", f"{rate:.1f}", f"{probe.get(form, 0.0):.3f}",
                         f"{over_torch:.2f}", r["status"]])  # fmt: skip
    head = ["kernel", "rows x columns", "form", "median ms", "GB/s", "of the copy probe"]
    return table([*head, "x the torch form", "result"], rows)


def loopback(found: Sequence[Record]) -> str:
    """The exchange's collectives on one rank (NCCL loopback on a GPU): replayed graphs against the
    eager steps, the exchange against the rank alone."""
    rows = []
    for r in found:
        if r.get("stage") != "loopback" or "replay_error" not in r:
            continue
        replay = [v for v in (r["replay_error"] or {}).values() if v is not None]
        eager = (r.get("collectives_eager") or {}).get("alltoall_base_")
        worst = _g(max(replay)) if replay else None
        graphs, error = str(r["graphs"]).lower(), _g(r["loopback_error"])
        rows.append([r["name"], r["collective"], graphs, eager, error, worst, _g(r["tolerance"]), r["status"],
                     r.get("reason")])  # fmt: skip
    head = ["case", "collective", "graphs", "eager all-to-alls", "loopback error", "replay error (max)"]
    return table([*head, "tolerance", "result", "note"], rows)


def _g(value: float | None) -> str | None:
    return None if value is None else f"{value:.3g}"


def ranks(found: Sequence[Record]) -> str:
    """Several ranks sharing the device: rows routed across ranks through each execution's gate."""
    rows = [
        [r["name"], r["ranks"], f"{r['crossed_rows']} of {r['slice_rows']}", _g(r["max_error"]),
         _g(r["tolerance"]), _two(r.get("peak_gib_per_rank")), r["status"]]
        for r in found
        if r.get("stage") == "ranks" and "slice_rows" in r
    ]  # fmt: skip
    head = ["execution", "ranks", "rows that crossed ranks", "gate error", "tolerance", "peak GiB per rank"]
    return table([*head, "result"], rows)


def packing(found: Sequence[Record]) -> str:
    """The packing execution's measured peak beside its fake-tensor estimate (from the pack)."""
    rows = []
    for r in found:
        if r.get("stage") != "packing" or r.get("name") != "peak":
            continue
        estimate = f"{_two(r['estimated_peak_gib'])} ({r['estimate_preset']})"
        ratio = r.get("measured_over_estimate")
        ratio_cell = None if ratio is None else f"{ratio:.3f}"
        rows.append(
            [r["execution"], _two(r.get("peak_allocated_gib")), estimate, ratio_cell, r.get("reason")]
        )
    return table(
        ["execution", "peak allocated GiB", "estimate GiB (preset)", "measured / estimate", "note"], rows
    )


def costs(found: Sequence[Record]) -> str:
    """What each stage's grouped job cost: its wall time over its rank-0 windows, and its compiles."""
    lines = [r for r in found if r.get("name") == "cost"]
    rows = [
        [r["stage"], r["executions"], _two(r["multirun_s"]), _two(r["windows_s"]), _two(r["over_windows"]),
         r["compiles"], r["loads"]]
        for r in lines
    ]  # fmt: skip
    return table(
        ["stage", "executions", "job s", "windows s", "job / windows", "compiles", "kernels loaded"], rows
    )


def _full_scale() -> dict[str, Any]:
    import yaml

    config: dict[str, Any] = yaml.safe_load((ROOT / "conf" / "scale" / "full.yaml").read_text())
    return config


TABLES: dict[str, Callable[[Sequence[Record]], str]] = {
    "steps": steps,
    "kernels-default": kernels_default,
    "kernels-best": kernels_best,
    "swiglu": swiglu,
    "pipeline": pipeline,
    "phases": phases,
    "accounts": accounts,
    "expectation": expectation,
    "pairs": pairs,
    "elementwise": elementwise,
    "loopback": loopback,
    "ranks": ranks,
    "packing": packing,
    "costs": costs,
}


def regenerated(document: str, found: Sequence[Record]) -> str:
    """``document`` with every marked table made again from ``found``."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in TABLES:
            raise ValueError(f"unknown table {name!r}; known: {', '.join(TABLES)}")
        return match.group(1) + TABLES[name](found) + match.group(4)

    return MARK.sub(fill, document)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate a GPU run document's tables from its records.")
    parser.add_argument(
        "document", type=Path, help="docs/gpu-runs/<run>.md (its records in docs/gpu-runs/<run>/)"
    )
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 where a table differs")
    args = parser.parse_args(argv)
    try:
        text = args.document.read_text()
        again = regenerated(text, records(args.document.with_suffix("")))
    except (OSError, ValueError) as err:
        print(f"gpu_records: {err}", file=sys.stderr)
        return 2
    if args.check:
        if again != text:
            print(f"gpu_records: {args.document}'s tables differ from its records", file=sys.stderr)
            return 1
        return 0
    if again != text:
        args.document.write_text(again)
    print(f"{args.document}: {len(MARK.findall(again))} tables from its records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
