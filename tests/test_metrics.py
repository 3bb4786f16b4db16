"""Reductions and useful-work rates against naive float64 references on random window times (each
test's own seed)."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from pipeline.base.metrics import (
    phase_ms,
    slowest_rank,
    tera_per_second,
    useful_flops,
    useful_tflops_per_gpu,
)


def _naive_slowest(rows: list[tuple[int, float, int]]) -> float:
    """Per rank: statistics.median of window/iterations; then max over ranks."""
    by_rank: dict[int, list[float]] = {}
    for rank, ms, iters in rows:
        by_rank.setdefault(rank, []).append(ms / iters)
    return max(statistics.median(v) for v in by_rank.values())


def _random_rows(rng: np.random.Generator, ranks: int, windows: int) -> list[tuple[str, int, float, int]]:
    rows = []
    for phase in ("forward", "backward", "combined"):
        for r in range(ranks):
            for _ in range(windows):
                rows.append((phase, r, float(rng.lognormal(3.0, 0.5)), int(rng.integers(1, 40))))
    order = rng.permutation(len(rows))  # rows arrive in any order
    return [rows[i] for i in order]


@pytest.mark.parametrize("ranks,windows", [(1, 5), (8, 5), (64, 5), (3, 4), (5, 1)])
def test_phase_ms_matches_naive_reduction(ranks: int, windows: int, rng: np.random.Generator) -> None:
    rows = _random_rows(rng, ranks, windows)
    phase, rank, ms, iters = (np.array(c) for c in zip(*rows, strict=True))
    got = phase_ms(phase, rank, ms, iters)
    assert set(got) == {"forward", "backward", "combined"}
    for name, value in got.items():
        expected = _naive_slowest([(r, m, i) for p, r, m, i in rows if p == name])
        assert value == pytest.approx(expected, rel=1e-12)


def test_slowest_rank_is_the_max_of_medians_not_the_median_of_all() -> None:
    # rank 0: 10, 10, 100 ms per iteration -> median 10; rank 1: 20, 20, 20 -> 20. Slowest rank: 20.
    rank = np.array([0, 0, 0, 1, 1, 1])
    window = np.array([300.0, 300.0, 3000.0, 600.0, 600.0, 600.0])
    assert slowest_rank(rank, window, np.full(6, 30)).ms == 20.0


def test_phases_are_reduced_separately(rng: np.random.Generator) -> None:
    fwd = rng.uniform(1, 2, size=5)
    bwd = rng.uniform(5, 6, size=5)
    phase = np.array(["forward"] * 5 + ["backward"] * 5)
    got = phase_ms(phase, np.zeros(10, int), np.concatenate([fwd, bwd]) * 30, np.full(10, 30))
    assert got == {"forward": pytest.approx(np.median(fwd)), "backward": pytest.approx(np.median(bwd))}


@pytest.mark.parametrize(
    "window,iters,match",
    [
        ([1.0, np.nan], [30, 30], "window_ms"),
        ([1.0, -2.0], [30, 30], "window_ms"),
        ([1.0, 2.0], [30, 0], "iterations"),
        ([1.0, 2.0], [30], "iterations has"),
    ],
)
def test_bad_window_rows_raise(window: list[float], iters: list[int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        slowest_rank(np.zeros(len(window), int), np.array(window), np.array(iters))


def test_empty_and_unknown_phase_raise() -> None:
    with pytest.raises(ValueError, match="no window rows"):
        slowest_rank(np.array([], int), np.array([]), np.array([], int))
    with pytest.raises(ValueError, match="unknown phase.*'warmup'.*allowed: forward"):
        phase_ms(np.array(["warmup"]), np.array([0]), np.array([1.0]), np.array([1]))


def test_useful_flops_against_the_report_formula(rng: np.random.Generator) -> None:
    t, d, f, k = (int(x) for x in rng.integers(1, 5000, size=4))
    forward = 2 * 3 * t * (k + 1) * d * f  # three GEMMs (gate, up, down) per expert, 2 FLOPs per MAC
    assert useful_flops("inference", t, d, f, k) == forward
    assert useful_flops("training", t, d, f, k) == 3 * forward
    assert useful_flops("packing", t, d, f, k) == 10 * 3 * forward


def test_full_scale_useful_tflops(rng: np.random.Generator) -> None:
    # T=2048, K=6, D=7168, F=3072: 6*2048*7*7168*3072 = 1,894,080,577,536 FLOPs; at 5 ms: 378.816 TFLOP/s.
    assert useful_flops("inference", 2048, 7168, 3072, 6) == 1_894_080_577_536
    assert useful_tflops_per_gpu("inference", 2048, 7168, 3072, 6, 5.0) == pytest.approx(378.8161155072)
    amount, ms = float(rng.uniform(1e9, 1e13)), float(rng.uniform(0.1, 100))
    assert tera_per_second(amount, ms) == pytest.approx(amount / (ms / 1000) / 1e12, rel=1e-15)


@pytest.mark.parametrize(
    "args,match",
    [
        (("decode", 1, 1, 1, 1), "unknown kind 'decode'; allowed: inference, training, packing"),
        (("training", 0, 1, 1, 1), "tokens must be a positive integer, got 0"),
        (("training", 1, 1.5, 1, 1), "d_model must be a positive integer"),
        (("training", 1, 1, 1, -6), "top_k must be a positive integer"),
    ],
)
def test_bad_flop_arguments_raise(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        useful_flops(*args)


@pytest.mark.parametrize("ms", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_iteration_time_raises(ms: float) -> None:
    with pytest.raises(ValueError, match="iteration_ms must be a positive finite number"):
        tera_per_second(1e12, ms)
