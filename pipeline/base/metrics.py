"""Published metrics of one execution: reduced iteration times and useful-work rates.

Iteration time follows the report's definition: for each phase, each rank's median over its timing
windows of ``window_ms / iterations``, then the maximum over ranks (the slowest GPU decides).
Forward, backward and combined are reduced separately, so they need not add up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.base.vocabulary import KINDS, PHASES, WORK_MULTIPLE


@dataclass(frozen=True)
class SlowestRank:
    """One phase of a shard, reduced: the published time and the windows behind it."""

    ms: float  # the slowest rank's median of per-iteration window times (the lowest rank on ties)
    windows: np.ndarray  # that rank's per-iteration window times, in the order of the rows
    rank: int = 0  # which rank that is

    @property
    def spread(self) -> tuple[float, float]:
        """Min and max of those windows: how far the median could move with other windows."""
        return float(self.windows.min()), float(self.windows.max())


def slowest_rank(rank: np.ndarray, window_ms: np.ndarray, iterations: np.ndarray) -> SlowestRank:
    """Max over ranks of the per-rank median of per-iteration window times (one phase's rows), with
    that rank's windows as listed (a shard lists each rank's windows in the order they were timed,
    which is how consecutive windows depend on each other)."""
    ranks, medians, rank, per_iteration = _rank_medians(rank, window_ms, iterations)
    slowest = int(np.argmax(medians))
    return SlowestRank(float(medians[slowest]), per_iteration[rank == ranks[slowest]], int(ranks[slowest]))


def _rank_medians(
    rank: np.ndarray, window_ms: np.ndarray, iterations: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ranks, their medians of per-iteration window times, rank per row, per-iteration ms per row)."""
    rank = np.asarray(rank)
    per_iteration = _per_iteration_ms(window_ms, iterations)
    if rank.shape != per_iteration.shape:
        raise ValueError(f"rank has {rank.shape} entries but window_ms has {per_iteration.shape}")
    if per_iteration.size == 0:
        raise ValueError("no window rows to reduce; at least one window per rank is required")
    # Sort by rank, then time, so each rank's windows form one sorted run; pick its middle element(s).
    order = np.lexsort((per_iteration, rank))
    values = per_iteration[order]
    by_rank = rank[order]
    starts = np.flatnonzero(np.concatenate(([True], by_rank[1:] != by_rank[:-1])))
    ranks, sizes = by_rank[starts], np.diff(np.append(starts, by_rank.size))
    medians = 0.5 * (values[starts + (sizes - 1) // 2] + values[starts + sizes // 2])
    return ranks, medians, rank, per_iteration


def phase_ms(
    phase: np.ndarray, rank: np.ndarray, window_ms: np.ndarray, iterations: np.ndarray
) -> dict[str, float]:
    """Slowest-rank iteration time of every phase present: ``{"forward": ms, ...}``."""
    return {name: reduced.ms for name, reduced in phases(phase, rank, window_ms, iterations).items()}


def phases(
    phase: np.ndarray, rank: np.ndarray, window_ms: np.ndarray, iterations: np.ndarray
) -> dict[str, SlowestRank]:
    """Every phase present, reduced once (``slowest_rank``): the published times, their spread and
    a comparison's windows all read this."""
    phase = np.asarray(phase)
    unknown = sorted(set(np.unique(phase).tolist()) - set(PHASES))
    if unknown:
        raise ValueError(f"unknown phase(s) {unknown}; allowed: {', '.join(PHASES)}")
    rank, window_ms, iterations = np.asarray(rank), np.asarray(window_ms), np.asarray(iterations)
    out: dict[str, SlowestRank] = {}
    for name in PHASES:
        rows = phase == name
        if rows.any():
            out[name] = slowest_rank(rank[rows], window_ms[rows], iterations[rows])
    return out


def useful_flops(kind: str, tokens: int, d_model: int, d_ff: int, top_k: int, num_shared: int = 1) -> float:
    """Useful GEMM FLOPs per GPU per iteration: 6*T*(K+S)*D*F forward (K routed and S shared experts
    a token, the report's one shared expert by default; three GEMMs of 2 FLOPs per multiply-add), x3
    for training, x30 for packing. No padding, no recompute."""
    if kind not in WORK_MULTIPLE:
        raise ValueError(f"unknown kind {kind!r}; allowed: {', '.join(KINDS)}")
    for name, value in (("tokens", tokens), ("d_model", d_model), ("d_ff", d_ff), ("top_k", top_k)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if int(num_shared) != num_shared or num_shared < 0:
        raise ValueError(f"num_shared must be an integer >= 0, got {num_shared!r}")
    return 6.0 * tokens * (top_k + num_shared) * d_model * d_ff * WORK_MULTIPLE[kind]


def tera_per_second(amount: float, iteration_ms: float) -> float:
    """``amount`` per iteration as a decimal tera-rate (TFLOP/s for FLOPs, TB/s for bytes)."""
    if not np.isfinite(iteration_ms) or iteration_ms <= 0:
        raise ValueError(f"iteration_ms must be a positive finite number, got {iteration_ms!r}")
    return amount / (iteration_ms * 1e-3) / 1e12


def useful_tflops_per_gpu(
    kind: str, tokens: int, d_model: int, d_ff: int, top_k: int, iteration_ms: float, num_shared: int = 1
) -> float:
    """Useful TFLOP/s per GPU: useful work of one GPU over the slowest GPU's iteration time."""
    return tera_per_second(useful_flops(kind, tokens, d_model, d_ff, top_k, num_shared), iteration_ms)


def _per_iteration_ms(window_ms: np.ndarray, iterations: np.ndarray) -> np.ndarray:
    window_ms = np.asarray(window_ms, dtype=np.float64)
    iterations = np.asarray(iterations)
    if window_ms.shape != iterations.shape:
        raise ValueError(f"window_ms has {window_ms.shape} entries but iterations has {iterations.shape}")
    bad = ~np.isfinite(window_ms) | (window_ms < 0)
    if bad.any():
        raise ValueError(f"window_ms must be finite and >= 0, got {window_ms[bad][:3].tolist()}")
    if np.any(iterations < 1):
        raise ValueError(f"iterations must be >= 1, got {sorted(set(iterations[iterations < 1].tolist()))}")
    return window_ms / iterations
