"""Lower bounds on the numeric fields of a record, checked one way everywhere (scales, timing plans,
shapes, shard metadata): ``not value >= bound``, so a NaN is refused too; None passes (a field that
may be absent says so in its type)."""

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
