"""Self-contained HTML pages: inline CSS, figures as base64 PNG data URIs, no scripts, no links out.

A page opens from disk in any browser without a server or a network, and the same content gives
the same bytes (nothing here reads a clock or a path), so pages are published like the CSV files.
Every text goes through :func:`escape`, so a dataset's strings reach the page as text, control
characters included.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Sequence
from typing import Any

from pipeline.base.printable import printable

Cell = str | tuple[str, str]  # text, or (text, CSS class of its cell)

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 1400px; color: #222;
       padding: 0 1rem; line-height: 1.4; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.6rem 0; font-size: 0.85rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; display: block; margin: 0.6rem 0; border: 1px solid #eee; }
.slower, .lower, .missing, .flipped { background: #f8d0d0; }
.faster, .higher, .done { background: #d4efd4; }
.unchanged, .absent { color: #777; }
.note { color: #555; font-size: 0.85rem; }
"""


def number(value: float | int | None, digits: int = 4) -> str:
    """A value for a table cell: ``digits`` significant digits, empty where it does not exist."""
    if value is None:
        return ""
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    return f"{value:.{digits}g}"


def table(columns: Sequence[str], rows: Iterable[Sequence[Cell]], numeric: Sequence[str] = ()) -> str:
    """A table with a header row; cells of the ``numeric`` columns are right-aligned."""
    aligned = {i for i, c in enumerate(columns) if c in numeric}
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            text, css = cell if isinstance(cell, tuple) else (cell, "")
            classes = " ".join(c for c in (css, "num" if i in aligned else "") if c)
            attribute = f' class="{classes}"' if classes else ""
            cells.append(f"<td{attribute}>{escape(text)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>\n{chr(10).join(body)}\n</tbody></table>"


def image(png: bytes, alt: str) -> str:
    """A PNG embedded in the page as a data URI."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{data}">'


def paragraph(text: str, css: str = "") -> str:
    attribute = f' class="{css}"' if css else ""
    return f"<p{attribute}>{escape(text)}</p>"


def section(heading: str, *parts: str) -> str:
    return "\n".join([f"<h2>{escape(heading)}</h2>", *parts])


def page(title: str, parts: Iterable[str]) -> str:
    """The whole document: ``parts`` are already-rendered fragments from the functions above."""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{escape(title)}</title>",
            f"<style>{STYLE}</style>",
            "</head><body>",
            f"<h1>{escape(title)}</h1>",
            *parts,
            "</body></html>",
            "",
        ]
    )


def escape(text: Any) -> str:
    """``text`` for the page: control characters written out (they are no characters of HTML, and a
    dataset's strings are untrusted), then HTML's special characters escaped."""
    return html.escape(printable(text), quote=True)
