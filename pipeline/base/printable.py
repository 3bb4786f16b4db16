"""Strings from a dataset, shown to a person: every control character made visible.

A dataset's strings (execution ids, device names, host names, skip reasons, file names) are written
by whoever wrote the dataset, so a terminal, a log or a page must never receive them raw: an ESC
starts a terminal escape sequence, a CR or a line separator overwrites or forges a line, a bidi
override reorders what is read. ``printable`` is the one place that neutralises them; every writer of
text for people (command output, one-line errors, the HTML pages) passes dataset strings through it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping

# Shown as ``\\xNN``: the C0 controls, DEL and the C1 controls (Unicode category Cc, all of it), tab
# and line feed included, so that one value stays on one line.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
# Shown as ``\\uNNNN``: line and paragraph separators, the bidi embeddings, overrides and isolates, and
# lone surrogates (a file name that is not UTF-8, as Python decodes it), which no output can encode.
_FORMATS = {
    c: f"\\u{c:04x}"
    for c in (0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A), *range(0xD800, 0xE000))
}
_TABLE = str.maketrans({**_CONTROLS, **_FORMATS})


def printable(value: object) -> str:
    """``value`` as text with every control character written out (ESC as ``\\x1b``, CR as ``\\x0d``),
    so it can be printed or embedded as it is."""
    return str(value).translate(_TABLE)


def print_document(shown: str, skipped: Iterable[tuple[str, Mapping[str, object]]]) -> None:
    """Each skipped shard file on stderr as ``skipped (WHERE) PATH: REASON``, WHERE naming the dataset
    it is in, then ``shown`` (the document, ending in a newline) on stdout: what a command reading
    several datasets prints."""
    for where, entry in skipped:
        print(printable(f"skipped ({where}) {entry['path']}: {entry['reason']}"), file=sys.stderr)
    print(shown, end="")
