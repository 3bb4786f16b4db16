#!/usr/bin/env bash
# The one command a lent GPU machine runs: the whole GPU half in at most 550 s (python -m jobs.gpu_run).
#
#   jobs/gpu-run.sh OUT_DIR [--dry-run] [--only STAGE,...] [--variants all|NAME,...] [--total SECONDS]
#                           [--limit NAME=SECONDS] [--plant KIND:AFTER | KIND:STAGE:KEY] [--whl DIR]
#                           [--dataset DIR]
#
# Order, for the most truth per second: env (GPU, driver, clocks, versions, the plan of kernels, the
# kernel cache verified, the record of the code checked; what travelled in .whl/ unpacked first), the
# gate of the stages that run layers (the smoke and correctness of the default kernels, of the variants
# the per-shape table names and of the SwiGLU backward), the kernels no GPU has checked yet (the MX
# quantization and fused SwiGLU forward kernels, the new wgrad and tail variants: their checks, then
# their timing), the defaults' timing, the matched pairs (pipeline: MoK against Dist-MoE in BF16, one
# workload of each kind, then pipeline.aggregate) and their phase accounts, the loopback and the ranks
# sharing the GPU, the packing execution of Dist-MoE MXFP8 beside its estimate, the CUDA-only tests,
# then the rest; reserves go to the steps in that order while the window holds them. Every check is a
# process of its own under its own time limit (killed with all it started at the limit), and a kernel
# runs in a stage only where every earlier stage passed it; the stages that run layers run on the CuTe
# kernels only where the kernels they run passed, else on the torch backend (and say so).
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
