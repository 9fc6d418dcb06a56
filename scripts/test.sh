#!/usr/bin/env bash
# Installs everything into .venv and runs the whole test suite. Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -e ".[app,torch,dask,learn,test]"
if [ -f scripts/browser-deps.sh ]; then
  bash scripts/browser-deps.sh
fi
exec .venv/bin/python -m pytest "$@"
