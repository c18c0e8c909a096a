#!/usr/bin/env bash
# Make sure a ZooKeeper server can be started: Debian's zookeeper package (needs Java).
# Idempotent and quick when everything is there already.
set -euo pipefail
if [ -n "${HEDWIG_ZOOKEEPER_CLASSPATH:-}" ] || [ -f /usr/share/java/zookeeper.jar ]; then
  command -v java >/dev/null || { echo "java is required to run ZooKeeper" >&2; exit 1; }
  exit 0
fi
if [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null; then
  echo "ZooKeeper is missing: install Debian's 'zookeeper' package, or set HEDWIG_ZOOKEEPER_CLASSPATH" >&2
  exit 1
fi
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
echo "installing Debian's zookeeper package..." >&2
$SUDO apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends zookeeper default-jre-headless >/dev/null
test -f /usr/share/java/zookeeper.jar
