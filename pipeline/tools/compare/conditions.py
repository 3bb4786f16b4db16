"""Under what conditions each side measured an execution, and whether the two sides' differ.

A time ratio says how the code changed only where both sides measured it alike. The shards record
how they measured: the host's CPU contention during the windows (``contention.cpu_wait_share``: the
share of its runnable time the most denied rank waited for a core), the nodes (``provenance.hosts``)
and, on GPUs, the clocks, throttle reasons and other processes of every rank's GPU
(``conditions``, :mod:`pipeline.bench.conditions`). Two sides differ when any of these differ
beyond its bound:

- CPU contention: a wait share w stretches the windows' CPU work by 1 / (1 - w); the sides differ
  when one's stretch exceeds the other's by more than ``CPU_STRETCH_BOUND`` (25%: 0.05 against 0.25
  does, 0.1 against 0.2, what two quiet runs of two ranks on two cores record, does not);
- nodes: another machine is another measuring instrument;
- SM or memory clocks of the slowest-clocked GPU (an EP layer's ranks meet at every all-to-all,
  so its slowest GPU sets the pace) differing by more than ``CLOCK_BOUND`` (5%, the default
  threshold of a change);
- the share of samples with a clock-slowing reason active (a power cap, heat, a hardware slowdown)
  differing by more than ``THROTTLE_BOUND``;
- a GPU shared with other compute processes on one side only.

What a side did not record (older shards, no NVML) is unknown, and unknown never differs: the
comparison says how many executions it could not check. A shard is untrusted input: a value no
measurement can take (a clock of 1e308 MHz or of 5e-324, a wait share above 1) is unknown too, so
that no ratio of two of them leaves the numbers (:data:`CLOCK_MHZ`).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.data.reader import Shard

CPU_STRETCH_BOUND = 0.25
CLOCK_MHZ = (1.0, 100_000.0)  # what a GPU clock can read, in MHz: beyond it, no measurement
MOST_PROCESSES = 1_000_000
_ALMOST_1 = 1 - 1e-9
CLOCK_BOUND = 0.05
THROTTLE_BOUND = 0.25
BOUNDS_TEXT = (
    f"CPU work stretched by contention, 1 / (1 - cpu wait), {100 * CPU_STRETCH_BOUND:g}% more on one side; "
    f"another node; the slowest GPU's SM or memory clock {100 * CLOCK_BOUND:g}% apart; throttled samples "
    f"{100 * THROTTLE_BOUND:g} points apart; a GPU shared with other processes on one side only"
)


@dataclass(frozen=True)
class Measured:
    """One execution's measuring conditions on one side (None: not recorded)."""

    cpu_wait_share: float | None
    hosts: tuple[str, ...]
    sm_clock_mhz: float | None  # the slowest-clocked GPU's mean during the windows
    memory_clock_mhz: float | None
    throttled_share: float | None  # the most throttled GPU's share of samples
    throttle_reasons: tuple[str, ...]
    processes: int | None  # the most compute processes any of its GPUs held at once
    gpu_unknown: str | None  # why the GPUs' conditions are not known (None: they are)

    @classmethod
    def of(cls, shard: Shard) -> Measured:
        """The shard's conditions, each value within what a measurement can read (else unknown)."""
        meta = shard.meta
        gpus = meta.conditions.gpus
        processes = [g.processes for g in gpus if g.processes is not None and g.processes <= MOST_PROCESSES]
        sm = [c for g in gpus if (c := _within(g.sm_clock_mhz, *CLOCK_MHZ)) is not None]
        memory = [c for g in gpus if (c := _within(g.memory_clock_mhz, *CLOCK_MHZ)) is not None]
        return cls(
            cpu_wait_share=_within(meta.contention.cpu_wait_share, 0.0, 1.0),
            hosts=tuple(meta.provenance.hosts),
            sm_clock_mhz=min(sm, default=None),
            memory_clock_mhz=min(memory, default=None),
            throttled_share=max((g.throttled_share for g in gpus), default=None),
            throttle_reasons=tuple(sorted({r for g in gpus for r in g.throttle_reasons})),
            processes=max(processes, default=None),
            gpu_unknown=None if gpus else meta.conditions.unknown,
        )

    def as_json(self) -> dict[str, object]:
        return {
            "cpu_wait_share": self.cpu_wait_share,
            "hosts": list(self.hosts),
            "sm_clock_mhz": self.sm_clock_mhz,
            "memory_clock_mhz": self.memory_clock_mhz,
            "throttled_share": self.throttled_share,
            "throttle_reasons": list(self.throttle_reasons),
            "processes": self.processes,
            "gpu_unknown": self.gpu_unknown,
        }

    @property
    def known(self) -> bool:
        """Whether the host's contention or the GPUs' conditions were recorded at all."""
        return self.cpu_wait_share is not None or self.sm_clock_mhz is not None


