"""Timing windows: phases timed separately, backward without its forward, warm-up untimed."""

import time

import pytest
import torch

from pipeline.bench.steps import Steps
from pipeline.bench.timing import Clock, calibrated, time_windows
from pipeline.matrix.scale import TimingPlan
from pipeline.vocabulary import timed_phases
from tests.distributed import run_ranks

FORWARD_S, BACKWARD_S = 0.004, 0.002
CPU = Clock(torch.device("cpu"))


def sleeper(log: list[str]):
    def forward():
        log.append("f")
        time.sleep(FORWARD_S)
        return "out"

    def backward(out):
        assert out == "out"
        log.append("b")
        time.sleep(BACKWARD_S)

    return forward, backward


def test_training_phases_are_timed_separately():
    log: list[str] = []
    forward, backward = sleeper(log)
    windows, iterations = 3, 4
    times = time_windows(Steps(forward, backward), CPU, TimingPlan(2, windows, iterations))
    assert list(times) == ["forward", "backward", "combined"] == list(timed_phases(True))
    assert all(len(v) == windows for v in times.values())
    f_ms, b_ms = iterations * FORWARD_S * 1e3, iterations * BACKWARD_S * 1e3
    # sleep() never returns early; the upper bounds only catch gross mistakes (a shared machine)
    assert all(f_ms <= t < 3 * f_ms + 50 for t in times["forward"])
    assert all(b_ms <= t < 3 * b_ms + 50 for t in times["backward"])  # the forwards are not in it
    assert all(f_ms + b_ms <= t < 3 * (f_ms + b_ms) + 50 for t in times["combined"])
    # warm-up: 2 iterations; per window: forwards alone, then forward+backward twice over
    per_window = "f" * iterations + "fb" * iterations + "fb" * iterations
    assert "".join(log) == "fb" * 2 + per_window * windows


def test_inference_times_forward_and_the_whole_iteration():
    log: list[str] = []
    forward, _ = sleeper(log)
    times = time_windows(Steps(forward, None), CPU, TimingPlan(0, 2, 3))
    assert list(times) == ["forward", "combined"] == list(timed_phases(False))
    assert all(3 * FORWARD_S * 1e3 <= t for v in times.values() for t in v)
    assert "".join(log) == "f" * 12


def test_inference_phases_take_alternate_iterations_of_one_span():
    """The same work, so one span per window pair: the 1st, 3rd, ... iteration to forward, the 2nd,
    4th, ... to combined (here the odd ones sleep 2 ms, the even ones 10 ms)."""
    calls = []

    def forward():
        calls.append(len(calls))
        time.sleep(0.002 if len(calls) % 2 else 0.010)

    times = time_windows(Steps(forward, None), CPU, TimingPlan(1, 4, 3))
    assert len(calls) == 1 + 4 * 2 * 3
    # warm-up took one call, so each span starts on an even call: 3 x 10 ms to forward, 3 x 2 to combined
    assert all(
        30.0 <= f and 6.0 <= c < 30.0 for f, c in zip(times["forward"], times["combined"], strict=True)
    )


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


@pytest.mark.parametrize("device", ["cpu"])
def test_clock_measures_milliseconds(device):
    clock = Clock(torch.device(device))
    started = clock.start()
    time.sleep(0.02)
    assert 20 <= clock.stop(started) < 200


def _plan(min_window_ms: float, iterations: int = 2, min_timed_ms: float = 0.0) -> TimingPlan:
    return TimingPlan(1, 5, iterations, min_window_ms, min_timed_ms)


def test_calibration_lengthens_windows_to_the_minimum_time():
    log: list[str] = []
    forward, backward = sleeper(log)  # one iteration sleeps 6 ms
    shape = calibrated(_plan(60.0), Steps(forward, backward), CPU)
    assert 6 <= shape.iterations <= 10  # ceil(60 / a little over 6 ms)
    # warm-up, then whole iterations until half the minimum (30 ms) has passed: five of 6 ms or a sixth
    assert log in (["f", "b"] * (1 + 5), ["f", "b"] * (1 + 6))
    windows = time_windows(Steps(forward, backward), CPU, TimingPlan(0, 2, shape.iterations))
    assert min(windows["combined"]) >= 55.0
    # never fewer than the scale's iterations; no minimum, no change
    assert calibrated(_plan(10.0, iterations=30), Steps(forward, backward), CPU).iterations == 30
    unchanged = _plan(0.0)
    assert calibrated(unchanged, Steps(forward, backward), CPU) is unchanged
    assert shape.windows == 5  # no min_timed_ms: the scale's windows


def test_calibration_adds_windows_until_a_phase_lasts_the_minimum_time():
    log: list[str] = []
    forward, backward = sleeper(log)  # one iteration sleeps 6 ms
    shape = calibrated(_plan(12.0, min_timed_ms=150.0), Steps(forward, backward), CPU)
    assert shape.iterations == 2  # ceil(12 / a little over 6 ms)
    assert 9 <= shape.windows <= 13  # ceil(150 / a little over 12 ms)
    windows = time_windows(Steps(forward, backward), CPU, TimingPlan(0, shape.windows, shape.iterations))
    assert len(windows["combined"]) == shape.windows and sum(windows["combined"]) >= 140.0
    # never fewer than the scale's windows; only min_timed_ms asked for, iterations stay the scale's
    assert calibrated(_plan(0.0, min_timed_ms=10.0), Steps(forward, backward), CPU).windows == 5
    only_windows = calibrated(_plan(0.0, min_timed_ms=100.0), Steps(forward, backward), CPU)
    assert only_windows.iterations == 2 and 7 <= only_windows.windows <= 9  # ceil(100 / ~12.5 ms)


def _calibrate_uneven(rank: int, world: int) -> int:
    """Rank 0's iteration takes a quarter of rank 1's: both settle on the larger count rank 0 needs, so
    every rank's windows last the minimum."""

    def forward() -> None:
        time.sleep(0.002 if rank == 1 else 0.0005)

    shape = calibrated(_plan(40.0, min_timed_ms=400.0), Steps(forward, None), CPU)
    return shape.iterations, shape.windows


def test_ranks_agree_on_one_count():
    counts = run_ranks(2, _calibrate_uneven, timeout=120)
    assert counts[0] == counts[1]
    iterations, windows = counts[0]
    assert 25 <= iterations <= 80  # ceil(40 / a little over 0.5 ms)
    # with that count rank 0's windows last about 40 ms and need 10 to add up to 400 ms; rank 1's
    # last about four times as long, so the scale's 5 would do for it alone
    assert windows >= 10
