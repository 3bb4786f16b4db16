"""The history's figures: one small panel per series (an execution's time over the datasets).

Each panel: the time of every dataset with its 95% interval (its noise), points measured under other
conditions than the series' usual ones as hollow orange diamonds, each step a vertical line before
its first point (red slower, green faster, orange inconclusive) and the mean level of every segment
between steps as a grey line. Panels share nothing but their x axis (the datasets' order); each
y axis is logarithmic around its own series.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

STEP_COLORS = {"slower": "#c62828", "faster": "#2e7d32", "inconclusive": "#ef6c00"}
POINT, DIFFERING = "#1f4e79", "#ef6c00"
COLUMNS, PANEL_INCHES = 4, (3.4, 1.9)


def series_figure(series: Sequence[dict[str, Any]], datasets: int, title: str) -> Figure:
    """A grid of ``COLUMNS`` panels a row, one per series, over ``datasets`` datasets."""
    rows = max(1, math.ceil(len(series) / COLUMNS))
    columns = min(COLUMNS, max(1, len(series)))
    width, height = PANEL_INCHES[0] * columns, PANEL_INCHES[1] * rows + 0.9
    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(
        left=0.55 / width,
        right=0.99,
        bottom=0.35 / height,
        top=1 - 0.8 / height,
        hspace=0.75,
        wspace=0.32,
    )
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax, entry in zip(axes, series, strict=False):
        _panel(ax, entry, datasets)
    for ax in axes[len(series) :]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=9)
    return fig


def _panel(ax: Any, entry: dict[str, Any], datasets: int) -> None:
    points = entry["points"]
    for differing, color in ((False, POINT), (True, DIFFERING)):
        shown = [p for p in points if (p["differs"] is not None) == differing]
        if not shown:
            continue
        x = [p["dataset"] for p in shown]
        y = [p["ms"] for p in shown]
        ax.vlines(x, [p["low"] for p in shown], [p["high"] for p in shown], color=color, linewidth=1.2)
        ax.scatter(
            x,
            y,
            s=18 if differing else 12,
            marker="D" if differing else "o",
            facecolors="none" if differing else color,
            edgecolors=color,
            zorder=3,
        )
    edges = [0, *(s["at"] for s in entry["steps"]), datasets]
    levels = [entry["steps"][0]["before_ms"]] if entry["steps"] else []
    levels += [s["after_ms"] for s in entry["steps"]]
    if not entry["steps"]:
        usual = [math.log(p["ms"]) for p in points if p["differs"] is None]
        levels = [math.exp(sum(usual) / len(usual))] if usual else []
    for level, start, end in zip(levels, edges[:-1], edges[1:], strict=False):
        ax.hlines(level, start - 0.3, end - 0.7, color="#999999", linewidth=1.5, zorder=1)
    for step in entry["steps"]:
        ax.axvline(step["at"] - 0.5, color=STEP_COLORS[step["change"]], linestyle="--", linewidth=1.2)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.yaxis.set_minor_formatter(FuncFormatter(_plain))
    ax.tick_params(axis="both", labelsize=6, which="both")
    ax.set_xlim(-0.6, datasets - 0.4)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"D{int(v)}"))
    marks = "".join(f" {s['change']} at D{s['at']} x{s['ratio']:.2f}" for s in entry["steps"])
    ax.set_title(f"{entry['execution_id']}\n{entry['metric']} ms{marks}", fontsize=6)


def _plain(value: float, _position: int) -> str:
    """Log-axis tick labels as plain numbers (8, 10, 12), not powers of ten."""
    return f"{value:.3g}"
