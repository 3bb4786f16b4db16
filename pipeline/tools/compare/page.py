"""``comparison.html``: a comparison as one self-contained page (the report's HTML writer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.data.atomic import atomic_write
from pipeline.report import html
from pipeline.report.figures import png
from pipeline.report.provenance import SETTINGS
from pipeline.tools.compare.comparison import INCONCLUSIVE, bounds_text, conditions_text
from pipeline.tools.compare.plot import ratio_figure

PAGE_NAME = "comparison.html"


def write_page(out: Path, document: dict[str, Any]) -> Path:
    """Write ``comparison.html`` into ``out`` (created if needed); return its path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / PAGE_NAME
    atomic_write(path, page_html(document))
    return path


def page_html(document: dict[str, Any]) -> str:
    counts = document["counts"]
    summary = (
        f"{counts['slower']} slower, {counts['faster']} faster, {counts['unchanged']} unchanged, "
        f"{counts[INCONCLUSIVE]} inconclusive (measured under differing conditions) of "
        f"{len(document['times'])} times (threshold {100 * document['threshold']:g}%, "
        f"{100 * document['confidence']:g}% intervals); speedups: {counts['speedup_higher']} higher, "
        f"{counts['speedup_lower']} lower of {len(document['speedups'])}; "
        f"{counts['selections_flipped']} of {counts['selections']} selections flipped."
    )
    return html.page(
        "Comparison: NEW against BASE",
        [
            html.paragraph(summary),
            html.paragraph(bounds_text(document) + "."),
            _datasets(document),
            _conditions(document),
            html.section(
                "Time ratios",
                html.paragraph(f"Method: {document['method']}.", "note"),
                html.image(png(ratio_figure(document)), "time ratio per execution with intervals"),
                _noise(document["noise"]),
            ),
            _times("Changed times", [t for t in document["times"] if t["change"] != "unchanged"]),
            _speedups(document["speedups"]),
            _selections(document["selections"]),
            _times("All times", document["times"]),
        ],
    )


def _datasets(document: dict[str, Any]) -> str:
    base, new = document["base"], document["new"]
    differ = {d["setting"] for d in document["settings_differ"]}
    rows: list[list[html.Cell]] = [["dataset", base["dataset"], new["dataset"]]]
    rows.append(["executions", str(base["executions"]), str(new["executions"])])
    for field in base["described"]:
        css = "flipped" if field in differ else ""
        cells = [_values(side["described"][field]) for side in (base, new)]
        rows.append([(field, css), (cells[0], css), (cells[1], css)])
    parts = [
        html.paragraph(
            "Settings that must agree for times to compare: "
            + ", ".join(SETTINGS)
            + ". "
            + (f"These differ: {', '.join(sorted(differ))}." if differ else "They agree.")
        ),
        html.table(["", "BASE", "NEW"], rows),
    ]
    for side in ("base", "new"):
        only = document[f"only_in_{side}"]
        if only:
            parts.append(html.paragraph(f"Only in {side.upper()} ({len(only)}): {' '.join(only)}"))
        for skipped in document[side]["skipped"]:
            parts.append(html.paragraph(f"Skipped in {side.upper()}: {skipped['path']}: {skipped['reason']}"))
    history = document["history"]
    if history:
        parts.append(
            html.paragraph(
                f"History ({len(history)}, earlier runs beside BASE: each time's own run-to-run noise): "
                + " ".join(h["dataset"] for h in history)
            )
        )
    return html.section("The two datasets", *parts)


def _noise(strata: list[dict[str, Any]]) -> str:
    columns = ["stratum", "times", "run-to-run sigma", "its df", "window dependence BASE", "NEW"]
    history = any(s["run_prior"] is not None for s in strata)
    if history:
        columns += ["history: prior per-run sigma", "its df"]
    rows: list[list[html.Cell]] = [
        [
            s["stratum"],
            str(s["ratios"]),
            html.number(s["between_sigma"], 3),
            html.number(s["between_df"], 3),
            *(html.number(r, 2) for r in s["dependence"]),
            *(
                [
                    html.number(None if s["run_prior"] is None else s["run_prior"][k], 3)
                    for k in ("sigma", "df")
                ]
                if history
                else []
            ),
        ]
        for s in strata
    ]
    return html.table(columns, rows, numeric=columns[1:])


