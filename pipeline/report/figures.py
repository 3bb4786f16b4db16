"""Published figures: iteration time per EP (MoK vs the selected Dist-MoE pipeline) and saved state.

Figures are built on ``matplotlib.figure.Figure`` (Agg, no pyplot global state) and saved without a
software stamp, so the same rows give the same PNG bytes.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from pipeline.matrix import WORKLOADS
from pipeline.report.publish import write_atomic
from pipeline.vocabulary import KINDS, PRECISIONS

MOK_COLOR, DIST_COLOR = "#7f7f7f", "#1f77b4"
MOK_BUDGET, DIST_TEXT = "black", "#0b3d66"
PALE = 0.35  # opacity of recomputed rows (hatching renders too slowly)
PNG_METADATA = {"Software": None}
_MATRIX_ORDER = {w.name: i for i, w in enumerate(WORKLOADS)}


def write_figures(
    out: Path, rows: list[dict[str, Any]], pairs: list[dict[str, Any]], states: list[dict[str, Any]]
) -> list[Path]:
    """Write one time figure per EP and the saved-state figure; return the paths written."""
    written = []
    for ep in sorted({r["ep"] for r in rows}):
        path = Path(out) / f"mok-comparison-ep{ep}.png"
        write_atomic(path, _png(time_figure(ep, rows, pairs)))
        written.append(path)
    if states:
        path = Path(out) / "mok-comparison-saved-state.png"
        write_atomic(path, _png(saved_state_figure(states, pairs)))
        written.append(path)
    return written


def time_figure(ep: int, rows: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> Figure:
    """Iteration-ms columns of MoK and the selected Dist-MoE pipeline per shape, speedup above each
    pair; BF16 and MXFP8 panels share the time axis."""
    by_id = {r["execution_id"]: r for r in rows}
    selected = {p["workload_id"]: p for p in pairs if p["selected"]}
    mine = [r for r in rows if r["ep"] == ep]
    shapes = sorted({_shape(r) for r in mine}, key=_shape_order)
    fig = Figure(figsize=(max(6.0, 1.3 * len(shapes) * 2), 4.8), layout="constrained")
    axes = fig.subplots(1, len(PRECISIONS), sharey=True, squeeze=False)[0]
    width = 0.38
    for ax, precision in zip(axes, PRECISIONS, strict=True):
        for x, (_, shape) in enumerate(shapes):
            workload = f"{shape}-{precision}"
            mok = next(
                (r for r in mine if r["workload_id"] == workload and r["implementation"] == "mok"), None
            )
            if mok is not None:
                ax.bar(x - width / 2, mok["iterationMS"], width, color=MOK_COLOR)
            pair = selected.get(workload)
            if pair is None:
                continue
            dist = by_id[pair["dist_execution_id"]]
            ax.bar(x + width / 2, dist["iterationMS"], width, color=DIST_COLOR)
            top = max(dist["iterationMS"], pair["mokIterationMS"])
            ax.annotate(
                f"{pair['speedup']:.2f}x\n{pair['pipeline']}",
                (x, top),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
            )
        ax.set_title(f"EP{ep} {precision.upper()}")
        ax.set_xticks(range(len(shapes)), [_label(shape, ep) for _, shape in shapes], rotation=30, ha="right")
        ax.grid(axis="y", alpha=0.3)
        ax.margins(y=0.18)
    axes[0].set_ylabel("iteration time, ms (slowest GPU)")
    legend = [
        Patch(color=MOK_COLOR, label="MoK"),
        Patch(color=DIST_COLOR, label="Dist-MoE, selected pipeline"),
    ]
    fig.legend(handles=legend, loc="outside lower center", ncols=2, fontsize=8)
    fig.suptitle("MoK time / Dist-MoE time above each pair")
    return fig


def saved_state_figure(states: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> Figure:
    """Per packing case and layer, in units of the balanced routed rows (T x K): retained rows (solid),
    recomputed rows (pale), MoK's per-layer budget (tick); Dist-MoE's one slot shared by all layers
    is stated in the panel, as it is no per-layer bound."""
    chosen = {p["dist_execution_id"] for p in pairs if p["selected"]}
    shown = [s for s in states if s["implementation"] == "mok" or s["execution_id"] in chosen]
    cases = sorted({(s["ep"], s["precision"]) for s in shown})
    profiles = sorted({s["profile"] for s in shown}, key=lambda p: (p != "balanced", p))
    fig = Figure(figsize=(max(8.0, 4.2 * len(profiles)), 2.8 * len(cases) + 0.6), layout="constrained")
    axes = fig.subplots(len(cases), len(profiles), sharey=True, squeeze=False)
    for row, (ep, precision) in enumerate(cases):
        for col, profile in enumerate(profiles):
            ax = axes[row][col]
            ax.set_title(f"EP{ep} {precision.upper()} profile {profile}", fontsize=9)
            for state in shown:
                if (state["ep"], state["precision"], state["profile"]) == (ep, precision, profile):
                    _saved_state_bars(ax, state)
            ax.set_xlabel("layer", fontsize=8)
            ax.grid(axis="y", alpha=0.3)
        axes[row][0].set_ylabel("rows / (T x K)", fontsize=8)
    top = max(max(_heights(s), default=0.0) for s in shown) if shown else 1.0
    axes[0][0].set_ylim(0, 1.25 * top)
    legend = [
        Patch(color=MOK_COLOR, label="MoK retained"),
        Patch(facecolor=MOK_COLOR, alpha=PALE, label="MoK recomputed"),
        Line2D(
            [],
            [],
            color=MOK_BUDGET,
            marker="_",
            markersize=12,
            linestyle="none",
            label="MoK budget per layer",
        ),
        Patch(color=DIST_COLOR, label="Dist-MoE retained (selected pipeline)"),
        Patch(facecolor=DIST_COLOR, alpha=PALE, label="Dist-MoE recomputed"),
    ]
    fig.legend(handles=legend, loc="outside lower center", ncols=5 if len(profiles) > 1 else 3, fontsize=8)
    fig.suptitle("Saved state per layer of the packing cases: budget, retained, recomputed")
    return fig


def _heights(state: dict[str, Any]) -> list[float]:
    """Bar tops (and MoK's budget ticks) of one packing execution, in units of T x K rows."""
    mok = state["implementation"] == "mok"
    rows = [x["retained_rows"] + x["recomputed_rows"] for x in state["layers"]]
    rows += [x["budget_rows"] for x in state["layers"] if mok]
    return [r / state["balanced_rows"] for r in rows]


def _saved_state_bars(ax: Any, state: dict[str, Any]) -> None:
    mok = state["implementation"] == "mok"
    offset, color = (-0.2, MOK_COLOR) if mok else (0.2, DIST_COLOR)
    layers, unit = state["layers"], state["balanced_rows"]
    x = [layer["layer"] + offset for layer in layers]
    retained = [layer["retained_rows"] / unit for layer in layers]
    recomputed = [layer["recomputed_rows"] / unit for layer in layers]
    ax.bar(x, retained, 0.38, color=color)
    ax.bar(x, recomputed, 0.38, bottom=retained, color=color, alpha=PALE)
    if mok:
        budget = [layer["budget_rows"] / unit for layer in layers]
        ax.scatter(x, budget, marker="_", s=120, color=MOK_BUDGET, zorder=3)
        return
    share = max((layer["budget_rows"] for layer in layers), default=0) / unit
    overflow = f"capacity flags: {state['capacity_flags']}"
    ax.text(
        0.98,
        0.96,
        f"Dist-MoE {state['pipeline']}: one slot, {share:.3g} x T x K per layer\n"
        f"pooled over {len(layers)} layers, {overflow}",
        transform=ax.transAxes,
        ha="right",
        va="top",
        fontsize=7,
        color=DIST_TEXT,
    )


def _shape(row: dict[str, Any]) -> tuple[str, str]:
    return row["kind"], row["workload_id"].removesuffix(f"-{row['precision']}")


def _shape_order(shape: tuple[str, str]) -> tuple[int, int, str]:
    """Matrix order (kind, then as listed in the matrix); shapes outside the matrix after, by name."""
    kind, shape_id = shape
    return (
        KINDS.index(kind) if kind in KINDS else len(KINDS),
        _MATRIX_ORDER.get(shape_id, len(_MATRIX_ORDER)),
        shape_id,
    )


def _label(shape: str, ep: int) -> str:
    return shape.replace(f"-ep{ep}", "").replace("-f3072-profile", "")


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, metadata=PNG_METADATA)
    return buffer.getvalue()
