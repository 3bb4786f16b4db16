"""The comparison's figure: each execution's NEW / BASE time ratio with its interval, per metric."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from pipeline.compare.datasets import METRICS

COLORS = {"slower": "#c62828", "faster": "#2e7d32", "unchanged": "#555555"}


def ratio_figure(document: dict[str, Any]) -> Figure:
    """One panel per time metric (shared execution axis, log ratio axis): a dot at the ratio, a bar
    over its interval, the band inside the bound shaded; colour says slower / faster / unchanged."""
    times = document["times"]
    ids = sorted({t["execution_id"] for t in times}, reverse=True)  # first id on top
    position = {execution_id: i for i, execution_id in enumerate(ids)}
    metrics = [m for m in METRICS if any(t["metric"] == m for t in times)]
    fig = Figure(figsize=(4.0 * len(metrics) + 3.5, 0.17 * len(ids) + 1.6), layout="constrained")
    axes = fig.subplots(1, len(metrics), sharey=True, squeeze=False)[0]
    bound = document["bounds"]["times"]
    for ax, metric in zip(axes, metrics, strict=True):
        ax.axvspan(1 / bound, bound, color="#e8e8e8", zorder=0)
        ax.axvline(1.0, color="black", linewidth=0.8, zorder=1)
        for t in (t for t in times if t["metric"] == metric):
            y, color = position[t["execution_id"]], COLORS[t["change"]]
            if t["low"] is not None:
                ax.plot([t["low"], t["high"]], [y, y], color=color, linewidth=1.5, zorder=2)
            ax.plot([t["ratio"]], [y], "o", color=color, markersize=3.5, zorder=3)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(_plain))
        ax.xaxis.set_minor_formatter(FuncFormatter(_plain))
        ax.set_title(f"{metric}: NEW / BASE", fontsize=9)
        ax.grid(axis="x", alpha=0.3, which="both")
        ax.tick_params(axis="x", labelsize=7)
    axes[0].set_yticks(range(len(ids)), ids, fontsize=6)
    axes[0].set_ylim(-0.8, len(ids) - 0.2)
    fig.suptitle(
        f"time ratio with {100 * document['confidence']:g}% interval; shaded: inside the bound "
        f"x{bound:.3g} (threshold or run-to-run scatter); red slower, green faster",
        fontsize=9,
    )
    return fig


def _plain(value: float, _position: int) -> str:
    """Log-axis tick labels as plain ratios (0.8, 1, 1.5), not powers of ten."""
    return f"{value:.2g}"
