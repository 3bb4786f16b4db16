"""Timing windows: phases timed separately, backward without its forward, warm-up untimed."""

import time

import pytest
import torch

from pipeline.bench.timing import Clock, time_windows
from pipeline.vocabulary import timed_phases

FORWARD_S, BACKWARD_S = 0.004, 0.002


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
    times = time_windows(forward, backward, Clock(torch.device("cpu")), 2, windows, iterations)
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
    times = time_windows(forward, None, Clock(torch.device("cpu")), 0, 2, 3)
    assert list(times) == ["forward", "combined"] == list(timed_phases(False))
    assert all(3 * FORWARD_S * 1e3 <= t for v in times.values() for t in v)
    assert "".join(log) == "f" * 12


@pytest.mark.parametrize("device", ["cpu"])
def test_clock_measures_milliseconds(device):
    clock = Clock(torch.device(device))
    started = clock.start()
    time.sleep(0.02)
    assert 20 <= clock.stop(started) < 200
