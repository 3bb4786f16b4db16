"""What a test's ranks return to it (they run on real gloo ranks: :func:`pipeline.tools.ranks.run_ranks`)."""

from __future__ import annotations

from collections.abc import Callable


def refusal(build: Callable[[], object]) -> str:
    """The message of the ValueError ``build`` raises, else ``"no error"``: a rank returns the refusal
    for the test to read, where raising would fail the whole run."""
    try:
        build()
    except ValueError as err:
        return str(err)
    return "no error"
