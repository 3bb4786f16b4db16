"""``report.html``: the published dataset as one page a person can open from disk.

It opens with the answer: per EP and precision, how many matched workloads Dist-MoE wins, loses or
ties (a win: the whole 95% interval of MoK time / Dist-MoE time from the windows above 1), each
speedup with its interval, the headline figure and the conditions in one line (device, ranks, scale,
what was emulated). Then what ran (device, scale, provenance), the deviations and choices, how
complete the launched matrix is, the per-EP time figures, where each execution's time went (the phase
account), the pairs, every execution's times, and the saved-state evidence of the packing cases. It is
built from the aggregate's document, its figures and the shards' metadata only, and names no absolute
path, so the same shards give the same bytes wherever the dataset lives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipeline.base.gpu_presets import LINKS, PEAKS, gpu_preset, preset_for_device
from pipeline.base.implementations import candidate, reference
from pipeline.base.vocabulary import LAYER_PHASES
from pipeline.data.reader import Shard
from pipeline.matrix import REPORT, Execution, Suite
from pipeline.report import html
from pipeline.report.accounts import UNCLAIMED_COLUMN, phase_column
from pipeline.report.document import Document, Meta, PackingEvidence
from pipeline.report.executions import SOL_COLUMNS
from pipeline.report.figures import SPEEDUPS_NAME
from pipeline.report.provenance import conditions_line, describe, mixed, mixed_text, time_span
from pipeline.report.publication import MANIFEST_NAME
from pipeline.report.publish import Row, number, optional_number

REPORT_NAME = "report.html"
TITLE = "MoK vs Dist-MoE: expert-parallel MoE layer benchmark"


def report_html(
    document: Document,
    shards: Mapping[str, Shard],
    pngs: Mapping[str, bytes],
    suite: Suite = REPORT,
    sections: Sequence[str] = (),
) -> str:
    """The page's text; ``pngs`` maps figure file names to their bytes; ``suite`` is the dataset's,
    whose pairs (where it publishes them) and ``sections`` of its own the page shows."""
    published = [shards[str(r["execution_id"])] for r in document.executions]
    saved = {name: data for name, data in pngs.items() if "saved-state" in name}
    accounts = {name: data for name, data in pngs.items() if "-phases-" in name}
    times = {
        name: data
        for name, data in pngs.items()
        if name not in saved and name not in accounts and name != SPEEDUPS_NAME
    }  # in EP order
    paired = "pairs" in suite.publishes  # else the suite's own sections (its cases) are the answer
    return html.page(
        TITLE,
        [
            *([_answer(document, published, pngs.get(SPEEDUPS_NAME))] if paired else sections),
            _what_ran(document.meta, published),
            _deviations(document.meta),
            _assumptions(document.meta),
            _completeness(document.meta, document.executions, suite),
            *([_time_figures(times)] if paired else []),
            _accounts(document.executions, accounts, document.meta.kernel_rates),
            *([_pairs(document.pairs), *sections] if paired else []),
            _executions(document.executions),
            _saved_state(document.saved_state, saved),
        ],
    )


def _time_figures(times: Mapping[str, bytes]) -> str:
    """The time figures per EP degree, of a suite that publishes pairs."""
    return html.section(
        "Iteration time per EP degree",
        html.paragraph(
            "MoK against the selected (fastest) Dist-MoE pipeline of each matched workload; "
            "the number above each pair is MoK time / Dist-MoE time (above 1: Dist-MoE faster)."
        ),
        *(html.image(data, f"figure {name}") for name, data in times.items()),
    )


# A matched workload's outcome from its speedup's interval (MoK time / Dist-MoE time).
WIN, LOSS, TIE = "Dist-MoE faster", "Dist-MoE slower", "tie"


def outcome(pair: Row) -> str:
    """Win where the whole interval lies above 1, loss where below, else (or without one) a tie."""
    low, high = optional_number(pair, "speedupLow"), optional_number(pair, "speedupHigh")
    if low is not None and low > 1:
        return WIN
    if high is not None and high < 1:
        return LOSS
    return TIE


def _answer(document: Document, shards: list[Shard], figure: bytes | None) -> str:
    """The answer first: the conditions, the counts per EP and precision, each speedup, the figure."""
    chosen = [p for p in document.pairs if p["selected"]]
    cand, ref = candidate().label, reference().label
    if not chosen:
        return html.section(
            "The answer",
            html.paragraph(f"No matched workload has both a {ref} and a {cand} execution published yet."),
            html.paragraph(conditions_line(shards)),
        )
    by_id = {str(r["execution_id"]): r for r in document.executions}
    groups: dict[tuple[int, str], list[Row]] = {}
    for pair in chosen:
        row = by_id[str(pair["dist_execution_id"])]
        groups.setdefault((int(number(row, "ep")), str(row["precision"])), []).append(pair)
    counts = [outcome(p) for p in chosen]
    summary: list[list[html.Cell]] = []
    for (ep, precision), mine in sorted(groups.items()):
        found = [outcome(p) for p in mine]
        speedups = sorted(number(p, "speedup") for p in mine)
        summary.append(
            [
                f"EP{ep}",
                precision.upper(),
                str(len(mine)),
                (str(found.count(WIN)), "higher" if found.count(WIN) else ""),
                (str(found.count(LOSS)), "lower" if found.count(LOSS) else ""),
                str(found.count(TIE)),
                f"{speedups[0]:.3g}-{speedups[-1]:.3g}" if len(speedups) > 1 else f"{speedups[0]:.3g}",
            ]
        )
    each: list[list[html.Cell]] = []
    for (ep, precision), mine in sorted(groups.items()):
        for p in mine:
            low, high = optional_number(p, "speedupLow"), optional_number(p, "speedupHigh")
            interval = (
                "no interval (too few windows)" if low is None or high is None else f"[{low:.3g}, {high:.3g}]"
            )
            verdict = outcome(p)
            css = "higher" if verdict == WIN else "lower" if verdict == LOSS else ""
            each.append(
                [f"EP{ep}", precision.upper(), str(p["workload_id"]), str(p["pipeline"]),
                 (html.number(number(p, "speedup"), 3), css), interval, (verdict, css)]
            )  # fmt: skip
    columns = ["EP", "precision", "matched workloads", f"{cand} faster", f"{cand} slower", "ties", "speedups"]
    parts = [
        html.paragraph(conditions_line(shards)),
        html.paragraph(
            f"Of {len(chosen)} matched workloads, {cand} is faster in {counts.count(WIN)}, slower in "
            f"{counts.count(LOSS)} and ties in {counts.count(TIE)}: speedup = {ref} time / {cand} time "
            f"of the workload's fastest {cand} pipeline, faster or slower where its whole 95% interval "
            "(the Hodges-Lehmann interval of the two slowest ranks' window times, as pipeline.compare "
            "states a ratio) lies above or below 1."
        ),
        html.table(columns, summary, numeric=columns[2:6]),
    ]
    if figure is not None:
        parts.append(html.image(figure, f"figure {SPEEDUPS_NAME}"))
    speedup_columns = [
        "EP",
        "precision",
        "matched workload",
        f"{cand} pipeline",
        "speedup",
        "95% interval",
        "outcome",
    ]
    parts.append(html.table(speedup_columns, each, numeric=["speedup"]))
    return html.section("The answer", *parts)


def _accounts(rows: Sequence[Row], pngs: Mapping[str, bytes], rates: str | None) -> str:
    """Where each execution's time went: the phase-account figures and a table of the phases."""
    accounted = [r for r in rows if r.get("profiledMS") is not None]
    if not accounted:
        return html.section(
            "Where the time went", html.paragraph("No execution recorded a phase account (older shards).")
        )
    names = [*(phase_column(p, "MS") for p in LAYER_PHASES), UNCLAIMED_COLUMN]
    columns = [
        "execution",
        "profiled ms",
        "timed ms",
        *(n.removeprefix("phase").removesuffix("MS") for n in names),
    ]
    columns += ["speed of light ms", "expected ms"]
    body: list[list[html.Cell]] = [
        [
            str(r["execution_id"]),
            html.number(number(r, "profiledMS")),
            html.number(number(r, "iterationMS")),
            *(html.number(optional_number(r, n), 3) for n in names),
            html.number(optional_number(r, "speedOfLightMS")),
            html.number(optional_number(r, "expectedMS")),
        ]
        for r in accounted
    ]
    source = "none: the dataset carries no measured kernel rates" if rates is None else rates
    return html.section(
        "Where the time went",
        html.paragraph(
            "Each execution's slowest rank replayed a few iterations under the profiler after its timing "
            "windows; the time of the median one is divided among the layer's phases (the routed GEMMs by "
            "op, the shared expert, the dispatch's and the combine's communication, MXFP8 quantization, "
            "the SwiGLU, gathers and scatters of rows, the rest of the layer) and what no phase claims; "
            "they add up to the profiled iteration, shown beside the timed one. Communication that did "
            "not run is empty. Speed of light: the layer at the preset's datasheet peaks; expected: its "
            f"cost at the kernel rates measured on the device ({source})."
        ),
        *(html.image(data, f"figure {name}") for name, data in pngs.items()),
        html.table(columns, body, numeric=columns[1:]),
    )


