"""Lower bounds on the numeric fields of a record, checked one way everywhere (scales, timing plans,
shapes, shard metadata): ``not value >= bound``, so a NaN is refused too; None passes (a field that
may be absent says so in its type). Also the physical bounds of a shard's window times."""

from __future__ import annotations

from collections.abc import Mapping


def check_bounds(record: object, bounds: Mapping[str, float], prefix: str = "") -> None:
    """Each named field of ``record`` is None or at least its bound; a ValueError names the first
    that is not (after ``prefix``)."""
    for key, bound in bounds.items():
        value = getattr(record, key)
        if value is not None and not value >= bound:
            raise ValueError(f"{prefix}{key} must be >= {bound:g}, got {value}")


def at_least(record: object, bound: float, *names: str) -> None:
    """:func:`check_bounds` with one bound for every named field."""
    check_bounds(record, dict.fromkeys(names, bound))


# The window times a shard may hold (``window_ms``), from what the timing (pipeline/bench/timing.py)
# can measure. One iteration of any kind launches several kernels (the grouped GEMMs, the SwiGLU,
# the combine), each of which lasts microseconds, and the window clocks (CUDA events, about 0.5 us
# resolution; ``perf_counter`` on CPUs) resolve less than that: no window of n iterations lasts under
# n microseconds. A window cannot outlast the job that timed it, and no job runs longer than the
# longest time limit a launch may ask for, 30 days (``MAX_TIMEOUT_MIN`` of pipeline/launch/settings.py).
ITERATION_MS_MIN = 1e-3
WINDOW_MS_MAX = 30 * 24 * 60 * 60 * 1e3
