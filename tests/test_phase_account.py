"""The phase account (pipeline/bench/account.py): how an iteration's time is divided, checked by hand on
event tables built here (ranges, backward nodes, an MXFP8 GEMM's conversion; a GPU's kernels, eager
and replayed from a CUDA graph), and on a real profile of the real layer on this CPU, whose phases
and unclaimed time add up to each profiled iteration exactly."""

from __future__ import annotations

import pytest
import torch

from cutlass_kernels.torch_backend import GEMM_RANGE
from pipeline.base.vocabulary import LAYER_PHASES, range_name
from pipeline.bench import account
from pipeline.bench.account import EAGER_RANGE, ITERATION_RANGE, Event, contexts, partition
from pipeline.bench.work import build_work
from pipeline.matrix import EXECUTION_BY_ID
from pipeline.matrix.scale import shape_for
from pipeline.tools.synthetic_shards import scale_preset
from tests.plans import planned_sweep

MAIN = 1  # the thread id of the host events below
NODE = "autograd::engine::evaluate_function: "


def test_partition_gives_each_instant_to_the_claim_begun_last():
    # [0, 100): a claim a [10, 60) holding b [20, 30); c [50, 80) overlapping a's end; a gap [80, 90)
    got = partition(
        0.0,
        100.0,
        [(10.0, 60.0, "a"), (20.0, 30.0, "b"), (50.0, 80.0, "c"), (90.0, 120.0, None)],
    )
    assert got.phases == {"a": 10.0 + 20.0, "b": 10.0, "c": 30.0}  # c begun last takes [50, 60)
    assert got.unclaimed == 10.0 + 10.0 + 10.0  # before a, the gap, and the unclaimed claim's part
    assert sum(got.phases.values()) + got.unclaimed == got.span == 100.0


def _range(name: str, start: float, end: float, thread: int = MAIN) -> Event:
    return Event(name, thread, start, end)


def test_host_events_take_their_ranges_phases_and_backward_nodes_their_makers():
    """One training iteration as the profiler records it on a CPU: the layer's ranges in the forward,
    backward nodes of built-in ops (no range, a sequence number) in the backward, one MXFP8 GEMM whose
    GEMM proper is the reference's range and the rest its operands' conversion."""
    events = [
        _range(ITERATION_RANGE, 0, 100),
        _range(range_name("other").replace("other", "layer"), 0, 40),  # moe:layer
        _range(range_name("permute"), 1, 5),
        _range(range_name("fprop", mx=True), 5, 25),
        _range(GEMM_RANGE, 12, 22),
        _range(range_name("shared"), 30, 38),
        # backward: the shared expert's matmul node (made in the shared range), a node of the layer
        # outside any phase (made in moe:layer, 38-40), a node nobody made (unclaimed)
        Event(f"{NODE}MmBackward0", MAIN, 50, 60, seq=7, forward_thread=MAIN),
        Event("MmBackward0", MAIN, 51, 59, seq=7, forward_thread=MAIN),
        Event(f"{NODE}ToCopyBackward0", MAIN, 60, 64, seq=9, forward_thread=MAIN),
        Event(f"{NODE}AccumulateGrad", MAIN, 64, 66),
        # a custom function's backward: its own ranges inside the node
        Event(f"{NODE}GroupedSwiGLUBackward", MAIN, 70, 95, seq=8, forward_thread=MAIN),
        _range(range_name("dgrad"), 72, 80),
        _range(range_name("wgrad"), 80, 94),
    ]
    made = [("moe:shared", 6, 8), ("moe:layer", 5, 10), ("moe:fprop:mx", 8, 8)]
    (it,) = account.host_iterations(events, contexts(events, made))
    assert it.span == 100
    assert it.phases == {
        # the layer at 0-1, 25-30 and 38-40; ToCopyBackward0 (made in the layer); the custom node's own
        # time around its ranges (its seq 8: the layer's)
        "other": 1 + 5 + 2 + 4 + 3,
        "permute": 4,
        "fprop": 10,  # the GEMM inside the MX range
        "quantize": 10,  # the MX range's conversion around it
        "shared": 8 + 10,  # forward, and its backward node
        "dgrad": 8,
        "wgrad": 14,
    }
    assert it.unclaimed == 10 + 2 + 4 + 5  # 40-50, AccumulateGrad, 66-70, 95-100
    assert sum(it.phases.values()) + it.unclaimed == it.span