def _within(value: float | None, low: float, high: float) -> float | None:
    """``value`` where a measurement can take it (``low`` to ``high``), else None (unknown)."""
    return value if value is not None and low <= value <= high else None


def differences(base: Measured, new: Measured, names: tuple[str, str] = ("BASE", "NEW")) -> list[str]:
    """Each way the two sides' conditions differ beyond its bound, as a phrase naming the side that
    measured under the worse one (``NEW contended (cpu wait 0.40 vs 0.05)``; ``names``: what to call
    BASE and NEW); empty where they agree or where what would differ is unknown on a side."""

    def _worse(new_is_worse: bool, new_value: float, base_value: float) -> tuple[str, float, float]:
        """(the side measured under the worse condition, its value, the other's)."""
        return (names[1], new_value, base_value) if new_is_worse else (names[0], base_value, new_value)

    out = []
    if base.cpu_wait_share is not None and new.cpu_wait_share is not None:
        # a share is at most 1 (a shard's word is untrusted: one above 1 reads as 1, and 1 as just below)
        stretch = (1 - min(base.cpu_wait_share, _ALMOST_1)) / (1 - min(new.cpu_wait_share, _ALMOST_1))
        if _beyond(stretch, CPU_STRETCH_BOUND):
            side, mine, other = _worse(stretch > 1, new.cpu_wait_share, base.cpu_wait_share)
            out.append(f"{side} contended (cpu wait {mine:.2f} vs {other:.2f})")
    if base.hosts and new.hosts and set(base.hosts) != set(new.hosts):
        out.append(f"nodes differ ({names[0]} {' '.join(base.hosts)}, {names[1]} {' '.join(new.hosts)})")
    for name, b, n in (
        ("SM clock", base.sm_clock_mhz, new.sm_clock_mhz),
        ("memory clock", base.memory_clock_mhz, new.memory_clock_mhz),
    ):
        if b and n and _beyond(b / n, CLOCK_BOUND):
            side, mine, other = _worse(n < b, n, b)
            out.append(f"{side} {name} lower ({mine:.0f} vs {other:.0f} MHz)")
    if base.throttled_share is not None and new.throttled_share is not None:
        if abs(new.throttled_share - base.throttled_share) > THROTTLE_BOUND:
            worse = new.throttled_share > base.throttled_share
            side, mine, other = _worse(worse, new.throttled_share, base.throttled_share)
            reasons = ", ".join((new if worse else base).throttle_reasons)
            out.append(f"{side} throttled ({reasons}: {100 * mine:.0f}% of samples vs {100 * other:.0f}%)")
    if base.processes is not None and new.processes is not None:
        if (base.processes > 1) != (new.processes > 1):
            side, mine, _ = _worse(new.processes > 1, new.processes, base.processes)
            out.append(f"{side} GPU shared ({mine:.0f} compute processes at once)")
    return out


def clock_ratio(base: Measured, new: Measured) -> float | None:
    """NEW's SM clock over BASE's (the slowest GPU's), where both are known: a time ratio times it is
    the ratio in clock cycles, the change at equal clocks where the work is bound by the SM clock."""
    if base.sm_clock_mhz and new.sm_clock_mhz:
        return new.sm_clock_mhz / base.sm_clock_mhz
    return None


def _beyond(ratio: float, bound: float) -> bool:
    return abs(math.log(ratio)) > math.log1p(bound)


def typical(measured: Sequence[Measured]) -> Measured:
    """The usual conditions of several runs of one execution, to tell which run differed: the median
    of each recorded quantity, the most common node set, the fewest processes (what is unknown in
    every run stays unknown)."""

    def median(values: list[float | None]) -> float | None:
        known = sorted(v for v in values if v is not None)
        return statistics.median(known) if known else None

    hosts = Counter(m.hosts for m in measured if m.hosts).most_common(1)
    processes = [m.processes for m in measured if m.processes is not None]
    return Measured(
        cpu_wait_share=median([m.cpu_wait_share for m in measured]),
        hosts=hosts[0][0] if hosts else (),
        sm_clock_mhz=median([m.sm_clock_mhz for m in measured]),
        memory_clock_mhz=median([m.memory_clock_mhz for m in measured]),
        throttled_share=median([m.throttled_share for m in measured]),
        throttle_reasons=(),
        processes=min(processes, default=None),
        gpu_unknown=None,
    )
