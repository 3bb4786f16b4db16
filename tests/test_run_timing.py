"""Timing windows: phases timed separately, backward without its forward, warm-up untimed.

The steps here run on a virtual clock that they advance by what they take, so every window time and
every calibrated count is exact and no host's load can move it; the CPU clock's own reading of
``perf_counter`` is checked on its own (``test_clock_measures_milliseconds``), and a GPU's events on
real kernels (``test_cuda_laps_are_the_kernels_intervals``)."""

from itertools import pairwise
from types import SimpleNamespace

import pytest
import torch

from pipeline.base.vocabulary import timed_phases
from pipeline.bench import timing
from pipeline.bench.steps import Steps
from pipeline.bench.timing import Clock, Mark, calibrated, time_windows
from pipeline.matrix.scale import TimingPlan
from pipeline.tools.ranks import run_ranks

FORWARD_MS, BACKWARD_MS = 4.0, 2.0


class VirtualClock(Clock):
    """A CPU window clock (barrier and all) that reads virtual milliseconds instead of
    ``perf_counter``: time passes only when a step calls :meth:`take`."""

    def __init__(self, log: list[str] | None = None) -> None:
        super().__init__(torch.device("cpu"))
        self.now_ms = 0.0
        self.log = log  # where each start (a barrier on every rank) is written as "|"

    def start(self) -> Mark:
        if self.log is not None:
            self.log.append("|")
        return super().start()

    def take(self, ms: float) -> None:
        self.now_ms += ms

    def mark(self) -> Mark:
        return self.now_ms

    def laps(self, marks: list[Mark]) -> list[float]:
        return [b - a for a, b in pairwise(marks)]  # type: ignore[operator]


def sleeper(log: list[str], clock: VirtualClock):
    def forward():
        log.append("f")
        clock.take(FORWARD_MS)
        return "out"

    def backward(out):
        assert out == "out"
        log.append("b")
        clock.take(BACKWARD_MS)

    return forward, backward


def test_training_phases_are_timed_separately():
    log: list[str] = []
    clock = VirtualClock(log)
    forward, backward = sleeper(log, clock)
    windows, iterations = 3, 4
    times = time_windows(Steps(forward, backward), clock, TimingPlan(2, windows, iterations))
    assert list(times) == ["forward", "backward", "combined"] == list(timed_phases(True))
    # each window: its phase's parts of the iterations and nothing else
    assert times["forward"] == [iterations * FORWARD_MS] * windows
    assert times["backward"] == [iterations * BACKWARD_MS] * windows
    assert times["combined"] == [iterations * (FORWARD_MS + BACKWARD_MS)] * windows
    # warm-up: 2 iterations, no barrier; per window: each forward and each backward started after a
    # barrier, then whole iterations back to back after one: no forward runs untimed
    per_window = "|f|b" * iterations + "|" + "fb" * iterations
    assert "".join(log) == "fb" * 2 + per_window * windows


def test_inference_times_forward_and_the_whole_iteration():
    log: list[str] = []
    clock = VirtualClock()
    forward, _ = sleeper(log, clock)
    times = time_windows(Steps(forward, None), clock, TimingPlan(0, 2, 3))
    assert list(times) == ["forward", "combined"] == list(timed_phases(False))
    assert times == {"forward": [3 * FORWARD_MS] * 2, "combined": [3 * FORWARD_MS] * 2}
    assert "".join(log) == "f" * 12


def test_inference_phases_take_alternate_iterations_of_one_span():
    """The same work, so one span per window pair: the 1st, 3rd, ... iteration to forward, the 2nd,
    4th, ... to combined (here the odd calls take 2 ms, the even ones 10 ms)."""
    calls = []
    clock = VirtualClock()

    def forward():
        calls.append(len(calls))
        clock.take(2.0 if len(calls) % 2 else 10.0)

    times = time_windows(Steps(forward, None), clock, TimingPlan(1, 4, 3))
    assert len(calls) == 1 + 4 * 2 * 3
    # warm-up took one call, so each span starts on an even call: 3 x 10 ms to forward, 3 x 2 to combined
    assert times == {"forward": [30.0] * 4, "combined": [6.0] * 4}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_laps_are_the_kernels_intervals():
    """On a GPU the marks are events on the stream: a lap is the queued kernels' time, not the
    microseconds their launch took; alternate spans of long and short sleep kernels go to forward
    and combined as on CPUs."""
    calls = []

    def forward():
        calls.append(len(calls))
        torch.cuda._sleep(1_000_000 if len(calls) % 2 else 5_000_000)  # GPU clock cycles

    times = time_windows(Steps(forward, None), Clock(torch.device("cuda")), TimingPlan(1, 3, 4))
    for long, short in zip(times["forward"], times["combined"], strict=True):
        assert 0 < short and 2.5 * short < long  # about 5x: the cycles' ratio


