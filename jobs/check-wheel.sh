#!/usr/bin/env bash
# A non-editable install runs: build the wheel, install it into a fresh venv that sees this
# interpreter's packages (--system-site-packages, --no-deps: nothing is downloaded), then run one
# scale=ci execution from another directory, away from the checkout.
# Usage: jobs/check-wheel.sh [WORK_DIR]   (exit 0 when the installed package ran the execution)
set -euo pipefail
work="${1:-$(mktemp -d)}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$work/wheel" "$work/run"
python -m pip wheel --no-deps --no-build-isolation -q "$repo" -w "$work/wheel"
python -m venv --system-site-packages "$work/venv"
env -u PYTHONPATH "$work/venv/bin/pip" install -q --no-deps --no-index "$work"/wheel/*.whl
cd "$work/run"
env -u PYTHONPATH "$work/venv/bin/python" -c 'import pipeline; print("runs from", pipeline.__file__)'
env -u PYTHONPATH "$work/venv/bin/python" -m pipeline.run workload=inference-ep8-f1536 variant=mok-bf16 \
  scale=ci dataset_dir="$work/run/dataset"
env -u PYTHONPATH "$work/venv/bin/python" -m pipeline.status "$work/run/dataset"
