#!/usr/bin/env bash
# Make sure Debian's prometheus package is installed: promtool checks and unit-tests the
# chart's alert rules (tests/chart), prometheus scrapes real hubs in e2e/test_monitoring.py.
# Idempotent and quick when it is there already. The package's service is not started (no
# systemd here); the tests run their own Prometheus on a free port.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null; then
  echo "Prometheus is missing: install Debian's 'prometheus' package (it brings promtool)" >&2
  exit 1
fi
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
echo "installing Debian's prometheus package..." >&2
$SUDO apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v prometheus >/dev/null && command -v promtool >/dev/null
