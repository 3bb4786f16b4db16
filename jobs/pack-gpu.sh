#!/usr/bin/env bash
# Packs what a lent GPU machine lacks into the git-ignored .whl/, for a machine that cannot download
# packages and takes at most 64 MiB with the working tree (docs/gpu.md, "What travels"):
#
#   .whl/cutlass-dsl.tar.xz  the CuTe DSL at the version pyproject.toml pins, in its cu12 build (what
#                            `pip install nvidia-cutlass-dsl` installs, and what CI compiles with: PTX
#                            ISA 8.8 and ptxas 12.9 cubins, which a CUDA 13.0 driver loads), without
#                            what no kernel here uses (the experimental iket package, the AOT-export
#                            stubs, static library and headers); xz in one block with a 256 MiB
#                            dictionary, where both large libraries fit (51 MiB, against 59 MiB for
#                            the default's blocks)
#   .whl/py/*.whl            hydra-core, omegaconf, the antlr4 runtime and submitit, at the versions
#                            this environment runs (the image has none of them; it has pytest)
#   .whl/kernel-cache.tar.xz every sm_90a kernel exported ahead of time and verified (python -m
#                            cutlass_kernels cache build / verify: no compile on the device), rebuilt
#                            where its key (DSL version, arch, the kernels' sources) changed
#   .whl/estimates.json      the packing execution's estimate (python -m pipeline.estimate, h200)
#   .whl/provenance.json     the commit, whether the tree differs from it, the travelling files' digest
#                            (written last: the dry run checks it against the tree; python -m
#                            jobs.gpu_run.pack writes these three)
#
# usage (from anywhere in the checkout): jobs/pack-gpu.sh     about 6 minutes of one core (the xz, the
# kernels' export); a clean checkout first (what travels is recorded)
# Ends by measuring what a call of the device tool carries, and fails when less than 8 MiB is left.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
version=$(grep -oE '"nvidia-cutlass-dsl==[0-9.]+"' pyproject.toml | tr -d '"' | cut -d= -f3)
[[ -n $version ]] || { echo "pack-gpu: no nvidia-cutlass-dsl==VERSION pin in pyproject.toml" >&2; exit 2; }
flavour=cu12
mkdir -p .whl/py
stamp="$version $flavour trimmed dict256"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [[ -f .whl/cutlass-dsl.tar.xz && $(cat .whl/version 2>/dev/null) == "$stamp" ]]; then
  echo "already packed: .whl/cutlass-dsl.tar.xz ($stamp)"
else
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$work/wheels" "nvidia-cutlass-dsl==$version" "nvidia-cutlass-dsl-libs-base==$version" \
    "nvidia-cutlass-dsl-libs-core==$version" "nvidia-cutlass-dsl-libs-$flavour==$version" 2>&1 |
    { grep -v '^WARNING' || true; }
  mkdir "$work/site"
  for w in "$work"/wheels/*.whl; do (cd "$work/site" && python3 -m zipfile -e "$w" .); done
  dsl=$work/site/nvidia_cutlass_dsl
  rm -rf "$dsl/dsl_packages/iket" "$dsl/$flavour/lib/stubs" "$dsl/$flavour/include" "$dsl/$flavour"/lib/*.a
  tar -C "$work/site" -cf - . | xz -T1 --x86 --lzma2=preset=9e,dict=256MiB > "$work/dsl.tar.xz"
  mv "$work/dsl.tar.xz" .whl/cutlass-dsl.tar.xz
  echo "$stamp" > .whl/version
fi

rm -f .whl/py/*.whl
pins=$(python3 -c '
from importlib.metadata import version
print(" ".join(f"{d}=={version(d)}" for d in ("hydra-core", "omegaconf", "submitit")))')
antlr=$(python3 -c 'from importlib.metadata import version; print(version("antlr4-python3-runtime"))')
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform any -d .whl/py $pins 2>&1 | { grep -v '^WARNING' || true; }
# the antlr4 runtime omegaconf needs is published as a source archive only
python3 -m pip wheel -q --no-deps -w .whl/py "antlr4-python3-runtime==$antlr" 2>&1 | { grep -v '^WARNING' || true; }

PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" python3 -m jobs.gpu_run.pack .whl

tree=$(git ls-files -co --exclude-standard -z | xargs -0 du -cb | tail -1 | cut -f1)
packed=$(du -cb .whl | tail -1 | cut -f1)
limit=$((64 * 1024 * 1024))
left=$((limit - tree - packed))
echo "carry: tree $tree B + .whl $packed B = $((tree + packed)) B; $left B ($((left / 1024 / 1024)) MiB) under 64 MiB"
if ((left < 8 * 1024 * 1024)); then
  echo "pack-gpu: less than 8 MiB of headroom left under the 64 MiB a device call carries" >&2
  exit 1
fi
