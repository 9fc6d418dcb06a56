#!/usr/bin/env bash
# Every CUDA path in one go (import, calibrate, single/split/sharded/pipelined benchmarks with a profiled
# step, a short E5) and a report under docs/gpu/; exits 0 with a message where there is no GPU.
#   bash scripts/gpu-check.sh [--rehearse] [--only STEP,...] [--out DIR]     (docs/torch.md, "GPU check")
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  echo "gpu-check: install the project first: python3 -m venv .venv && .venv/bin/pip install -e '.[torch]'" >&2
  exit 2
fi
exec .venv/bin/python scripts/gpu_check.py "$@"
