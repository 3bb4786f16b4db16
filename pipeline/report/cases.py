"""What a suite that publishes ``cases`` publishes per execution (seed 003's 16): its output against
the naive token-repeat reference and its time against the speed of light.

``mok-comparison-cases.csv`` has one row per published execution: the case's tokens at full scale
and as run, its iteration time, the worst normwise error of every token its ranks fed the timed
forward against the naive formulation (the gate's ``case`` check, :mod:`pipeline.bench.naive`; empty
for a suite that checks slices only), and %SOL: the speed of light (:mod:`pipeline.cost.roofline`) of
the shape that ran, on the preset of the device that ran it, over the measured iteration (empty on a
device of no preset, such as a CPU), beside the speed of light of the case at full scale on the
dataset's preset. ``report.html`` shows the same in a section of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipeline import cost
from pipeline.base.gpu_presets import gpu_preset
from pipeline.data.estimates import preset_of
from pipeline.data.reader import Shard
from pipeline.matrix import Suite
from pipeline.report import html
from pipeline.report.executions import layer_shape
from pipeline.report.publish import Row, number, optional_number

CASES_NAME = "mok-comparison-cases.csv"
COLUMNS = (
    "execution_id",
    "workload_id",
    "kind",
    "ep",
    "ranks",
    "precision",
    "implementation",
    "pipeline",
    "tokens",
    "tokensRun",
    "iterationMS",
    "caseMaxError",
    "caseTolerance",
    "casePassed",
    "solPreset",
    "solMS",
    "solBound",
    "solPct",
    "fullScalePreset",
    "fullScaleSolMS",
    "fullScaleSolBound",
)


def case_rows(rows: Sequence[Row], shards: Mapping[str, Shard], suite: Suite) -> list[Row]:
    """One case row per execution row, in the suite's order (seed 003's: by tokens), from its shard and
    its suite's workload."""
    order = {e.execution_id: i for i, e in enumerate(suite.executions)}
    ordered = sorted(rows, key=lambda row: order[str(row["execution_id"])])
    return [_case(row, shards[str(row["execution_id"])], suite) for row in ordered]


def _case(row: Row, shard: Shard, suite: Suite) -> Row:
    ident, meta = shard.identity, shard.meta
    execution = suite.execution(ident.execution_id)
    assert execution is not None, "the scan keeps only executions of the dataset's suite"
    w = execution.workload
    ms = number(row, "iterationMS")
    device = cost.hardware_for_device(ident.device)
    run = (
        None
        if device is None
        else cost.roofline(layer_shape(ident.kind, ident.precision, meta.shape), device)
    )
    full_preset = preset_of(meta.provenance.cluster)
    full = cost.roofline(
        cost.LayerShape(
            w.kind,
            w.tokens,
            w.d_model,
            w.d_ff,
            w.num_experts,
            w.top_k,
            w.ep,
            ident.precision,
            w.layer_loads,
            w.num_shared,
        ),  # fmt: skip
        gpu_preset(full_preset),
    )
    sanity = meta.sanity
    error = None if sanity is None else sanity.errors.get("case")
    return {
        **{k: row.get(k) for k in COLUMNS[:8]},
        "tokens": w.tokens,
        "tokensRun": max(meta.shape.layer_tokens),
        "iterationMS": ms,
        "caseMaxError": error,
        "caseTolerance": None if error is None or sanity is None else sanity.tolerance,
        "casePassed": None if error is None or sanity is None else error <= sanity.tolerance,
        "solPreset": device,
        "solMS": None if run is None else run.ms,
        "solBound": None if run is None else run.bound,
        "solPct": None if run is None else 100 * run.ms / ms,
        "fullScalePreset": full_preset,
        "fullScaleSolMS": full.ms,
        "fullScaleSolBound": full.bound,
    }


def section(cases: Sequence[Row]) -> str:
    """The page's section of the cases."""
    rows: list[list[html.Cell]] = []
    for c in cases:
        error = optional_number(c, "caseMaxError")
        sol = optional_number(c, "solPct")
        rows.append(
            [
                str(c["execution_id"]),
                f"{c['tokens']:,} ({c['tokensRun']:,})",
                f"{number(c, 'iterationMS'):.3f}",
                "-" if error is None else f"{error:.2e} ({'passed' if c['casePassed'] else 'FAILED'})",
                f"no peaks for {c['solPreset'] or 'this device'}" if sol is None else f"{sol:.1f}%",
                f"{number(c, 'fullScaleSolMS'):.3f} ({c['fullScaleSolBound']}, {c['fullScalePreset']})",
            ]
        )
    return html.section(
        "Cases: output and speed of light",
        html.paragraph(
            "Each execution's output against the naive token-repeat reference (every token its ranks fed "
            "the timed forward, normwise relative error against float64, passed within the gate's "
            "tolerance), and its iteration against the speed of light: the least time its weights, tokens "
            "and routing bytes and its FLOPs take at the datasheet peaks of the device's preset (%SOL; a "
            "device of no preset, such as a CPU, has none), beside the speed of light of the case at full "
            "scale (mok-comparison-cases.csv; the suite's assumptions say what its source reached)."
        ),
        html.table(
            ["execution", "tokens (run)", "iteration ms", "output error", "%SOL", "full-scale SOL ms"], rows
        ),
    )
