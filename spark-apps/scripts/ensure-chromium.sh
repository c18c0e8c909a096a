#!/usr/bin/env bash
# Make sure Debian's chromium is there for the demo's browser test (tests/spark/test_demo_browser.py).
# Idempotent and quick when it is installed already; without root or apt it only warns (the test
# is then skipped).
set -euo pipefail
if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null || { [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null; }; then
  echo "chromium is missing and cannot be installed here: the browser test will be skipped" >&2
  exit 0
fi
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
echo "installing Debian's chromium for the browser test..." >&2
$SUDO apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null
