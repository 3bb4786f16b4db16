"""Published figures: iteration time per EP (MoK vs the selected Dist-MoE pipeline), where each
execution's time went (its phase account, one stacked bar per execution) and saved state. Titles and
panels say what ran: the device, scale and ranks, and MXFP8 products that were not native.

Each implementation is drawn in its record's colours and named by its label
(:mod:`pipeline.base.implementations`); an implementation in no pair is drawn beside the pair, its fastest
pipeline per matched workload. Figures are built on ``matplotlib.figure.Figure`` (Agg, no pyplot
global state) and saved without a software stamp, so the same rows give the same PNG bytes.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from pipeline.base.implementations import (
    Implementation,
    candidate,
    implementation,
    implementations,
    reference,
)
from pipeline.base.printable import printable
from pipeline.base.vocabulary import KINDS, LAYER_PHASES, PRECISIONS, UNCLAIMED
from pipeline.cost.products import NATIVE
from pipeline.matrix import WORKLOADS
from pipeline.report.accounts import UNCLAIMED_COLUMN, phase_column
from pipeline.report.document import PackingEvidence
from pipeline.report.pairs import CANDIDATE_ID, REFERENCE_ID, fastest
from pipeline.report.publish import Row, number, optional_number

PALE = 0.35  # opacity of recomputed rows (hatching renders too slowly)
# Saved-state axes reach this far above the tallest bar: room for a panel's three lines of text.
HEADROOM = 1.6
NOTE_TOP, NOTE_LINE = 0.97, 0.08  # a panel's notes, one under the other, in axes fractions
# Columns of two implementations at one shape (time) or layer (saved state): bar width, and the
# saved-state bars' distance; more implementations share the same room.
BAR, LAYER_STEP = 0.38, 0.4
PNG_METADATA = {"Software": None}
TABLE_TITLE = f"paired values: {candidate().label} / {reference().label}"
SAVED_STATE_NAME = "mok-comparison-saved-state.png"
SPEEDUPS_NAME = "mok-comparison-speedups.png"
TIE_COLOUR, SLOWER_COLOUR = "#b0b0b0", "#c0392b"  # the speedups figure's outcomes but the faster
_MATRIX_ORDER = {w.name: i for i, w in enumerate(WORKLOADS)}
# The phase account's stacks, in order, each in a colour of its own (the default cycle's ten),
# unclaimed grey.
STACKS = (*LAYER_PHASES, UNCLAIMED)
STACK_COLOURS = dict(zip(STACKS, [f"C{i}" for i in range(10)] + ["#bbbbbb"], strict=True))


def figure_files(
    rows: list[Row], pairs: list[Row], states: list[PackingEvidence], *, paired: bool = True
) -> dict[str, bytes]:
    """With ``paired`` (a suite that publishes pairs) the speedups and one time figure per EP; then one
    phase-account figure per EP with an account, and the saved-state figure: file name -> PNG bytes,
    in EP order."""
    files = {}
    if paired and any(p["selected"] for p in pairs):
        files[SPEEDUPS_NAME] = png(speedup_figure(pairs, rows))
    if paired:
        files |= {f"mok-comparison-ep{ep}.png": png(time_figure(ep, rows, pairs)) for ep in _eps(rows)}
    for ep in _eps(rows):
        mine = _accounted([r for r in rows if r["ep"] == ep])
        if mine:
            files[f"mok-comparison-phases-ep{ep}.png"] = png(phase_figure(ep, mine))
    if states:
        files[SAVED_STATE_NAME] = png(saved_state_figure(states, pairs, rows))
    return files


def is_figure_name(name: str) -> bool:
    """Whether ``name`` is the name of a published figure."""
    return (
        name in (SAVED_STATE_NAME, SPEEDUPS_NAME)
        or re.fullmatch(r"mok-comparison-(phases-)?ep[1-9][0-9]*\.png", name) is not None
    )


def _eps(rows: list[Row]) -> list[int]:
    return sorted({_int(r, "ep") for r in rows})


def time_figure(ep: int, rows: list[Row], pairs: list[Row]) -> Figure:
    """Iteration-ms columns of MoK and the selected Dist-MoE pipeline per shape, speedup above each
    pair: one row of panels per kind, BF16 and MXFP8 side by side, every panel of the EP on one time
    axis (the report's rule: both precision panels share a time axis within one EP, so training and
    packing are drawn to one scale); below, the paired table (Dist-MoE / MoK); device and scale in
    the title. An implementation in no pair stands beside the pair (its fastest pipeline)."""
    ref, cand = reference(), candidate()
    by_id = {str(r["execution_id"]): r for r in rows}
    selected = {str(p["workload_id"]): p for p in pairs if p["selected"]}
    mine = [r for r in rows if r["ep"] == ep]
    others = _beside(mine)
    columns = 2 + len(others)
    width = BAR * 2 / columns  # adjacent columns: the width is also the step
    kinds = [k for k in KINDS if any(r["kind"] == k for r in mine)]
    shapes = {k: sorted({_shape(r) for r in mine if r["kind"] == k}, key=_shape_order) for k in kinds}
    widest = max(len(v) for v in shapes.values())
    table_rows = [(precision, shape) for k in kinds for _, shape in shapes[k] for precision in PRECISIONS]
    fig = Figure(
        figsize=(max(7.0, 1.4 * widest * 2), 3.4 * len(kinds) + 0.9 + 0.2 * len(table_rows)),
        layout="constrained",
    )
    grid = fig.add_gridspec(len(kinds) + 1, len(PRECISIONS), height_ratios=[3.0] * len(kinds) + [
        0.4 + 0.16 * len(table_rows)
    ])  # fmt: skip
    drawn = {i.name: False for i in (ref, cand, *(o.record for o in others))}
    first = None  # the EP's one time axis
    for row_index, kind in enumerate(kinds):
        for col, precision in enumerate(PRECISIONS):
            ax = fig.add_subplot(grid[row_index, col], sharey=first)
            first = first or ax
            for x, (_, shape) in enumerate(shapes[kind]):
                workload = f"{shape}-{precision}"
                partner = next(
                    (r for r in mine if r["workload_id"] == workload and r["implementation"] == ref.name),
                    None,
                )
                if partner is not None:
                    at = x + _offset(0, columns, width)
                    ax.bar(at, number(partner, "iterationMS"), width, color=ref.colour)
                    drawn[ref.name] = True
                extra = [
                    (c, o, o.fastest[workload]) for c, o in enumerate(others, 2) if workload in o.fastest
                ]
                for column, other, row in extra:
                    at = x + _offset(column, columns, width)
                    ax.bar(at, number(row, "iterationMS"), width, color=other.record.colour)
                    drawn[other.record.name] = True
                pair = selected.get(workload)
                if pair is None:
                    continue
                chosen = by_id[str(pair[CANDIDATE_ID])]
                ax.bar(
                    x + _offset(1, columns, width), number(chosen, "iterationMS"), width, color=cand.colour
                )
                drawn[cand.name] = True
                tops = [number(chosen, "iterationMS"), number(pair, "mokIterationMS")]
                tops += [number(row, "iterationMS") for _, _, row in extra]
                ax.annotate(
                    f"{number(pair, 'speedup'):.2f}x\n{pair['pipeline']}",
                    (x + (_offset(0, columns, width) + _offset(1, columns, width)) / 2, max(tops)),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
            ax.set_title(_panel_title(ep, kind, precision, mine), fontsize=9)
            labels = [_label(shape, ep) for _, shape in shapes[kind]]
            ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
            ax.grid(axis="y", alpha=0.3)
            ax.margins(y=0.22)
            ax.set_xlim(-0.7, len(labels) - 0.3)
            if col == 0:
                ax.set_ylabel("iteration ms (slowest GPU)", fontsize=8)
    _paired_table(fig.add_subplot(grid[len(kinds), :]), table_rows, selected, by_id)
    legend = [
        handle
        for shown, handle in (
            (drawn[ref.name], Patch(color=ref.colour, label=ref.label)),
            (drawn[cand.name], Patch(color=cand.colour, label=f"{cand.label}, selected pipeline")),
            *((drawn[o.record.name], Patch(color=o.record.colour, label=o.label)) for o in others),
        )
        if shown
    ]
    if legend:
        fig.legend(handles=legend, loc="outside lower center", ncols=max(2, len(legend)), fontsize=8)
    title = f"EP{ep}: {ref.label} time / {cand.label} time above each pair; {_provenance(mine)}"
    fig.suptitle(title, fontsize=10)
    return fig


@dataclass(frozen=True)
class _Beside:
    """An implementation in no pair, drawn beside it: its record and its fastest row per matched
    workload (the rule that selects the candidate's pipeline)."""

    record: Implementation
    fastest: dict[str, Row]

    @property
    def label(self) -> str:
        record = self.record
        return f"{record.label}, fastest pipeline" if record.several_pipelines else record.label


def _beside(rows: list[Row]) -> list[_Beside]:
    """The implementations of ``rows`` in no pair, in registration order."""
    paired = {reference().name, candidate().name}
    return [
        _Beside(i, fastest(mine))
        for i in implementations()
        if i.name not in paired and (mine := [r for r in rows if r["implementation"] == i.name])
    ]


def _offset(column: int, columns: int, step: float) -> float:
    """Where column ``column`` of ``columns`` at one shape or layer stands from its centre (the pair's
    reference first, its candidate second, then the implementations beside it)."""
    return (column - (columns - 1) / 2) * step


def _panel_title(ep: int, kind: str, precision: str, mine: list[Row]) -> str:
    """``EP32 training BF16, 1 rank``, and what ran otherwise than the report: the dtype where it is not
    BF16 (at the CPU scales the panels ran float32 layers) and MXFP8 products that were not native
    (``emulated: BF16 tensor cores`` on Hopper, the ``float32 reference``)."""
    panel = [r for r in mine if r["kind"] == kind and r["precision"] == precision]
    label = f"EP{ep} {kind} {precision.upper()}, {_ranks(panel or mine)}"  # an empty panel: the EP's
    ran = sorted({str(r["dtype"]) for r in panel})
    notes = [] if ran in ([], ["bfloat16"]) else [f"ran {', '.join(ran)}"]
    notes += sorted({f"MXFP8 {p}" for r in panel if (p := r.get("mxfp8Products")) not in (None, NATIVE)})
    return _shown(", ".join([label, *notes]))


def _ranks(rows: list[Row]) -> str:
    """``1 rank``, ``2 ranks``, ``1-8 ranks``: the ranks that ran ``rows``."""
    counts = sorted({_int(r, "ranks") for r in rows}) or [0]
    shown = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f"{shown} rank{'' if counts == [1] else 's'}"


def _paired_table(
    ax: Axes,
    table_rows: list[tuple[str, str]],
    selected: dict[str, Row],
    by_id: dict[str, Row],
) -> None:
    """The paired values, always Dist-MoE / MoK, of each matched workload with a selected pair (the
    speedup, MoK / Dist-MoE, is above each pair of columns). Columns are as wide as their text."""
    ax.axis("off")
    cells = []
    for precision, shape in table_rows:
        pair = selected.get(f"{shape}-{precision}")
        if pair is None:
            continue
        dist, mok = by_id[str(pair[CANDIDATE_ID])], by_id[str(pair[REFERENCE_ID])]
        cells.append(
            [
                f"{shape} {precision.upper()}",
                str(pair["pipeline"]),
                f"{number(dist, 'iterationMS'):.3g} / {number(mok, 'iterationMS'):.3g}",
                f"{number(dist, 'usefulTFLOPsPerGPU'):.3g} / {number(mok, 'usefulTFLOPsPerGPU'):.3g}",
            ]
        )
    if not cells:
        return
    header = ["workload", f"{candidate().label} pipeline", "iteration ms", "useful TFLOP/s per GPU"]
    table = ax.table(cellText=cells, colLabels=header, loc="upper center", cellLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    table.auto_set_column_width(range(len(header)))
    ax.set_title(TABLE_TITLE, fontsize=8)


def _provenance(rows: list[Row]) -> str:
    """Where, at which scale and on how many ranks the rows ran, and MXFP8 products that were not
    native, for a title."""
    devices = sorted({str(r.get("device")) for r in rows})
    scales = sorted({str(r.get("scale")) for r in rows})
    emulated = sorted({str(p) for r in rows if (p := r.get("mxfp8Products")) not in (None, NATIVE)})
    text = f"device {', '.join(devices)}, scale={', '.join(scales)}, {_ranks(rows)}"
    return _shown(text + "".join(f", MXFP8 {p}" for p in emulated))


def speedup_figure(pairs: list[Row], rows: list[Row]) -> Figure:
    """The answer at a glance: each matched workload's speedup (MoK time / the selected Dist-MoE
    pipeline's) with its 95% interval from the windows, grouped by EP and precision, 1 marked: right
    of it Dist-MoE is faster."""
    chosen = sorted(
        (p for p in pairs if p["selected"]),
        key=lambda p: (_workload_order(str(p["workload_id"])), str(p["workload_id"])),
    )
    fig = Figure(figsize=(9.0, 1.3 + 0.2 * len(chosen)), layout="constrained")
    ax = fig.add_subplot()
    cand, ref = candidate(), reference()
    for y, pair in enumerate(chosen):
        speedup = number(pair, "speedup")
        low, high = optional_number(pair, "speedupLow"), optional_number(pair, "speedupHigh")
        # faster in the candidate's colour, slower in red, a tie (or no interval) in light grey
        colour = TIE_COLOUR if low is None or high is None or low <= 1 <= high else cand.colour
        colour = SLOWER_COLOUR if high is not None and high < 1 else colour
        if low is not None and high is not None:
            ax.plot([low, high], [y, y], color=colour, linewidth=2)
        ax.plot([speedup], [y], "o", color=colour, markersize=4)
    ax.axvline(1.0, color="#333333", linewidth=0.8)
    ax.set_xscale("log")
    labels = [_shown(f"{p['workload_id']} ({p['pipeline']})") for p in chosen]
    ax.set_yticks(range(len(chosen)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(
        f"speedup: {reference().label} time / {cand.label} time (log scale; > 1: {cand.label} faster)",
        fontsize=8,
    )
    ax.grid(axis="x", alpha=0.3, which="both")
    fig.suptitle(
        f"{cand.label} against {ref.label}, 95% intervals from the windows ({cand.label} faster in its "
        f"colour, slower in red, ties grey)\n{_provenance(rows)}",
        fontsize=10,
    )
    return fig


def _workload_order(workload_id: str) -> tuple[int, int, str]:
    """Matrix order of a matched workload (its shape's), its precision after."""
    shape, _, precision = workload_id.rpartition("-")
    kind = shape.split("-", 1)[0]
    return (*_shape_order((kind, shape))[:2], precision)


def _accounted(rows: list[Row]) -> list[Row]:
    """The rows with a phase account, in matrix order: kind, shape, precision, the reference first."""
    order = {i.name: n for n, i in enumerate(implementations())}
    return sorted(
        (r for r in rows if r.get("profiledMS") is not None),
        key=lambda r: (*_shape_order(_shape(r)), PRECISIONS.index(str(r["precision"])),
                       order.get(str(r["implementation"]), len(order)), str(r["pipeline"])),
    )  # fmt: skip


def phase_figure(ep: int, rows: list[Row]) -> Figure:
    """Where each execution's profiled iteration went: one bar per execution (MoK beside the Dist-MoE
    pipelines of its matched workload), stacked by phase as shares of the iteration, the profiled and
    timed milliseconds at its end; one panel per kind."""
    kinds = [k for k in KINDS if any(r["kind"] == k for r in rows)]
    heights = [sum(r["kind"] == k for r in rows) for k in kinds]
    fig = Figure(figsize=(11.0, 1.2 + 0.24 * len(rows) + 0.5 * len(kinds)), layout="constrained")
    axes = fig.subplots(len(kinds), 1, squeeze=False, gridspec_kw={"height_ratios": heights})
    for ax, kind in zip(axes[:, 0], kinds, strict=True):
        mine = [r for r in rows if r["kind"] == kind]
        labels = []
        for y, row in enumerate(mine):
            profiled = number(row, "profiledMS")
            left = 0.0
            for stack in STACKS:
                column = UNCLAIMED_COLUMN if stack == UNCLAIMED else phase_column(stack, "MS")
                part = (optional_number(row, column) or 0.0) / profiled
                ax.barh(y, part, left=left, height=0.8, color=STACK_COLOURS[stack])
                left += part
            timed = number(row, "iterationMS")
            ax.text(1.01, y, f"{profiled:.3g} ms (timed {timed:.3g})", va="center", fontsize=7)
            record = implementation(str(row["implementation"]))
            shape = _label(_shape(row)[1], ep)
            labels.append(_shown(f"{shape} {str(row['precision']).upper()} {record.label} {row['pipeline']}"))
        ax.set_yticks(range(len(mine)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, 1.25)
        ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0], ["0", "25%", "50%", "75%", "100%"], fontsize=7)
        ax.set_title(_shown(f"EP{ep} {kind}, {_ranks(mine)}"), fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    legend = [Patch(color=STACK_COLOURS[s], label=s) for s in STACKS]
    fig.legend(handles=legend, loc="outside lower center", ncols=len(legend), fontsize=7)
    fig.suptitle(f"EP{ep}: where the profiled iteration went, by phase; {_provenance(rows)}", fontsize=10)
    return fig


def _shown(text: str) -> str:
    """A dataset's text for a figure: control characters written out, and no ``$`` that would make
    matplotlib read it as mathematics."""
    return printable(text).replace("$", r"\$")


def saved_state_figure(
    states: list[PackingEvidence], pairs: list[Row], rows: list[Row] | None = None
) -> Figure:
    """Per packing case and layer, in units of the balanced routed rows (T x K): retained rows (solid),
    recomputed rows (pale), a per-layer budget (tick: MoK's); a slot shared by all layers (Dist-MoE's)
    is stated in the panel, as it is no per-layer bound. An implementation in no pair shows its
    fastest pipeline (with ``rows``; else every one)."""
    ref, cand = reference(), candidate()
    chosen = {p[CANDIDATE_ID] for p in pairs if p["selected"]}
    beside = {str(r["execution_id"]) for o in _beside(rows or []) for r in o.fastest.values()}
    paired = {ref.name, cand.name}
    shown = [
        s
        for s in states
        if s.implementation == ref.name
        or s.execution_id in chosen
        or (s.implementation not in paired and (rows is None or s.execution_id in beside))
    ]
    order = [ref.name, cand.name]  # columns: the pair's, then those beside it with marks
    order += [
        i.name
        for i in implementations()
        if i.name not in paired and i.name in {s.implementation for s in shown}
    ]
    tops, lines = _note_tops(shown, order)
    cases = sorted({(s.ep, s.precision) for s in shown})
    profiles = sorted({s.profile for s in shown}, key=lambda p: (p != "balanced", p))
    fig = Figure(figsize=(max(8.0, 4.2 * len(profiles)), 2.8 * len(cases) + 0.6), layout="constrained")
    axes = fig.subplots(len(cases), len(profiles), sharey=True, squeeze=False)
    for row, (ep, precision) in enumerate(cases):
        for col, profile in enumerate(profiles):
            ax = axes[row][col]
            ax.set_title(f"EP{ep} {precision.upper()} profile {profile}", fontsize=9)
            for state in shown:
                if (state.ep, state.precision, state.profile) == (ep, precision, profile):
                    _saved_state_bars(ax, state, order, tops[state.implementation])
            ax.set_xlabel("layer", fontsize=8)
            ax.grid(axis="y", alpha=0.3)
        axes[row][0].set_ylabel("rows / (T x K)", fontsize=8)
    top = max(max(_heights(s), default=0.0) for s in shown) if shown else 1.0
    axes[0][0].set_ylim(0, _headroom(lines) * top)
    legend = [
        handle
        for name in order
        for handle in _legend([st for st in shown if st.implementation == name], rows)
    ]
    if legend:
        fig.legend(handles=legend, loc="outside lower center", ncols=min(len(legend), 3), fontsize=8)
    where = f"; {_provenance(rows)}" if rows else ""
    fig.suptitle(
        f"Saved state per layer of the packing cases: budget, retained, recomputed{where}", fontsize=10
    )
    return fig


def _legend(states: list[PackingEvidence], rows: list[Row] | None) -> list[Patch | Line2D]:
    """One implementation's entries, each only where it has marks: retained (and which pipeline),
    recomputed and its per-layer budgets."""
    if not states:
        return []
    record = implementation(states[0].implementation)
    which = ""
    if record.name == candidate().name:
        which = " (selected pipeline)"
    elif record.name != reference().name and record.several_pipelines and rows is not None:
        which = " (fastest pipeline)"
    entries: list[Patch | Line2D] = [Patch(color=record.colour, label=f"{record.label} retained{which}")]
    if _recomputing(states):
        entries.append(Patch(facecolor=record.colour, alpha=PALE, label=f"{record.label} recomputed"))
    per_layer = [st for st in states if _pooled(st) is False]
    if per_layer:
        budgets = sorted({round(layer.factor, 2) for st in per_layer for layer in st.layers})
        label = f"{record.label} budget per layer: " + ", ".join(f"{b:.2f}" for b in budgets) + " x T x K"
        entries.append(
            Line2D([], [], color=record.note_colour, marker="_", markersize=12, linestyle="none", label=label)
        )
    return entries


def _note_tops(shown: list[PackingEvidence], order: list[str]) -> tuple[dict[str, float], int]:
    """Where each column's note starts in a panel, one under the other in column order (a per-layer
    budget takes a line, a shared slot two), and how many lines they take."""
    tops, lines = {}, 0
    for name in order:
        tops[name] = NOTE_TOP - NOTE_LINE * lines
        lines += 2 if any(_pooled(s) for s in shown if s.implementation == name) else 1
    return tops, lines


def _headroom(lines: int) -> float:
    """How far the axes reach above the tallest bar: HEADROOM holds three lines of notes, and each
    line more takes its height from the bars."""
    return HEADROOM if lines <= 3 else 1 / (1 / HEADROOM - NOTE_LINE * (lines - 3))


def _pooled(state: PackingEvidence) -> bool | None:
    """Whether the execution's stack pools one slot (None: its shard recorded no policy)."""
    return None if state.policy is None else state.policy.pooled


def _recomputing(states: list[PackingEvidence]) -> bool:
    return any(layer.recomputed_rows > 0 for st in states for layer in st.layers)


def _heights(state: PackingEvidence) -> list[float]:
    """Bar tops (and per-layer budget ticks) of one packing execution, in units of T x K rows."""
    rows = [x.retained_rows + x.recomputed_rows for x in state.layers]
    rows += [x.budget_rows for x in state.layers if _pooled(state) is False]
    return [r / state.balanced_rows for r in rows]


def _saved_state_bars(ax: Axes, state: PackingEvidence, order: list[str], note_top: float) -> None:
    """One execution's bars in its implementation's column of each layer, and its note."""
    record = implementation(state.implementation)
    columns = len(order)
    offset = _offset(order.index(state.implementation), columns, LAYER_STEP * 2 / columns)
    width = BAR * 2 / columns
    layers, unit = state.layers, state.balanced_rows
    x = [layer.layer + offset for layer in layers]
    retained = [layer.retained_rows / unit for layer in layers]
    recomputed = [layer.recomputed_rows / unit for layer in layers]
    ax.bar(x, retained, width, color=record.colour)
    ax.bar(x, recomputed, width, bottom=retained, color=record.colour, alpha=PALE)
    if _pooled(state) is None:  # no recorded policy: per-layer budget or pooled slot cannot be said
        return
    if not _pooled(state):
        budget = [layer.budget_rows / unit for layer in layers]
        ax.scatter(x, budget, marker="_", s=120, color=record.note_colour, zorder=3)
        # Its note above the bars (HEADROOM), where it cannot cover a layer's columns as a label at
        # the tick would; the notes of the columns after it follow below it.
        _panel_note(ax, 0.02, note_top, f"{record.label} budget {budget[0]:.2f} x T x K", record.note_colour)
        return
    share = max((layer.budget_rows for layer in layers), default=0) / unit
    overflow = f"capacity flags: {state.capacity_flags}"
    text = f"{record.label} {state.pipeline}: one slot, {share:.3g} x T x K per layer\n"
    text += f"pooled over {len(layers)} layers, {overflow}"
    _panel_note(ax, 0.98, note_top, text, record.note_colour)


def _panel_note(ax: Axes, x: float, y: float, text: str, color: str) -> None:
    """Small text hanging from (x, y) in axes fractions, aligned to the nearer side of the panel."""
    ha = "left" if x < 0.5 else "right"
    ax.text(x, y, text, transform=ax.transAxes, ha=ha, va="top", fontsize=7, color=color)


def _shape(row: Row) -> tuple[str, str]:
    return str(row["kind"]), str(row["workload_id"]).removesuffix(f"-{row['precision']}")


def _int(row: Row, column: str) -> int:
    return int(number(row, column))


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


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes without a software stamp (the same figure gives the same bytes)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, metadata=PNG_METADATA)
    return buffer.getvalue()
