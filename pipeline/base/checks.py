"""Input checks shared by the model's entry points: every bad value fails early, by name."""

from __future__ import annotations

import math
from numbers import Real


def integer(name: str, value: object, *, low: int) -> int:
    """An integer >= ``low``; an integral float such as 16.0 (from JSON) is accepted, a bool is not."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if not float(value).is_integer() or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(float(value))


def real(name: str, value: object, *, low: float, strict: bool) -> float:
    """A finite real number above ``low`` (``strict``) or at least ``low``."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if value < low or (strict and value == low):
        bound = f"> {low:g}" if strict else f">= {low:g}"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return float(value)


def choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    """One of a fixed set of names."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    return str(value)


def experts_layout(num_experts: int, top_k: int, ep: int, *, names: tuple[str, str, str]) -> None:
    """top_k cannot exceed the experts, and EP ranks must own equal shares of them."""
    experts, k, ranks = names
    if top_k > num_experts:
        raise ValueError(f"{k}={top_k} exceeds {experts}={num_experts}; allowed: 1..{num_experts}")
    if num_experts % ep:
        raise ValueError(f"{ranks}={ep} does not divide {experts}={num_experts}; EP must divide the experts")
