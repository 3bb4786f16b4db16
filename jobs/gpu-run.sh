#!/usr/bin/env bash
# The one command a lent GPU machine runs: readiness of the whole GPU half in at most 6 minutes wall.
#
#   jobs/gpu-run.sh OUT_DIR [--dry-run] [--only STAGE,...] [--limit STAGE=SECONDS] [--plant KIND:AFTER]
#
# Stages, in order, each in a session of its own under its own time limit (the session is killed at
# the limit and the next stage runs): env (GPU, driver, clocks, versions; unpacking of .whl/ timed),
# smoke (each compiled kernel once, each in its own process), correctness (every op x output dtype
# against an FP32 reference, NaN-prefilled outputs, B layout, graph replay, SASS), timing (kernels that
# passed), tests (the CUDA-only pytest tests), pipeline (a scale=full max_ranks=1 multirun of each kind,
# MoK and Dist-MoE, BF16 and MXFP8, then pipeline.aggregate). Every result is appended to
# OUT_DIR/results.jsonl the moment it exists; OUT_DIR/summary.md is rewritten after each stage; output
# goes to OUT_DIR/log.txt; the published CSV to OUT_DIR/mok-comparison.csv. docs/gpu.md has the rest.
#
# --dry-run runs the same stages on a CPU machine (torch backend, gloo, scale=ci). Without it and
# without a GPU the command exits 2. --plant fail:STAGE / hang:STAGE inserts a stage that records a
# result and then fails / hangs (with a grandchild) after STAGE, to test the plumbing.
# Exit status: 0 every stage passed, 1 a stage failed or timed out, 2 bad arguments or no GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
exec python3 -u "$root/jobs/gpu_run.py" "$@"
