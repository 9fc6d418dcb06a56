#!/usr/bin/env bash
# Installs everything into .venv and runs the tests.
#   bash scripts/test.sh [pytest args]          the whole suite, as CI runs it (browser tests included)
#   bash scripts/test.sh --fast [pytest args]   the fast tier: no test marked slow, property tests and fuzzing
#                                               with a tenth of their examples (README, "Tests")
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
FAST=0
if [ "${1:-}" = "--fast" ]; then
  FAST=1
  shift
fi
# Python may cache compiled modules (and pytest its rewritten tests): a machine that forbids it compiles
# every test module and the whole package again on each run, 15 s and more before the first test.
unset PYTHONDONTWRITEBYTECODE
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
KERNEL_SO=$(ls placement_core/simulate/_kernel*.so 2>/dev/null | head -n 1 || true)
BATCH_SO=$(ls placement_core/optimize/_batch*.so 2>/dev/null | head -n 1 || true)
if [ "$FAST" = 1 ] && [ -f .venv/.installed ] && [ .venv/.installed -nt pyproject.toml ] && [ .venv/.installed -nt setup.py ] \
   && [ -n "$KERNEL_SO" ] && [ "$KERNEL_SO" -nt placement_core/simulate/_kernel.c ] \
   && [ "$KERNEL_SO" -nt placement_core/simulate/_expand.h ] \
   && [ -n "$BATCH_SO" ] && [ "$BATCH_SO" -nt placement_core/optimize/_batch.c ]; then
  :  # the fast tier skips a reinstall that would change nothing (it rebuilds the kernel: half a minute)
else
  .venv/bin/pip install -q --disable-pip-version-check -e ".[app,torch,dask,learn,test]"
  touch .venv/.installed
fi
if [ "$FAST" = 1 ]; then
  export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-dev}
  export FUZZ_EXAMPLES=${FUZZ_EXAMPLES:-30} FUZZ_APP_EXAMPLES=${FUZZ_APP_EXAMPLES:-5} FUZZ_CLI_EXAMPLES=${FUZZ_CLI_EXAMPLES:-8}
  exec .venv/bin/python -m pytest -m "not slow" "$@"
fi
if [ -f scripts/browser-deps.sh ]; then
  bash scripts/browser-deps.sh
fi
exec .venv/bin/python -m pytest "$@"