def test_clock_measures_milliseconds(monkeypatch: pytest.MonkeyPatch):
    """A CPU clock's marks are ``perf_counter`` readings (seconds); its laps and stops milliseconds."""
    readings = iter([100.0, 100.02, 7.0])
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: next(readings)))
    clock = Clock(torch.device("cpu"))
    assert clock.name == "barrier + perf_counter"
    started = clock.start()
    assert started == 100.0 and clock.stop(started) == pytest.approx(20.0, rel=1e-9)
    assert clock.mark() == 7.0
    assert clock.laps([1.0, 1.25, 1.75]) == [250.0, 500.0]


def _plan(min_window_ms: float, iterations: int = 2, min_timed_ms: float = 0.0) -> TimingPlan:
    return TimingPlan(1, 5, iterations, min_window_ms, min_timed_ms)


def test_calibration_lengthens_windows_to_the_minimum_time():
    log: list[str] = []
    clock = VirtualClock()
    forward, backward = sleeper(log, clock)  # one iteration takes 6 ms
    shape = calibrated(_plan(60.0), Steps(forward, backward), clock)
    assert shape.iterations == 10  # ceil(60 / 6 ms)
    # warm-up, then whole iterations until half the minimum (30 ms) has passed: five of 6 ms
    assert log == ["f", "b"] * (1 + 5)
    windows = time_windows(Steps(forward, backward), clock, TimingPlan(0, 2, shape.iterations))
    assert windows["combined"] == [60.0, 60.0]
    # never fewer than the scale's iterations; no minimum, no change
    assert calibrated(_plan(10.0, iterations=30), Steps(forward, backward), clock).iterations == 30
    unchanged = _plan(0.0)
    assert calibrated(unchanged, Steps(forward, backward), clock) is unchanged
    assert shape.windows == 5  # no min_timed_ms: the scale's windows


def test_calibration_adds_windows_until_a_phase_lasts_the_minimum_time():
    log: list[str] = []
    clock = VirtualClock()
    forward, backward = sleeper(log, clock)  # one iteration takes 6 ms
    shape = calibrated(_plan(12.0, min_timed_ms=150.0), Steps(forward, backward), clock)
    assert shape.iterations == 2  # ceil(12 / 6 ms)
    assert shape.windows == 13  # ceil(150 / 12 ms)
    assert log == ["f", "b"] * (1 + 3)  # warm-up, then the few iterations a mean needs at least
    windows = time_windows(Steps(forward, backward), clock, TimingPlan(0, shape.windows, shape.iterations))
    assert windows["combined"] == [12.0] * 13  # 156 ms: the first count of windows past 150
    # never fewer than the scale's windows; only min_timed_ms asked for, iterations stay the scale's
    assert calibrated(_plan(0.0, min_timed_ms=10.0), Steps(forward, backward), clock).windows == 5
    only_windows = calibrated(_plan(0.0, min_timed_ms=100.0), Steps(forward, backward), clock)
    assert (only_windows.iterations, only_windows.windows) == (2, 9)  # ceil(100 / 12 ms)


def _calibrate_uneven(rank: int, world: int) -> tuple[int, int]:
    """Rank 0's iteration takes a quarter of rank 1's: both settle on the larger count rank 0 needs, so
    every rank's windows last the minimum."""
    clock = VirtualClock()

    def forward() -> None:
        clock.take(2.0 if rank == 1 else 0.5)

    shape = calibrated(_plan(40.0, min_timed_ms=400.0), Steps(forward, None), clock)
    return shape.iterations, shape.windows


@pytest.mark.slow
def test_ranks_agree_on_one_count():
    """Each rank times as many iterations as the rank that needs the most (40 of rank 0's 0.5 ms to
    pass 20 ms), then both take the largest counts any rank needs: rank 0's 80 iterations of 0.5 ms
    per 40 ms window and its 10 windows to add up to 400 ms (rank 1's windows last four times as
    long, so the scale's 5 would do for it alone)."""
    assert run_ranks(2, _calibrate_uneven, timeout=120) == [(80, 10), (80, 10)]
