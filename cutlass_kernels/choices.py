"""The per-shape variant choice: which registered kernel variant measured fastest for a class of
problem shapes, and the lookup the dispatch makes for ``variant="auto"``.

A problem's class is its arch, op, group count ``G``, the weight's extents ``N`` and ``K`` (the weight
is ``[G, N, K]``; dgrad and wgrad of a projection share its forward's extents) and the routed rows
rounded up to a power of two (rows move with the routing every step, so an exact row count would
never match again; within a power-of-two band the variants' relative standing changes little, since
tile waste at group ends depends on rows per group, i.e. on rows / G). An entry names the variant
that the GPU check timed fastest for that class, with the date and device of that measurement.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Problem:
    """One call's host-side shape: ``rows`` routed rows over ``groups`` groups, the weight's ``n`` and
    ``k``, and the output dtype. Known without reading ``offs``, so choosing never syncs the host."""

    op: str
    groups: int
    rows: int
    n: int
    k: int
    out_dtype: torch.dtype = torch.bfloat16


def rows_bucket(rows: int) -> int:
    """The smallest power of two >= ``rows`` (0 for no rows)."""
    return 1 << (rows - 1).bit_length() if rows > 0 else 0


@dataclass(frozen=True)
class Choice:
    """The variant measured fastest for one shape class, and where and when that was measured."""

    arch: str
    op: str
    groups: int
    n: int
    k: int
    rows_bucket: int
    variant: str
    date: str  # ISO date of the measurement
    device: str  # the GPU, as torch.cuda.get_device_name reports it

    def matches(self, arch: str, problem: Problem) -> bool:
        key = (problem.op, problem.groups, problem.n, problem.k, rows_bucket(problem.rows))
        return self.arch == arch and (self.op, self.groups, self.n, self.k, self.rows_bucket) == key


# Empty until a GPU measurement fills it: no variant has been timed yet, so every shape runs the
# default kernel. Fill from the check's per-shape best variant, one Choice per shape class.
CHOICES: tuple[Choice, ...] = ()


def lookup(table: Iterable[Choice], arch: str, problem: Problem) -> str | None:
    """The variant ``table`` names for ``problem``'s class on ``arch`` (the first match), else None."""
    return next((c.variant for c in table if c.matches(arch, problem)), None)
