"""Timing windows: forward, backward and combined measured separately, the report's way.

A window is ``iterations`` repetitions. Its clock starts after a barrier (all ranks start together)
and stops when this rank's own work is done, so ranks differ and the slowest one can be found. On
CUDA, events on the rank's stream bracket the window, so it covers the kernels, not only their launch.
Backward cannot run without its forward, so the two share their repetitions: the forward and backward
windows are the sums of the two parts of ``iterations`` forward+backward repetitions, each part started
after a barrier (a forward window of its own would run every forward twice, once timed and once
untimed before its backward). The combined window is ``iterations`` back-to-back whole iterations.
Inference's forward and combined windows time the same work; they share one span of back-to-back
iterations, taken alternately.

A scale may ask for windows of at least ``min_window_ms`` and for at least ``min_timed_ms`` of windows
per phase (``calibrated``): after warm-up whole iterations are timed, the iterations per window rise
until a combined window lasts ``min_window_ms`` and the windows per phase until they add up to
``min_timed_ms``, on every rank (all ranks take the largest counts any rank needs). On shared CPUs
an iteration's time is heavy-tailed (a collective's wake-up can cost ten times its median), and the
median of many short windows is steadier than that of a few long ones of the same total time
(``docs/journal/performance-2026.md``); inference's forward window, the same work, lasts as long as
the combined one, a forward window with a backward about a third.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import torch
import torch.distributed as dist

from pipeline.base.vocabulary import timed_phases
from pipeline.bench.steps import Steps
from pipeline.matrix.scale import TimingPlan

CALIBRATION_ITERATIONS = 3


Mark = float | torch.cuda.Event


class Clock:
    """Window clock of one rank, aligned with the other ranks at ``start``: CUDA events recorded on
    the rank's stream on GPUs, ``perf_counter`` on CPUs."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.name = "barrier + cuda events" if self.cuda else "barrier + perf_counter"

    def start(self) -> Mark:
        if self.cuda:
            torch.cuda.synchronize()
        if dist.is_initialized():
            dist.barrier()
        return self.mark()

    def mark(self) -> Mark:
        """Now, on this rank's clock (on CUDA: once the work queued so far has run)."""
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def laps(self, marks: list[Mark]) -> list[float]:
        """Milliseconds between consecutive ``marks`` (on CUDA, once the last has been reached)."""
        if not self.cuda:
            return [(b - a) * 1e3 for a, b in pairwise(marks)]  # type: ignore[operator]
        marks[-1].synchronize()  # type: ignore[union-attr]
        return [a.elapsed_time(b) for a, b in pairwise(marks)]  # type: ignore[union-attr,arg-type]

    def stop(self, started: Mark) -> float:
        """Milliseconds since ``started``."""
        return self.laps([started, self.mark()])[0]


def time_windows(steps: Steps, clock: Clock, plan: TimingPlan) -> dict[str, list[float]]:
    """Window times in milliseconds per phase after ``plan.warmup`` iterations:
    ``{"forward": [w0, ..., w4], ...}`` (phases: :func:`pipeline.base.vocabulary.timed_phases`)."""
    forward, backward = steps.forward, steps.backward
    steps.warm_up(plan.warmup)
    times: dict[str, list[float]] = {phase: [] for phase in timed_phases(backward is not None)}
    for _ in range(plan.windows):
        if backward is None:
            forward_ms, combined_ms = _alternating(forward, clock, plan.iterations)
            times["forward"].append(forward_ms)
            times["combined"].append(combined_ms)
            continue
        forward_ms = backward_ms = 0.0
        for _ in range(plan.iterations):
            started = clock.start()
            out = forward()
            forward_ms += clock.stop(started)
            started = clock.start()
            backward(out)
            backward_ms += clock.stop(started)
        times["forward"].append(forward_ms)
        times["backward"].append(backward_ms)
        started = clock.start()
        for _ in range(plan.iterations):
            steps.iteration()
        times["combined"].append(clock.stop(started))
    return times


def _alternating(forward: Callable[[], Any], clock: Clock, iterations: int) -> tuple[float, float]:
    """Inference's forward and combined windows: the same work, so one span of ``2 * iterations``
    back-to-back forwards after one barrier, every other iteration to each; both phases then see the
    same moments of a noisy host (an iteration of a shared CPU can stall for several times its median
    wherever it falls) instead of two different spans."""
    marks = [clock.start()]
    for _ in range(2 * iterations):
        forward()
        marks.append(clock.mark())
    laps = clock.laps(marks)
    return sum(laps[0::2]), sum(laps[1::2])


def calibrated(plan: TimingPlan, steps: Steps, clock: Clock) -> TimingPlan:
    """``plan`` with the iterations per window that make a combined window last ``min_window_ms``
    and the windows that make the combined windows add up to ``min_timed_ms`` on every rank (never
    fewer than the plan's): ``warmup`` iterations, then the mean of timed iterations over at least
    half a window (and a few iterations) on each rank, and the largest counts any rank needs."""
    if plan.min_window_ms <= 0 and plan.min_timed_ms <= 0:
        return plan
    steps.warm_up(plan.warmup)
    # whole iterations until half a window has passed (at least a few): a mean over that long is
    # not thrown off by one slow or fast iteration, as a count from a few iterations would be
    # (every rank times as many as the rank that needs the most: each start is a barrier)
    done, elapsed = 0, 0.0
    while _any_rank(done < CALIBRATION_ITERATIONS or elapsed < plan.min_window_ms / 2, clock):
        started = clock.start()
        steps.iteration()
        elapsed += clock.stop(started)
        done += 1
    iteration_ms = max(elapsed, 1e-3) / done
    iterations = _largest(max(plan.iterations, math.ceil(plan.min_window_ms / iteration_ms)), clock)
    windows = max(plan.windows, math.ceil(plan.min_timed_ms / (iterations * iteration_ms)))
    return dataclasses.replace(plan, iterations=iterations, windows=_largest(windows, clock))


def _largest(value: int, clock: Clock) -> int:
    """The largest ``value`` of any rank (this rank's own without a process group)."""
    count = torch.tensor([value], dtype=torch.int64)
    if dist.is_initialized():
        if clock.cuda:
            count = count.cuda()
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
    return int(count.item())


def _any_rank(flag: bool, clock: Clock) -> bool:
    return _largest(int(flag), clock) == 1