def _what_ran(meta: Meta, shards: list[Shard]) -> str:
    counts = meta.counts
    rows: list[list[html.Cell]] = [
        [field, "; ".join(f"{value} ({n})" for value, n in values.items())]
        for field, values in describe(shards).items()
    ]
    span = time_span(shards)
    if span is not None:
        rows.append(["ran", f"{span[0]} to {span[1]}"])
    return html.section(
        "What ran",
        html.paragraph(
            f"{counts.executions} executions, {counts.matched_workloads} matched workloads, "
            f"{counts.pairs} pairs (schema version {meta.schema_version}). Each value "
            "below is followed by the number of executions that recorded it."
        ),
        html.paragraph(
            f"This page, its figures, the CSV and JSON files beside it are one publication: {MANIFEST_NAME} "
            f"lists each with its SHA-256, and 'sha256sum -c {MANIFEST_NAME}' in their folder checks them.",
            "note",
        ),
        *_mixed(shards),
        html.table(["field", "values (executions)"], rows),
    )


def _mixed(shards: list[Shard]) -> list[str]:
    """A warning when the published executions were run with different comparable settings."""
    differ = mixed(shards)
    if not differ:
        return []
    return [
        html.paragraph(
            f"Warning: these executions differ in settings, so their times do not pair: {mixed_text(differ)}."
        )
    ]


