"""What a device run does, decided before it starts: its stages, each one's limit and reserve, the
steps in order of truth per second, and what the command line asks for. No I/O, no children."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cutlass_kernels import gating
from cutlass_kernels.gating import (
    KERNEL_STAGES,
    MX_QUANT,
    MX_QUANT_KEY,
    SWIGLU,
    SWIGLU_FWD,
    SWIGLU_FWD_KEY,
    SWIGLU_KEY,
)
from cutlass_kernels.plants import Plant
from pipeline.matrix import EXECUTION_BY_ID

ROOT = Path(__file__).resolve().parents[2]  # the checkout: the children's working folder
TOTAL_S = 550  # the whole run: one call of the device tool (600 s at most) inside a 15-minute window
OUTER_S = 15  # jobs/gpu-run.sh kills the run this long after its total (docs/gpu.md: the call's limit)
UNPACKED_S = 20  # what unpacking the DSL archive and the kernel cache takes out of the total (~5 s)
STAGES = (
    *("env", "smoke", "correctness", "timing", "pipeline", "account", "loopback", "ranks", "packing"),
    "tests",
)
# each stage's limit; "<stage>-kernel": each child of a kernel stage (one kernel, or one op x variant);
# "<name>-kernel" for an elementwise kernel of ELEMENTWISE: its correctness or timing child
LIMITS_S = {
    "env": 30,
    "tests": 75,
    "loopback": 40,  # one process: a one-rank NCCL group, two layers captured and timed
    "ranks": 90,  # eight processes on one GPU: imports, weights at full scale, two executions' gates
    "pipeline": 330,  # more than its reserve: what the steps before it leave goes to its executions
    "account": 15,  # reads the pipeline's published accounts
    "packing": 240,  # one packing execution at scale=full (the launcher's nominal 240 s), aggregated
    "smoke-kernel": 45,  # compile (file-cached for the later stages) + one launch
    "correctness-kernel": 50,  # every case of an op x variant, both output dtypes, graph replay
    "timing-kernel": 40,  # every shape of an op x variant that fits, see TIMING_MARGIN_S
    "swiglu-kernel": 30,  # the SwiGLU backward's correctness (8 cases) or timing (2 shapes) child
    "mxquant-kernel": 30,  # the MX quantization kernel's correctness (both modes) or timing child
    "swiglufwd-kernel": 30,  # the fused SwiGLU forward's correctness (8 cases) or timing child
    "sass": 20,
}
# The elementwise kernels, each one step name (a "variant" of the kernel stages) and one key with
# correctness and timing only (gating.stages_of): the SwiGLU backward, the MX quantization in one
# pass, the SwiGLU forward fused with A's MX quantization
ELEMENTWISE = {SWIGLU: SWIGLU_KEY, MX_QUANT: MX_QUANT_KEY, SWIGLU_FWD: SWIGLU_FWD_KEY}
# The kernels not yet checked on a GPU: their gate and timing come first (then the matched pairs)
NEW = (MX_QUANT, SWIGLU_FWD, "ragged_tile", "inplace_tile", "tma_tail64")
# What each step (by its label) keeps for itself from the run's start, in device seconds (the first
# H200 window's times, about 1.3x); a variant's kernel steps among the gate's (the chosen ones) and the
# new ones keep VARIANT_RESERVE_S. The reserves go to the steps in order while the window holds them
# (:func:`reserves`): a step past that, or not named, runs on what the others leave.
RESERVE_S = {
    "env": 20,
    "smoke default": 15,
    "correctness default": 15,
    "correctness swiglu": 10,
    "correctness mxquant": 10,
    "correctness swiglufwd": 10,
    "timing mxquant": 12,
    "timing swiglufwd": 12,
    "timing default": 45,
    "pipeline": 150,
    "account": 5,
    "loopback": 20,
    "ranks": 50,
    "packing": 150,
    "tests": 40,
    "timing swiglu": 12,
    "sass": 15,
}
VARIANT_RESERVE_S = {"smoke": 12, "correctness": 12, "timing": 20}
TIMING_MARGIN_S = 10  # a timing child starts no shape this close to its limit: a kill there is a hang
PARALLEL = 8  # smoke and correctness children at once (each one GPU context of ~0.5-5 GB)
MAX_SCALE = 4.0  # the most the dry run stretches its times on a loaded host (see contention())
PLANTED_LIMIT_S = 5
UNPACK_S = 60  # the limit of unpacking the DSL archive (inside the run's TOTAL_S)
SMI_S = 10  # each nvidia-smi call
AGGREGATE_S = 25  # kept back from the pipeline stage for aggregating whatever shards exist
STATUS_S = 10  # and, after a multirun that failed, for pipeline.status
POLL_S = 2.0  # how often summary.md is refreshed while children run
SPENT = "the kernel stages' time is spent"  # why a kernel step was cut
RUN_SPENT = "the run's time is spent"  # why another step was
RERUN_TOTAL_S = 220  # a rerun's budget: what is left of a window after a first run
# the CUDA-only tests, quickest first: pytest runs them in this order, and each ends in a record of
# its own (jobs/gpu_run/pytest_records.py) the moment it ends; the NCCL cases share one spawned rank
CUDA_TESTS = (
    "tests/test_run_timing.py::test_cuda_laps_are_the_kernels_intervals",
    "tests/test_run_graphs.py",
    "tests/test_moe_layer.py::test_nccl_one_rank",
)


@dataclass(frozen=True)
class Sweep:
    """What a pipeline step sweeps: its workloads x variants (``pipeline.run`` overrides), at
    ``scale=full`` with ``max_ranks=1`` on a GPU, at ``scale=ci`` in the dry run."""

    workloads: str
    variants: str

    def execution_ids(self) -> list[str]:
        """The report's executions this sweep runs, in the matrix's order."""
        workloads, variants = self.workloads.split(","), self.variants.split(",")
        found = EXECUTION_BY_ID.items()
        return [eid for eid, e in found if e.workload.name in workloads and e.variant.name in variants]

    def overrides(self, dry_run: bool) -> list[str]:
        scale = "ci" if dry_run else "full"
        return [f"scale={scale}", "max_ranks=1", f"workload={self.workloads}", f"variant={self.variants}"]


# The matched pairs: MoK against the Dist-MoE pipeline of the same workload and precision (BF16: MoK
# BF16 and Dist-MoE BF16 share each workload id), one workload of each kind, the cheapest first; the
# dry run's: one inference pair (the plumbing's test: the pipeline's own tests run the rest on the CPU)
PAIRS = Sweep(
    "inference-ep8-f3072,training-ep32-f3072,packing-ep32-f3072-profile-a", "mok-bf16,dist-moe-bf16"
)
DRY_PAIRS = Sweep("inference-ep8-f1536", "mok-bf16,dist-moe-bf16")
# The packing execution of Dist-MoE MXFP8 (fp8 dispatch), whose measured peak is set beside its
# estimate (python -m pipeline.estimate at the ESTIMATED preset, kept in the pack: jobs.gpu_run.pack)
PACKING = Sweep("packing-ep32-f3072-profile-a", "dist-moe-fp8-dispatch")
ESTIMATED = "h200"
# the ranks step: EP8 at scale=full as eight processes on the one GPU (gloo), MoK's and Dist-MoE's
# BF16 layers, whose gates' peaks (python -m pipeline.estimate: 7.2 and 4.9 GiB a rank) fit an H100
# eight times over with the processes' contexts; the dry run: two CPU ranks at scale=ci (the plumbing)
RANKS = ["--executions", "inference-ep8-f3072-bf16-mok-native,inference-ep8-f1536-bf16-dist-moe-bf16"]
DRY_RANKS = [*RANKS, "--ranks", "2", "--scale", "ci", "--device", "cpu"]
PUBLISHED = "iterationMS forwardMS backwardMS usefulTFLOPsPerGPU peakAllocatedGiB nvlinkTxGBs device".split()
PUBLISHED += ["sanityMaxError", "sanityTolerance", "sanityPassed", "communication", "mxfp8Products"]
PUBLISHED += ["profiledMS", "profiledOverTimed", "speedOfLightMS", "expectedMS", "measuredOverExpected"]
PUBLISHED += ["git_sha"]
# each published pair's (pipeline.report.pairs): MoK's iteration over Dist-MoE's, its 95% interval
PAIR_FIELDS = "workload_id dist_execution_id mok_execution_id pipeline ranks device".split()
PAIR_FIELDS += ["mokIterationMS", "distIterationMS", "speedup", "speedupLow", "speedupHigh"]
# The account step's bounds on a GPU: a profiled iteration this close to the timed one, and at least
# this share of a CUDA graph's kernels named by their eager twins (a dry run's windows are too short
# for the first: it records the ratio only).
ACCOUNT_WITHIN, ACCOUNT_NAMED = 0.15, 0.9
PHASES = (
    "process",
    "init",
    "connect",
    "build",
    "gate",
    "capture",
    "calibrate",
    "windows",
    "account",
    "record",
)
ENV_FIELDS = (
    "device capability driver sm_clock_mhz sm_clock_max_mhz mem_clock_max_mhz torch cuda nccl".split()
)
ENV_FIELDS += ["cuda-bindings", "nvidia-cutlass-dsl", "backend"]
DEFAULT = "default"  # the kernel variant the layers run
INNER_ENV = "GPU_RUN_INNER"  # set in the watched child that runs the steps: [scale, work, run id]
RECORDS_ENV = "GPU_RUN_RESULTS"  # where jobs/gpu_run/pytest_records.py appends each test's record
STALLABLE = ("tests", "pipeline")
_VARIANT_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Step:
    """One step of the run: a stage (a kernel stage for one ``variant``), or a planted one."""

    stage: str
    variant: str | None = None

    @property
    def label(self) -> str:
        return self.stage if self.variant is None else f"{self.stage} {self.variant}"


@dataclass(frozen=True)
class Asked:
    """What the command line asks for: the stages (in the fixed order), the variants (None: all), the
    limits, the planted stages (after which stage), the dry run's kernel faults and the stages planted
    to stall (their child sleeps until it is killed at the stage's limit)."""

    stages: list[str]
    variants: tuple[str, ...] | None
    limits: dict[str, float]
    planted: dict[str, list[str]]
    plants: tuple[str, ...]
    stalls: tuple[str, ...]


def asked(args: argparse.Namespace) -> Asked:
    """What the arguments ask for; a ValueError naming the bad one."""
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    for s in chosen:
        if s not in STAGES:
            raise ValueError(f"unknown stage {s!r} in --only; allowed: {', '.join(STAGES)}")
    stages = [s for s in STAGES if s in chosen]
    variants = None
    if args.variants != "all":
        variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
        bad = [v for v in variants if not _VARIANT_NAME.fullmatch(v)] or ([] if variants else [args.variants])
        if bad:
            raise ValueError(
                f"--variants {bad[0]!r}: want all, or variant names (a-z, 0-9, _) separated by commas"
            )
    table: dict[str, float] = dict(LIMITS_S)
    planted: dict[str, list[str]] = {}
    plants: list[str] = []
    stalls: list[str] = []
    for plant in args.plant:
        parts = plant.split(":")
        if len(parts) == 3:
            if not args.dry_run:
                raise ValueError(f"--plant {plant!r}: planted kernel faults exist in the dry run only")
            Plant.parse(plant)
            plants.append(plant)
            continue
        kind, after = (parts + [""])[:2]
        if kind == "stall" and len(parts) == 2 and after in STALLABLE and after in stages:
            stalls.append(after)
            continue
        if len(parts) != 2 or kind not in ("fail", "hang") or after not in stages:
            raise ValueError(
                f"--plant {plant!r}: want fail:STAGE or hang:STAGE with STAGE one of {stages}, "
                f"stall:STAGE with STAGE one of {list(STALLABLE)}, "
                "or KIND:STAGE:KEY (a kernel fault, dry run only)"
            )
        planted.setdefault(after, []).append(f"planted-{kind}")
        table[f"planted-{kind}"] = PLANTED_LIMIT_S
    for item in args.limit:
        name, _, value = item.partition("=")
        if name not in table or not value.replace(".", "", 1).isdigit() or float(value) <= 0:
            raise ValueError(f"--limit {item!r}: want NAME=SECONDS with NAME one of {', '.join(table)}")
        table[name] = float(value)
    if args.total <= 0:
        raise ValueError(f"--total {args.total:g}: want a positive number of seconds")
    if args.dataset is not None and args.dataset.exists() and not args.dataset.is_dir():
        raise ValueError(f"--dataset {args.dataset}: a file; want a dataset folder (or a path to make one)")
    return Asked(stages, variants, table, planted, tuple(plants), tuple(stalls))


def steps(
    stages: Sequence[str],
    variants: Sequence[str],
    planted: dict[str, list[str]] | None = None,
    chosen: Sequence[str] = (),
) -> list[Step]:
    """The run's steps in order of truth per second. First env; the gate of the stages that run layers
    (the smoke and correctness of the default kernels, of the ``chosen`` variants, those the per-shape
    table names, and of the SwiGLU backward kernel, ``swiglu``, correctness only); then the kernels not
    yet checked on a GPU (:data:`NEW`): their checks, then their timing, then the defaults' timing
    (what the variant table measures them against); the matched pairs (pipeline) and their phase
    account; the loopback and the ranks sharing the GPU; the packing execution; the tests; the SwiGLU
    backward's timing; the other variants' kernel stages in turn, and the chosen ones' timing
    (``variants`` as given); the SASS check (of the cubins smoke kept). A planted stage comes right
    after the first step of the stage it follows."""
    gate = [v for v in (DEFAULT, *chosen, SWIGLU) if v in variants]
    new = [v for v in NEW if v in variants and v not in gate]
    done = {*gate, *new}

    def checks(names: Sequence[str]) -> list[Step]:
        return [Step(s, v) for v in names for s in kernel_stages(v) if s in stages and s != "timing"]

    def timing(names: Sequence[str]) -> list[Step]:
        return [Step("timing", v) for v in names if "timing" in stages]

    order = [Step("env")] if "env" in stages else []
    order += checks(gate) + checks(new) + timing(new) + timing([v for v in (DEFAULT,) if v in variants])
    later = ("pipeline", "account", "loopback", "ranks", "packing", "tests")
    order += [Step(s) for s in later if s in stages]
    order += timing([v for v in (SWIGLU,) if v in variants])
    for v in (v for v in variants if v not in done):
        order += [Step(s, v) for s in kernel_stages(v) if s in stages]
    order += timing([v for v in gate if v not in (DEFAULT, SWIGLU)])
    order += [Step("sass")] if "smoke" in stages else []
    out: list[Step] = []
    pending = dict(planted or {})
    for step in order:
        out.append(step)
        out += [Step(p) for p in pending.pop(step.stage, [])]
    return out


def reserve_of(step: Step, chosen: Sequence[str] = ()) -> float:
    """The device seconds ``step`` keeps for itself: its own (:data:`RESERVE_S`), or for a kernel step
    of a new variant, or a check of a ``chosen`` one (the gate's), :data:`VARIANT_RESERVE_S`; else
    none."""
    if step.label in RESERVE_S:
        return RESERVE_S[step.label]
    gate = step.variant in chosen and step.stage != "timing"  # the chosen ones were timed before
    return VARIANT_RESERVE_S.get(step.stage, 0.0) if step.variant in NEW or gate else 0.0


def reserves(order: Sequence[Step], budget: float, chosen: Sequence[str] = ()) -> list[float]:
    """Each step's granted reserve (:func:`reserve_of`), in order while their sum stays within
    ``budget``; from the first step that would pass it on, none (those steps run on what the others
    leave, and the summary names them: :func:`beyond`)."""
    out: list[float] = []
    full = False
    for step in order:
        own = reserve_of(step, chosen)
        full = full or sum(out) + own > budget
        out.append(0.0 if full else own)
    return out


def beyond(order: Sequence[Step], granted: Sequence[float], chosen: Sequence[str] = ()) -> list[str]:
    """The steps that keep a reserve of their own but were granted none: past the window."""
    return [s.label for s, got in zip(order, granted, strict=True) if reserve_of(s, chosen) and not got]


def reserved_after(granted: Sequence[float], i: int, scale: float = 1.0) -> float:
    """The seconds the steps after step ``i`` keep for themselves (their granted reserves, times the
    dry run's ``scale``): step ``i`` must end that long before the run's deadline."""
    return sum(granted[i + 1 :]) * scale


def kernel_stages(variant: str) -> tuple[str, ...]:
    return gating.stages_of(ELEMENTWISE[variant]) if variant in ELEMENTWISE else KERNEL_STAGES


def contention() -> float:
    """The dry run's factor on every limit and on its total: the load average of the last minute
    per CPU, at least 1 (an idle host: the device run's times), at most MAX_SCALE. On a CPU host
    shared with other work the children's time is mostly start-up (imports of torch, the DSL,
    Hydra, pyarrow) that stretches with the load, while a planted hang ends only at its limit: so
    every time stretches alike, and the run keeps its proportions and every result."""
    return min(MAX_SCALE, max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1)))