def test_replayed_kernels_are_named_by_their_eager_twins():
    """On a GPU: one eager iteration whose kernels the ops launched (correlation ids), then replays of
    a graph that launch the same kernels with no range around them; one replayed kernel has no twin
    (unclaimed). Each iteration runs from its first kernel to the next one's; idle time is unclaimed."""
    host = [
        _range(EAGER_RANGE, 0, 50),
        Event(range_name("fprop"), MAIN, 1, 10, correlation=11),
        Event(range_name("swiglu"), MAIN, 10, 20, correlation=12),
        Event(range_name("fprop", mx=True), MAIN, 20, 30, correlation=13),
        Event(range_name("combine"), MAIN, 30, 40, correlation=14),
        *(_range(ITERATION_RANGE, 100 + 10 * i, 105 + 10 * i) for i in range(3)),
    ]
    for i, h in enumerate(host[-3:]):
        host[-3 + i] = Event(h.name, MAIN, h.start, h.end, correlation=90 + i)

    def kernel(name: str, start: float, end: float, linked: int) -> Event:
        return Event(name, 7, start, end, linked=linked, device=True)

    eager = [
        kernel("grouped_GroupedGemm_fprop", 60, 70, 11),
        kernel("silu_mul", 70, 72, 12),
        kernel("fp32_to_bf16", 72, 74, 13),  # inside the MX GEMM's range, no GEMM: quantization
        kernel("kernel_cutlass_Sm90GroupedGemm", 74, 84, 13),  # its GEMM
        kernel("ncclDevKernel_SendRecv", 84, 90, 14),
    ]
    replays = []
    for i, begin in enumerate((1000.0, 1100.0, 1200.0)):
        names = (
            [k.name for k in eager]
            if i != 1
            else [eager[0].name, "unknown_kernel", *[k.name for k in eager[1:]]]
        )
        at = begin
        for name in names:
            replays.append(kernel(name, at, at + 10, 90 + i))
            at += 12  # 2 idle after each kernel
    events = [*host, *eager, *replays]
    found = account.device_iterations(events, contexts(events), graphs=True)
    assert len(found) == 2  # the last replay only ends the one before it
    first, second = found
    assert first.span == second.span == 100.0
    assert first.phases == {"fprop": 20.0, "swiglu": 10.0, "quantize": 10.0, "combine": 10.0}
    assert first.unclaimed == 100.0 - 50.0 and (first.kernels, first.named) == (5, 5)
    assert second.phases == first.phases and (second.kernels, second.named) == (6, 5)
    assert second.unclaimed == 100.0 - 50.0 - 10.0 + 10.0  # its idle time, less one gap, and the stranger
    # without graphs each kernel is named by its launching op directly: here the iteration range, no
    # layer phase (launched outside the layer: unclaimed, though every kernel's launcher is known)
    eager_only = account.device_iterations(events, contexts(events), graphs=False)
    assert eager_only[0].phases == {} and eager_only[0].unclaimed == 100.0 and eager_only[0].named == 5


@pytest.fixture(scope="module")
def layer_steps():
    """The real MXFP8 training layer at scale=ci on one rank (fp8 dispatch: quantization both ways)."""
    execution = EXECUTION_BY_ID["training-ep32-f3072-mxfp8-dist-moe-fp8-dispatch"]
    shape = shape_for(execution.workload, scale_preset("ci", 1))
    work = build_work(execution, shape, 0, torch.device("cpu"), 0)
    steps = work.steps()
    steps.warm_up(1)
    return steps


