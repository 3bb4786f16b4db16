"""The device run of ``jobs/gpu-run.sh`` (``python -m jobs.gpu_run``; docs/gpu.md): the one scheduler of
every check a lent GPU runs, so that no minute goes to a kernel already known to be bad.

The order gives the most truth per second (:func:`plan.steps`): env (with the plan: the arch's kernels
and op x variants; the kernel cache verified, the record of the code checked), the gate of the stages
that run layers (the smoke and correctness of the default kernels, of the variants the per-shape table
names and of the SwiGLU backward kernel), the kernels no GPU has checked yet (the MX quantization and
SwiGLU forward kernels, the new variants: their checks, then their timing), the defaults' timing, the
matched pairs (pipeline: MoK against the Dist-MoE pipeline of the same workload and precision) and
their phase account, the multi-rank rehearsals (loopback: NCCL's all-to-alls inside captured graphs
on one rank; ranks: an EP group's processes sharing the GPU, their rows crossing ranks, through every
execution's correctness gate), the packing execution of Dist-MoE MXFP8 beside its estimate, the tests,
then the other variants' steps and the SASS check. The steps' reserves (:data:`plan.RESERVE_S`) are
granted in that order while the window holds them: a step may use only what the run has left beyond
the reserves of the steps after it, so a slow early step cannot starve a later one, and what a step
does not use goes to the next; the steps past the window run on what is left, and the summary names
what did not fit. Every check is a child process of its own, isolated
(:mod:`cutlass_kernels.isolation`: its own session, a time limit, everything it started killed at it),
and a kernel key runs in a stage only where every earlier stage passed it
(:mod:`cutlass_kernels.gating`), so a kernel that hangs or is wrong costs its own limit once. Smoke runs
up to 8 kernels at once, correctness up to 8 op x variants, timing one at a time (the GPU's time is
what it measures). The stages that run layers run on the CuTe kernels only where the kernels they run
(the three default BF16 kernels, the SwiGLU backward, the chosen variants) passed smoke and
correctness, else on the torch backend, and say so. The dry run stretches every time by the host's
load (:func:`plan.contention`).

Every result is a JSON line appended to ``OUT_DIR/results.jsonl`` the moment it exists (flushed and
fsynced), ``OUT_DIR/summary.md`` is rewritten whenever results.jsonl has grown, and each step's end is
one line on stdout, so a run killed from outside still leaves what it did in OUT_DIR and in its
output. OUT_DIR receives results.jsonl, summary.md, log.txt (every child's output),
mok-comparison.csv (the pipeline stage's published rows), kernel-rates.json (the rates the timing
stage measured, which the pipeline's rows publish their expectation from) and dataset.tar.gz (its
shards with each execution's phase account, their profiles, ledger and logs). The run's document
(``docs/gpu-runs/<run>.md``) keeps results.jsonl, mok-comparison.csv, kernel-rates.json and summary.md
beside it and regenerates its tables from them (``jobs/gpu_records.py``).

The modules, bottom to top (each imports only those before it): :mod:`plan` (what the command line
asks for, the steps in order, their limits and reserves, the sweeps), :mod:`pack` (what the CPU
machine packs for the run: the kernel cache, the packing execution's estimate, the record of the code;
and its check on the device), :mod:`pytest_records` (the tests stage's plugin), :mod:`summary`
(summary.md from the records), :mod:`run` (a run's state, its children and the step around each
body), :mod:`environment` (what travelled, unpacked; the children's environment; the env step),
:mod:`kernels` (the kernel stages and the gate), :mod:`layers` (the stages that run layers, and the
account), :mod:`main` (the watched run, start to end). Torch-free and Hydra-free: the runner starts
before the packed wheels are unpacked, and its children import what they need.
"""