def _times(heading: str, times: list[dict[str, Any]]) -> str:
    columns = [
        "change",
        "execution",
        "metric",
        "BASE ms",
        "NEW ms",
        "ratio",
        "low",
        "high",
        "sigma",
        "p adjusted",
        "bound",
    ]
    clocks = any(t.get("clock_ratio") is not None for t in times)
    if clocks:
        columns += ["NEW SM clock / BASE", "ratio at equal clocks"]
    columns.append("conditions")
    order = {"slower": 0, "faster": 1, INCONCLUSIVE: 2, "unchanged": 3}
    rows: list[list[html.Cell]] = [
        [
            (t["change"], t["change"]),
            t["execution_id"],
            t["metric"],
            *_numbers(t, 4),
            html.number(t["sigma"], 3),
            html.number(t["p_adjusted"], 2),
            html.number(t["bound"], 4),
            *([html.number(t["clock_ratio"], 4), html.number(t["normalized_ratio"], 4)] if clocks else []),
            f"measured {t['measured']}: {t['conditions']}" if t["conditions"] else "",
        ]
        for t in sorted(times, key=lambda t: (order[t["change"]], t["execution_id"], t["metric"]))
    ]
    if not rows:
        return html.section(heading, html.paragraph("None."))
    return html.section(heading, html.table(columns, rows, numeric=columns[3:-1]))


def _conditions(document: dict[str, Any]) -> str:
    """Each execution's measuring conditions on both sides (SM clocks where a side recorded any)."""
    c = document["conditions"]
    executions = c["executions"]
    clocks = any((e[side] or {}).get("sm_clock_mhz") for e in executions.values() for side in ("base", "new"))
    columns = ["execution", "BASE cpu wait", "NEW cpu wait"]
    columns += ["BASE SM MHz", "NEW SM MHz"] if clocks else []
    columns.append("differ")
    rows: list[list[html.Cell]] = []
    for execution_id, e in executions.items():
        base, new = e["base"] or {}, e["new"] or {}
        sm = [html.number(side.get("sm_clock_mhz"), 4) for side in (base, new)] if clocks else []
        rows.append(
            [
                (execution_id, "flipped" if e["differ"] else ""),
                html.number(base.get("cpu_wait_share"), 2),
                html.number(new.get("cpu_wait_share"), 2),
                *sm,
                "; ".join(e["differ"]),
            ]
        )
    return html.section(
        "Measuring conditions",
        html.paragraph(conditions_text(document) + ". A time whose sides differ so is inconclusive."),
        html.table(columns, rows, numeric=columns[1:-1]),
    )


def _speedups(speedups: list[dict[str, Any]]) -> str:
    columns = [
        "change",
        "workload",
        "Dist-MoE pipeline",
        "BASE speedup",
        "NEW speedup",
        "ratio",
        "low",
        "high",
    ]
    rows: list[list[html.Cell]] = [
        [(s["change"], s["change"]), s["workload_id"], s["pipeline"], *_numbers(s, 4)] for s in speedups
    ]
    return html.section(
        "Speedups (MoK time / Dist-MoE time)",
        html.paragraph("higher: Dist-MoE gained on MoK; lower: it lost ground. Not part of the exit status."),
        html.table(columns, rows, numeric=columns[3:]) if rows else html.paragraph("No pair in both."),
    )


def _selections(selections: list[dict[str, Any]]) -> str:
    columns = ["workload", "BASE selected", "NEW selected", "NEW time ratio new/old", "low", "high", "order"]
    rows: list[list[html.Cell]] = []
    for s in selections:
        css = "flipped" if s["flipped"] else ""
        if s["flipped"]:
            tail = [html.number(s[k], 4) for k in ("ratio", "low", "high")]
            tail.append("significant" if s["significant"] else "within noise")
        else:
            tail = ["", "", "", "same"]
        rows.append([(s["workload_id"], css), (s["base"], css), (s["new"], css), *tail])
    return html.section(
        "Selected Dist-MoE pipeline",
        html.table(columns, rows, numeric=columns[3:6])
        if rows
        else html.paragraph("No workload with a choice."),
    )


def _numbers(entry: dict[str, Any], digits: int) -> list[html.Cell]:
    return [html.number(entry[k], digits) for k in ("base", "new", "ratio", "low", "high")]


def _values(values: dict[str, int]) -> str:
    return "; ".join(f"{value} ({n})" for value, n in values.items())