def test_a_real_profile_divides_each_iteration_exactly(layer_steps):
    found, why = account.profiled(layer_steps, layer_steps, torch.device("cpu"), 3)
    assert why is None and len(found) == 3
    for it in found:
        assert sum(it.phases.values()) + it.unclaimed == pytest.approx(it.span, rel=1e-12, abs=1e-9)
        assert set(it.phases) <= set(LAYER_PHASES)
        # the layer's phases on one rank: GEMMs of every op, conversions, no communication
        for phase in ("fprop", "dgrad", "wgrad", "quantize", "swiglu", "permute", "shared"):
            assert it.phases.get(phase, 0.0) > 0, phase
        assert "dispatch" not in it.phases and "combine" not in it.phases
    spans = [it.span / 1e3 for it in found]
    slowest = max(range(3), key=lambda i: spans[i])
    record = account.rank_account(0, found, (96,), spans[slowest] * 2, 1)  # nearest a slower median
    assert (record.first, record.length, record.profiled_ms) == (slowest, 1, spans[slowest])
    assert record.iterations == 3 and list(record.spans_ms) == spans
    # a window of three: the run whose mean is nearest, the per-iteration means of its phases
    whole = account.rank_account(0, found, (96,), sum(spans) / 3, 3)
    assert (whole.first, whole.length) == (0, 3) and whole.profiled_ms == pytest.approx(sum(spans) / 3)
    for phase in LAYER_PHASES:
        mean = sum(it.phases.get(phase, 0.0) for it in found) / 3 / 1e3
        assert whole.phases[phase] == pytest.approx(mean, rel=1e-12, abs=1e-15)
    assert sum(record.phases.values()) + record.unclaimed_ms == pytest.approx(record.profiled_ms, rel=1e-9)


def test_profiling_leaves_no_range_behind(layer_steps):
    """After a profile the layer's ranges are off again (a timed step carries none) and the noted
    autograd numbers are cleared."""
    from pipeline.moe import ranges

    account.profiled(layer_steps, layer_steps, torch.device("cpu"), 3)
    assert not torch.autograd.profiler._is_profiler_enabled and ranges.MADE == []
    assert ranges.phase("fprop") is ranges._OFF


def test_an_account_that_does_not_add_up_is_refused():
    """A shard is untrusted input: a rank's phases and unclaimed time must add up to its profiled
    iteration, and it must name every phase."""
    from pipeline.data.meta import RankAccount

    phases = dict.fromkeys(LAYER_PHASES, 1.0)
    spans = (11.0, 12.0, 13.0)
    assert RankAccount(0, 3, spans, 1, 1, 12.0, phases, 2.0, (96,), None, None).profiled_ms == 12.0
    assert RankAccount(0, 3, spans, 0, 3, 12.0, phases, 2.0, (96,), None, None).length == 3  # their mean
    with pytest.raises(ValueError, match="add up to 12.0 ms, not profiled_ms 13.0"):
        RankAccount(0, 3, spans, 2, 1, 13.0, phases, 2.0, (96,), None, None)
    with pytest.raises(ValueError, match="phases must name exactly"):
        wrong = {**phases, "mystery": 1.0} | {"other": 0.0}
        RankAccount(0, 3, spans, 0, 1, 11.0, wrong, 1.0, (96,), None, None)
    with pytest.raises(ValueError, match="spans_ms must hold the 3 iterations' spans"):
        RankAccount(0, 3, (11.0, 13.0), 0, 1, 11.0, phases, 1.0, (96,), None, None)
    with pytest.raises(ValueError, match="is not the mean span of its run"):
        RankAccount(0, 3, spans, 0, 2, 12.0, phases, 2.0, (96,), None, None)


def test_a_job_keeps_its_ranks_profiles_where_its_sweep_asked(tmp_path):
    """``keep_traces`` reaches the job as a field of its spec, read from the composed config once."""
    one = ["workload=inference-ep8-f1536", "variant=mok-bf16", "scale=ci"]
    (kept,) = planned_sweep(tmp_path / "kept", [*one, "keep_traces=true"])
    (plain,) = planned_sweep(tmp_path / "plain", one)
    assert (kept.keep_traces, plain.keep_traces) == (True, False)
    assert (kept.config["keep_traces"], plain.config["keep_traces"]) == (True, False)  # recorded as composed
