#!/usr/bin/env bash
# Installs Debian's Chromium for the browser test (tests/test_browser.py) when it is missing.
# The test drives /usr/bin/chromium with the playwright package; never `playwright install`.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "browser-deps: no /usr/bin/chromium and no apt-get; the browser test will be skipped" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "browser-deps: need root to install chromium; the browser test will be skipped" >&2
    exit 0
  fi
fi
echo "browser-deps: installing chromium with apt-get" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
