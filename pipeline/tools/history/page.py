"""``history.html``: the history as one self-contained page (the report's HTML writer: inline CSS,
figures as PNG data URIs, no scripts)."""

from __future__ import annotations

from typing import Any

from pipeline.report import html
from pipeline.report.figures import png
from pipeline.tools.compare.side import METRICS
from pipeline.tools.history.plot import series_figure
from pipeline.tools.history.series import INCONCLUSIVE


def page_html(document: dict[str, Any]) -> str:
    counts = document["counts"]
    datasets = len(document["datasets"])
    stepped = [e for e in document["series"] if e["steps"]]
    summary = (
        f"{counts['series']} series over {datasets} datasets: {counts['steps']} steps "
        f"({counts['slower']} slower, {counts['faster']} faster, {counts[INCONCLUSIVE]} inconclusive); "
        f"{counts['points_differing']} points measured under other conditions than their series' usual ones. "
        + (
            f"Ends on a slower step: {', '.join(document['open_slower'])}."
            if document["open_slower"]
            else "No series ends on a slower step."
        )
    )
    changes = [
        html.paragraph(
            f"Settings change at D{c['at']} ({c['change']}): every series is split there, and no step is "
            "judged across it.",
            "note",
        )
        for c in document["settings_changes"]
    ]
    parts = [
        html.paragraph(summary),
        *changes,
        html.paragraph(f"Steps: {document['method']} Promise: {document['promise']}.", "note"),
        html.paragraph(
            f"Measuring conditions differ when: {document['conditions_bounds']}. Such points are drawn as "
            "hollow orange diamonds and left out of the search for steps.",
            "note",
        ),
        _datasets(document),
        _steps(stepped),
    ]
    if stepped:
        title = "series with a step (dashed: red slower, green faster, orange inconclusive)"
        figure = series_figure(stepped, datasets, title + "; hollow orange: measured under other conditions")
        parts.append(html.section("Series with a step", html.image(png(figure), "series with a step")))
    for metric in METRICS:
        mine = [e for e in document["series"] if e["metric"] == metric]
        if mine:
            figure = series_figure(mine, datasets, f"{metric}: every execution over the datasets (ms)")
            parts.append(html.section(f"All series: {metric}", html.image(png(figure), f"{metric} series")))
    parts.append(_points(document))
    return html.page("History: each execution's times across datasets", parts)


def _datasets(document: dict[str, Any]) -> str:
    columns = ["", "dataset", "measured from", "to", "executions", "schema", "git sha", "versions", "hosts"]
    rows: list[list[html.Cell]] = []
    for d in document["datasets"]:
        described = d["described"]
        shown = [k for k in ("python", "torch", "cuda", "cutlass_dsl") if k in described]
        versions = "; ".join(f"{k} {_values(described[k])}" for k in shown)
        rows.append(
            [
                f"D{d['index']}",
                d["dataset"],
                str(d["measured"][0]),
                str(d["measured"][1]),
                str(d["executions"]),
                " ".join(map(str, d["schema_versions"])),
                _values({sha[:12]: n for sha, n in described.get("git_sha", {}).items()}),
                versions,
                _values(described.get("hosts", {})),
            ]
        )
    parts = [html.table(columns, rows, numeric=["executions"])]
    for d in document["datasets"]:
        for skipped in d["skipped"]:
            parts.append(html.paragraph(f"Skipped in D{d['index']}: {skipped['path']}: {skipped['reason']}"))
    return html.section("The datasets, oldest first", *parts)


def _steps(stepped: list[dict[str, Any]]) -> str:
    columns = ["change", "execution", "metric", "at", "before ms", "after ms", "ratio", "low", "high"]
    columns.append("p adjusted")
    rows: list[list[html.Cell]] = [
        [
            (s["change"], s["change"]),
            e["execution_id"],
            e["metric"],
            f"D{s['at']}",
            html.number(s["before_ms"], 4),
            html.number(s["after_ms"], 4),
            html.number(s["ratio"], 4),
            html.number(s["low"], 4),
            html.number(s["high"], 4),
            html.number(s["p_adjusted"], 2),
        ]
        for e in stepped
        for s in e["steps"]
    ]
    if not rows:
        return html.section("Steps", html.paragraph("None."))
    notes = [
        html.paragraph(f"{e['execution_id']} {e['metric']} at D{s['at']}: {s['conditions']}", "note")
        for e in stepped
        for s in e["steps"]
        if s["conditions"]
    ]
    return html.section("Steps", html.table(columns, rows, numeric=columns[4:]), *notes)


def _points(document: dict[str, Any]) -> str:
    """Every point: its time and interval, how its conditions differ from its series' usual ones,
    and what ran it (git sha, versions, hosts, when)."""
    columns = ["execution", "metric", "", "ms", "low", "high", "conditions differ", "git sha", "versions"]
    columns += ["hosts", "started"]
    rows: list[list[html.Cell]] = []
    for e in document["series"]:
        for p in e["points"]:
            ran = p["ran"] or {}
            versions = ran.get("versions") or {}
            rows.append(
                [
                    e["execution_id"],
                    e["metric"],
                    f"D{p['dataset']}",
                    *(html.number(p[k], 4) for k in ("ms", "low", "high")),
                    (p["differs"] or "", INCONCLUSIVE if p["differs"] else ""),
                    str(ran.get("git_sha") or "unknown")[:12],
                    " ".join(f"{k} {v}" for k, v in versions.items() if v is not None),
                    " ".join(ran.get("hosts") or ()),
                    str(ran.get("started_at") or ""),
                ]
            )
    return html.section(
        "Every point",
        html.paragraph(
            "The conditions column names how a point's measuring conditions differ from its series' usual "
            "ones (such a point is left out of the search for steps).",
            "note",
        ),
        html.table(columns, rows, numeric=["ms", "low", "high"]),
    )


def _values(values: dict[str, int]) -> str:
    return "; ".join(f"{value} ({n})" for value, n in values.items())
