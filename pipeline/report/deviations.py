"""Where what ran differs from what the report measured, execution by execution, from what each shard
recorded (``meta.deviations`` of the published JSON, ``docs/dataset.md``).

At ``scale=full`` on the report's GPUs with every EP rank there is none; at the CPU scales nearly every
execution has several, and a reader of one number needs to know which: the dtype that ran, the
collective, the GEMM backend and how MXFP8 products were formed, the ranks against the EP degree, the
tokens fed to the tracked rank, the timing windows, CUDA graphs, and a crowded host. A check of what a
shard's schema version did not record (the collective, kernels and contention before version 3) says
nothing about that shard: the report lists where what ran is known to differ, never a guess.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pipeline.data.reader import Shard
from pipeline.report import communication

# What the report measured, in the terms each check compares against.
REPORT_DTYPE = "bfloat16"
REPORT_COLLECTIVE = "nccl"
REPORT_WINDOWS, REPORT_ITERATIONS = 5, 30


@dataclass(frozen=True)
class Deviation:
    """One way some executions differ from the report: what the report does, what ran instead (each
    distinct value with how many executions ran it), why it matters, and the executions."""

    what: str
    report: str
    ran: str
    effect: str
    executions: tuple[str, ...]


@dataclass(frozen=True)
class _Check:
    what: str
    report: str
    effect: str
    ran: Callable[[Shard], str | None]  # what the shard ran where it deviates, else None


def _tokens(shard: Shard) -> str | None:
    shape = shard.meta.shape
    most = max(shape.layer_tokens)
    if most == shape.nominal_tokens:
        return None
    return f"rank 0 fed up to {most} tokens = {most / shape.nominal_tokens:.2f} x T"


CHECKS = (
    _Check(
        "scale",
        "T = 2,048, D = 7,168, F = 1,536 / 3,072 / 6,144 (scale=full)",
        "absolute times and rates are of a smaller layer: compare ratios, not milliseconds",
        lambda s: (
            None
            if s.meta.config.get("scale", {}).get("name") == "full"
            else f"scale={s.meta.config.get('scale', {}).get('name')}: T = {s.meta.shape.nominal_tokens}, "
            f"D = {s.meta.shape.d_model}, F = {s.meta.shape.d_ff}"
        ),
    ),
    _Check(
        "dtype",
        "BF16 activations and weights",
        "rows and panels labelled BF16 ran in this dtype (BF16 and MXFP8 name the precision, not it)",
        lambda s: None if s.meta.shape.dtype == REPORT_DTYPE else s.meta.shape.dtype,
    ),
    _Check(
        "collective",
        "NCCL over NVLink",
        "all-to-all and barriers cost what this collective costs on this host",
        lambda s: (
            None
            if s.meta.provenance.collective in (None, REPORT_COLLECTIVE) or not communication.ran(s)
            else s.meta.provenance.collective
        ),  # on one rank no collective carries rows: the ranks check says so
    ),
    _Check(
        "grouped GEMM",
        "the implementations' GPU kernels",
        "the expert GEMMs ran on this backend",
        lambda s: (
            None if s.meta.kernels is None or s.meta.kernels.gemm.startswith("cute-") else s.meta.kernels.gemm
        ),
    ),
    _Check(
        "MXFP8 products",
        "FP8 tensor cores: E4M3 operands with E8M0 block scales",
        "MXFP8 times measure quantization and this product, not FP8 tensor cores",
        lambda s: (
            None
            if s.meta.kernels is None or s.meta.kernels.mxfp8 is None or s.meta.kernels.gemm == "cute-sm100"
            else s.meta.kernels.mxfp8
        ),
    ),
    _Check(
        "ranks",
        "EP GPUs, the slowest of them reduced, rows crossing between all of them",
        "the slowest GPU is chosen among the launched ranks, not among EP, and rows cross only between "
        "them: on one rank no collective runs and nothing crosses a link (communication none: 1 rank; "
        "no all-to-all is predicted or counted, NVLink is empty)",
        lambda s: (
            None
            if s.meta.shape.ranks == s.meta.shape.ep
            else f"{s.meta.shape.ranks} of EP ranks ({communication.of_shard(s)})"
        ),
    ),
    _Check(
        "tracked rank's tokens",
        "T tokens per GPU; the tracked GPU receives f x T x K routed rows",
        "with fewer ranks than EP, rank 0 is fed T' > T tokens so that every rank keeps its full-scale "
        "routed load; its shared expert, dispatch and combine then work on T' tokens, which inflates the "
        "work both implementations share and pulls speedups toward 1",
        _tokens,
    ),
    _Check(
        "timing windows",
        f"the median of {REPORT_WINDOWS} windows of {REPORT_ITERATIONS} iterations",
        "the scale's windows and iterations (calibrated to a minimum window time)",
        lambda s: (
            None
            if (s.meta.timing.plan.windows, s.meta.timing.plan.iterations)
            == (REPORT_WINDOWS, REPORT_ITERATIONS)
            else f"{s.meta.timing.plan.windows} windows of {s.meta.timing.plan.iterations} iterations"
        ),
    ),
    _Check(
        "CUDA graphs",
        "both implementations replay CUDA graphs",
        "eager steps include launch overhead that graph replay removes",
        lambda s: None if s.meta.timing.cuda_graphs else "eager steps",
    ),
    _Check(
        "host contention",
        "one rank per GPU, nothing else on its cores",
        "time-slicing with other runnable processes stretched the timing windows (cpuWaitShare)",
        lambda s: "oversubscribed" if s.meta.contention.oversubscribed else None,
    ),
)


def deviations(shards: Iterable[Shard]) -> list[Deviation]:
    """Every check that some execution fails, with the executions that fail it (sorted)."""
    found: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for shard in sorted(shards, key=lambda s: s.execution_id):
        for check in CHECKS:
            ran = check.ran(shard)
            if ran is not None:
                found[check.what].append((shard.execution_id, ran))
    out = []
    for check in CHECKS:
        if check.what in found:
            hits = found[check.what]
            ran = _summary(Counter(ran for _, ran in hits))
            out.append(Deviation(check.what, check.report, ran, check.effect, tuple(e for e, _ in hits)))
    return out


def _summary(values: Counter[str], most: int = 3) -> str:
    """The most common values with their counts, then how many other values there were."""
    common = sorted(values.items(), key=lambda vn: (-vn[1], vn[0]))
    text = "; ".join(f"{value} ({n})" for value, n in common[:most])
    rest = len(common) - most
    return f"{text}; {rest} other value(s)" if rest > 0 else text
