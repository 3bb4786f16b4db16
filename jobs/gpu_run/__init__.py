"""The device run of ``jobs/gpu-run.sh`` (``python -m jobs.gpu_run``; docs/gpu.md): the one scheduler of
every check a lent GPU runs, so that no minute goes to a kernel already known to be bad.

The order gives the most truth per second: env (with the plan: the arch's kernels and op x variants),
the default kernels' smoke and correctness and the SwiGLU backward kernel's correctness (together the
gate of the stages that run layers), the tests, the multi-rank rehearsals (loopback: NCCL's
all-to-alls inside captured graphs on one rank; ranks: an EP group's processes sharing the GPU, their
rows crossing ranks, through every execution's correctness gate), the defaults' and the SwiGLU
kernel's timing, the pipeline and the phase account of its single-GPU executions, then each other
variant's smoke, correctness and timing in turn, and the SASS check. Every step named in
:data:`plan.RESERVE_S` keeps its time from the start: a step may use only what the run has left beyond
the reserves of the steps after it, so a slow early step cannot starve a later one, and what a step
does not use goes to the next. Every check is a child process of its own, isolated
(:mod:`cutlass_kernels.isolation`: its own session, a time limit, everything it started killed at it),
and a kernel key runs in a stage only where every earlier stage passed it
(:mod:`cutlass_kernels.gating`), so a kernel that hangs or is wrong costs its own limit once. Smoke runs
up to 8 kernels at once, correctness up to 8 op x variants, timing one at a time (the GPU's time is
what it measures). The tests and pipeline stages run on the CuTe kernels only where the three default
BF16 kernels and the SwiGLU backward passed smoke and correctness, else on the torch backend, and say
so. The dry run stretches every time by the host's load (:func:`plan.contention`).

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
asks for, the steps in order, their limits and reserves), :mod:`summary` (summary.md from the
records), :mod:`run` (a run's state, its children and the step around each body), :mod:`environment`
(the unpacked wheels, the children's environment, the env step), :mod:`kernels` (the kernel stages
and the gate), :mod:`layers` (the stages that run layers, and the account), :mod:`main` (the watched
run, start to end). Torch-free and Hydra-free: the runner starts before the packed wheels are
unpacked, and its children import what they need.
"""
