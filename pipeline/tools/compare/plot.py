"""The comparison's figure: each execution's NEW / BASE time ratio with its interval, per metric.

Drawn with one line collection and one scatter per class and panel, execution names only on the
first panel and a fixed layout (no constrained layout): the whole matrix (330 ratios) renders in
about a second.
"""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from pipeline.tools.compare.side import METRICS

COLORS = {"slower": "#c62828", "faster": "#2e7d32", "inconclusive": "#ef6c00", "unchanged": "#555555"}
ROW_INCHES, LABEL_INCHES, PANEL_INCHES = 0.17, 3.6, 4.0


def ratio_figure(document: dict[str, Any]) -> Figure:
    """One panel per time metric (same execution rows, log ratio axis): a dot at the ratio, a bar
    over its interval, a grey band behind it out to its bound; colour says slower / faster /
    inconclusive / unchanged."""
    times = document["times"]
    ids = sorted({t["execution_id"] for t in times}, reverse=True)  # first id on top
    position = {execution_id: i for i, execution_id in enumerate(ids)}
    metrics = [m for m in METRICS if any(t["metric"] == m for t in times)]
    width, height = LABEL_INCHES + PANEL_INCHES * len(metrics), ROW_INCHES * len(ids) + 1.3
    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=LABEL_INCHES / width, right=0.98, bottom=0.5 / height, top=1 - 0.8 / height)
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        mine = [t for t in times if t["metric"] == metric]
        bounded = [t for t in mine if t["bound"] is not None]
        ax.hlines(
            [position[t["execution_id"]] for t in bounded],
            [1 / t["bound"] for t in bounded],
            [t["bound"] for t in bounded],
            color="#e0e0e0",
            linewidth=5,
            zorder=0,
        )
        ax.axvline(1.0, color="black", linewidth=0.8, zorder=1)
        for change, color in COLORS.items():
            shown = [t for t in mine if t["change"] == change]
            bars = [t for t in shown if t["low"] is not None]
            y = [position[t["execution_id"]] for t in bars]
            ax.hlines(
                y, [t["low"] for t in bars], [t["high"] for t in bars], color=color, linewidth=1.5, zorder=2
            )
            ax.scatter(
                [t["ratio"] for t in shown],
                [position[t["execution_id"]] for t in shown],
                s=10,
                color=color,
                zorder=3,
            )
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(_plain))
        ax.xaxis.set_minor_formatter(FuncFormatter(_plain))
        ax.tick_params(axis="x", labelsize=7, which="both")
        ax.set_ylim(-0.8, len(ids) - 0.2)
        ax.set_yticks([])
        ax.set_title(f"{metric}: NEW / BASE", fontsize=9)
        ax.grid(axis="x", alpha=0.3, which="both")
    axes[0].set_yticks(range(len(ids)), ids, fontsize=6)
    fig.suptitle(
        f"time ratio with {100 * document['confidence']:g}% interval (its noise); grey: inside its bound "
        "(threshold or noise); red slower, green faster, orange inconclusive (differing conditions)",
        fontsize=9,
    )
    return fig


def _plain(value: float, _position: int) -> str:
    """Log-axis tick labels as plain ratios (0.8, 1, 1.5), not powers of ten."""
    return f"{value:.2g}"
