#!/usr/bin/env bash
# Debian's tools for building images without a Docker engine (mmdebstrap, umoci, skopeo,
# buildah) and for running them on the e2e test bed's real node (containerd, runc, iptables).
# Idempotent and quick when everything is there already.
set -euo pipefail
PACKAGES=(mmdebstrap umoci skopeo buildah runc containerd iptables)
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
echo "installing Debian's ${missing[*]}..." >&2
$SUDO apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
