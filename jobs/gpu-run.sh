#!/usr/bin/env bash
# The one command a lent GPU machine runs: readiness of the whole GPU half in at most 6 minutes wall.
#
#   jobs/gpu-run.sh OUT_DIR [--dry-run] [--only STAGE,...] [--variants all|NAME,...] [--total SECONDS]
#                           [--limit NAME=SECONDS] [--plant KIND:AFTER | KIND:STAGE:KEY] [--whl DIR]
#
# Order, for the most truth per minute: env (GPU, driver, clocks, versions, the plan of kernels;
# unpacking of .whl/ timed), then the default kernels' smoke (each compiled kernel once, two persistent
# walkers, rings that wrap), correctness (every op x output dtype against an FP32 reference, NaN / Inf
# in the rows past offs[-1], NaN-prefilled outputs, B layout, graph replay) and timing (every shape),
# then the SwiGLU backward kernel's correctness and timing, then each other variant's smoke,
# correctness and timing in turn, the SASS check, then tests (the
# CUDA-only pytest tests) and pipeline (a scale=full max_ranks=1 multirun of each kind, MoK and
# Dist-MoE, BF16 and MXFP8, then pipeline.aggregate), whose time is kept back from the start. Every
# check is a process of its own under its own time limit (killed with all it started at the limit), and
# a kernel runs in a stage only where every earlier stage passed it; tests and pipeline run on the CuTe
# kernels only where the three default BF16 kernels and the SwiGLU backward passed, else on the torch
# backend (and say so).
# Every result is appended to OUT_DIR/results.jsonl the moment it exists; OUT_DIR/summary.md is
# rewritten as results arrive; output goes to OUT_DIR/log.txt; the published CSV to
# OUT_DIR/mok-comparison.csv. docs/gpu.md has the rest, and the window plan.
#
# --dry-run runs the same steps on a CPU machine (torch backend, gloo, scale=ci), every time stretched
# by the host's load per CPU (1 to 4). Without it and without
# a GPU the command exits 2. --plant fail:STAGE / hang:STAGE inserts a stage that records a result and
# then fails / hangs (with a grandchild) after STAGE; in the dry run, --plant hang|wrong|zero-times-inf:
# STAGE:OP/OUT_DTYPE/VARIANT plants a kernel fault (docs/gpu.md), to test the plumbing.
# Exit status: 0 every step passed, 1 a step failed, timed out or was cut, 2 bad arguments or no GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -u -m jobs.gpu_run "$@"