def _deviations(meta: Meta) -> str:
    if not meta.deviations:
        return html.section(
            "Deviations from the report", html.paragraph("None: every execution ran as the report measured.")
        )
    rows: list[list[html.Cell]] = [
        [d.what, d.report, (d.ran, "missing"), d.effect, str(len(d.executions))] for d in meta.deviations
    ]
    return html.section(
        "Deviations from the report",
        html.paragraph(
            "Where what ran differs from what the report measured, from what each shard recorded "
            "(meta.deviations of the JSON lists the executions of each)."
        ),
        html.table(["what", "the report", "ran here (executions)", "what it means", "executions"], rows),
    )


def _assumptions(meta: Meta) -> str:
    rows: list[list[html.Cell]] = [[a.what, a.choice, str(len(a.executions))] for a in meta.assumptions]
    return html.section(
        "Choices the report does not state",
        html.paragraph(
            "The matrix's own choices (meta.assumptions of the JSON lists the executions of each)."
        ),
        html.table(["what", "this dataset's choice", "executions"], rows),
    )


def _completeness(meta: Meta, rows: Sequence[Row], suite: Suite) -> str:
    done = {r["execution_id"] for r in rows}
    missing = set(meta.missing.launched_without_shard)
    launched = meta.launched
    grid: list[list[html.Cell]] = []
    for workload in suite.workloads:
        cells: list[html.Cell] = [workload.name]
        for variant in suite.variants:
            execution_id = Execution(workload, variant).execution_id
            if execution_id in done:
                cells.append(("done", "done"))
            elif execution_id in missing:
                cells.append(("missing", "missing"))
            else:
                cells.append(("not launched", "absent"))
        grid.append(cells)
    skipped: list[list[html.Cell]] = [[s.path, s.reason] for s in meta.shards_skipped]
    parts = [
        html.paragraph(
            f"{len(done)} executions published; {launched.executions} launched in the matrix (from the "
            f"{launched.source}), {len(missing)} of them without a usable shard; the matrix lacks "
            f"{len(meta.missing.matrix)} of its {meta.matrix.executions} executions; "
            f"{len(meta.shards_read)} shard file(s) read, {len(skipped)} skipped."
        ),
        html.table(["workload", *(v.name for v in suite.variants)], grid),
    ]
    if skipped:
        parts.append(html.table(["skipped shard", "reason"], skipped))
    if launched.not_in_matrix:
        parts.append(html.paragraph(f"launched but not in the matrix: {' '.join(launched.not_in_matrix)}"))
    return html.section("Completeness of the matrix", *parts)


def _pairs(pairs: Sequence[Row]) -> str:
    columns = [
        "workload",
        "Dist-MoE pipeline",
        "MoK ms",
        "Dist-MoE ms",
        "speedup",
        "selected",
        "forward ratio",
    ]
    columns.append("backward ratio")
    rows: list[list[html.Cell]] = [
        [
            str(p["workload_id"]),
            str(p["pipeline"]),
            html.number(number(p, "mokIterationMS")),
            html.number(number(p, "distIterationMS")),
            (html.number(number(p, "speedup"), 3), "higher" if number(p, "speedup") > 1 else ""),
            ("selected", "done") if p["selected"] else "",
            html.number(optional_number(p, "forwardMSRatio"), 3),
            html.number(optional_number(p, "backwardMSRatio"), 3),
        ]
        for p in pairs
    ]
    return html.section(
        "Pairs",
        html.paragraph(
            "speedup = MoK iteration time / Dist-MoE iteration time (slowest GPU); forward and backward "
            "ratios are Dist-MoE / MoK. The selected pipeline is the fastest Dist-MoE one of its workload."
        ),
        html.table(columns, rows, numeric=columns[2:5] + columns[6:]),
    )


