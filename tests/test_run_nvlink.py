"""NVLink sampling: ranks agree once on how many repetitions make the sample, then repeat them back to
back in step; CPUs report null rates with a reason."""

from types import SimpleNamespace

import pytest
import torch

from pipeline.bench import nvlink
from pipeline.bench.nvlink import nvlink_rates, repeat, repetitions
from pipeline.data.meta import NVLink
from pipeline.tools.ranks import run_ranks


def _uneven_ranks(rank: int, world: int) -> tuple[int, int, float]:
    """Rank 1's iteration takes 5x rank 0's: both repeat as often as rank 1 needs for 0.2 s. An
    iteration advances a virtual ``perf_counter`` by its time, so the seconds ``repeat`` reports are
    exactly what the iterations took."""
    iteration_ms = 2.0 if rank == 0 else 10.0
    count, now = 0, [0.0]
    nvlink.time = SimpleNamespace(perf_counter=lambda: now[0])  # type: ignore[assignment]

    def work() -> None:
        nonlocal count
        count += 1
        now[0] += iteration_ms / 1e3

    times = repetitions(iteration_ms, 0.2, torch.device("cpu"))
    seconds = repeat(work, times, torch.device("cpu"))
    return times, count, seconds


@pytest.mark.slow
def test_ranks_agree_once_and_repeat_in_step_for_at_least_the_time_asked():
    (t0, n0, s0), (t1, n1, s1) = run_ranks(2, _uneven_ranks, timeout=120)
    assert t0 == t1 == 100  # 0.2 s of rank 0's 2 ms iterations: the most any rank needs
    assert n0 == n1 == 100  # in step (a collective workload would not hang)
    # the seconds of the repetitions: rank 0's 100 x 2 ms, rank 1's 100 x 10 ms
    assert round(s0, 9) == 0.2 and round(s1, 9) == 1.0


def test_cpu_has_no_nvlink_counters():
    calls = []
    out = nvlink_rates(torch.device("cpu"), lambda: calls.append(1), 10)
    assert out == NVLink(None, None, None, "no CUDA device: NVLink counters need a GPU")
    assert calls == []
