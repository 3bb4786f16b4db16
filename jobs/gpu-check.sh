#!/usr/bin/env bash
# The GPU check of the CuTe grouped-GEMM kernels, in one run of under ten minutes on an H100/H200 or
# B200 (compiles included): correctness vs an FP32 reference, then timings vs torch._grouped_mm and
# a dense torch.matmul of equal FLOPs (python -m cutlass_kernels check).
#
#   jobs/gpu-check.sh [OUT_DIR]      writes OUT_DIR/kernels-check.json and kernels-check.txt
#                                    (default: $OUT if set, else outputs/kernels-check)
#
# Without network access the CUTLASS DSL comes from .whl/cutlass-dsl.tar.xz (made by the shared
# pack-cutlass-dsl tool) when it cannot already be imported. Exit status: that of the check (0 all
# correct, 1 a case failed, 2 no GPU or no CuTe backend).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-$root/outputs/kernels-check}}
mkdir -p "$out"
cd "$root"

if ! python3 -c 'import cutlass' 2>/dev/null; then
  archive=$root/.whl/cutlass-dsl.tar.xz
  [[ -f $archive ]] || { echo "gpu-check: the CUTLASS DSL is not importable and $archive is absent" >&2; exit 2; }
  site=$(mktemp -d)
  tar xJf "$archive" -C "$site"
  export PYTHONPATH=$site:$site/nvidia_cutlass_dsl/dsl_packages:${PYTHONPATH:-}
fi
export PYTHONPATH=$root:${PYTHONPATH:-}

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >"$out/kernels-check.txt"
fi
status=0
timeout 570 python3 -m cutlass_kernels check --out "$out/kernels-check.json" 2>&1 | tee -a "$out/kernels-check.txt" \
  || status=${PIPESTATUS[0]}
exit "$status"
