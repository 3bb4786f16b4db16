"""NVLink sampling: ranks repeat the workload in step, and CPUs report null rates with a reason."""

import time

import torch

from pipeline.bench.nvlink import nvlink_rates, repeat_for
from tests.distributed import run_ranks


def _uneven_ranks(rank: int, world: int) -> tuple[int, float]:
    """Rank 1 works 5x slower: left to itself rank 0 would repeat ~100 times, rank 1 ~20."""
    count = 0

    def work() -> None:
        nonlocal count
        count += 1
        time.sleep(0.002 if rank == 0 else 0.010)

    seconds = repeat_for(work, 0.2, torch.device("cpu"))
    return count, seconds


def test_ranks_repeat_in_step_for_at_least_the_time_asked():
    (n0, s0), (n1, s1) = run_ranks(2, _uneven_ranks, timeout=120)
    assert n0 == n1 < 0.2 / 0.002  # in step with the slow rank (a collective workload would not hang)
    assert s0 >= 0.2 and s1 >= 0.2


def test_cpu_has_no_nvlink_counters():
    calls = []
    out = nvlink_rates(torch.device("cpu"), lambda: calls.append(1), 1.0)
    assert out == {
        "tx_bytes_per_s": None,
        "rx_bytes_per_s": None,
        "sample_seconds": None,
        "reason": "no CUDA device: NVLink counters need a GPU",
    }
    assert calls == []