def _executions(rows: Sequence[Row]) -> str:
    columns = ["execution", "ranks", "iteration ms", "forward ms", "backward ms", "useful TFLOP/s per GPU"]
    columns += ["useful %SOL", "HBM model %SOL", "NVLink tx %SOL", "NVLink rx %SOL"]
    columns += ["device", "attempt", "host"]
    body: list[list[html.Cell]] = [
        [
            str(r["execution_id"]),
            str(r["ranks"]),
            html.number(number(r, "iterationMS")),
            html.number(optional_number(r, "forwardMS")),
            html.number(optional_number(r, "backwardMS")),
            html.number(optional_number(r, "usefulTFLOPsPerGPU")),
            *(html.number(optional_number(r, c), 3) for c in SOL_COLUMNS),
            str(r["device"]),
            str(r["attempt"]),
            _host(r),
        ]
        for r in rows
    ]
    return html.section(
        "Executions",
        html.paragraph(
            "Times are the slowest rank's median over its timing windows, per iteration; host: the share of "
            "its runnable time the most denied rank waited for a core while it was timed, marked where "
            "the host was oversubscribed. %SOL: each rate as a percentage of its peak on the device's "
            "preset (useful TFLOP/s over the dense tensor peak of the product that ran: MXFP8 at the FP8 one "
            "where it ran natively, at the BF16 one where it was emulated on BF16 tensor cores; the "
            "HBM model's TB/s over the HBM peak; NVLink GB/s over the per-direction link peak), empty where "
            "no preset is the device."
        ),
        html.table(columns, body, numeric=columns[1:10]),
        *_peaks(rows),
    )


def _peaks(rows: Sequence[Row]) -> list[str]:
    """The peaks behind the %SOL columns and the links behind the speed of light's all-to-all (GPUs per
    node, NVLink domain, inter-node GB/s), with the source of each figure, for the presets that are a
    published device."""
    names = sorted({p for r in rows if (p := preset_for_device(str(r["device"]))) is not None})
    table: list[list[html.Cell]] = [
        [name, figure, f"{peak.value:g} {units[figure].removeprefix('whole number of ')}", peak.source]
        for name in names
        for figures, units in ((gpu_preset(name).peaks, PEAKS), (gpu_preset(name).links, LINKS))
        for figure, peak in figures.items()
    ]
    if not table:
        return []
    return [
        html.paragraph(
            "The peaks behind %SOL and the links behind the speed of light's all-to-all (GPUs per node, "
            "NVLink domain, inter-node bandwidth per GPU: the rows that leave a domain take it) "
            "(conf/cluster/<preset>.yaml), each with its source.",
            "note",
        ),
        html.table(["preset", "figure", "value", "source"], table),
    ]


def _host(row: Row) -> html.Cell:
    share = optional_number(row, "cpuWaitShare")
    text = "unknown" if share is None else f"{share:.0%} waiting"
    return (f"{text}, oversubscribed", "missing") if row["oversubscribed"] else text


def _saved_state(states: Sequence[PackingEvidence], pngs: Mapping[str, bytes]) -> str:
    if not states:
        return html.section("Saved state of the packing cases", html.paragraph("No packing execution ran."))
    columns = [
        "case",
        "execution",
        "budget / (T x K)",
        "layers recomputing",
        "recomputed rows",
        "capacity flags",
    ]
    rows: list[list[html.Cell]] = []
    for s in sorted(states, key=lambda s: (s.ep, s.precision, s.profile, s.execution_id)):
        layers, unit = s.layers, s.balanced_rows
        recomputing = [str(x.layer) for x in layers if x.recomputed_rows > 0]
        rows.append(
            [
                f"EP{s.ep} {s.precision} profile {s.profile}",
                s.execution_id,
                html.number(max(x.budget_rows for x in layers) / unit, 3),
                " ".join(recomputing) or "none",
                str(sum(x.recomputed_rows for x in layers)),
                "none (MoK has none)" if s.capacity_flags is None else str(s.capacity_flags),
            ]
        )
    return html.section(
        "Saved state of the packing cases",
        html.paragraph(
            "Per packing execution, as its shard recorded it: MoK's budget is per layer (rows past it are "
            "recomputed in backward), Dist-MoE's one slot is shared by all ten layers (the column is its "
            "per-layer share) and raises a capacity flag when it overflows; T x K is a layer's routed rows "
            "on the tracked GPU at load 1."
        ),
        *(html.image(data, f"figure {name}") for name, data in pngs.items()),
        html.table(columns, rows, numeric=columns[2:3] + columns[4:5]),
    )
