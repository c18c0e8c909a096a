#!/usr/bin/env bash
# Package a root filesystem directory as a one-layer image in a docker-archive
# tar (what `ctr image import` and `buildah pull docker-archive:` read), with
# umoci and skopeo: no Docker engine, no registry.
#
#   images/oci-archive.sh ROOTFS NAME:TAG OUT.tar CMD [ARG...]
set -euo pipefail
rootfs=$1 name=$2 out=$3
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
umoci init --layout "$work/oci"
umoci new --image "$work/oci:img"
umoci unpack --image "$work/oci:img" "$work/bundle" >/dev/null
cp -a "$rootfs/." "$work/bundle/rootfs/"
umoci repack --image "$work/oci:img" "$work/bundle"
config=(--config.cmd "$1")
for arg in "${@:2}"; do config+=(--config.cmd "$arg"); done
umoci config --image "$work/oci:img" --os linux --architecture amd64 \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "${config[@]}"
umoci gc --layout "$work/oci"
rm -f "$out"
skopeo copy --quiet "oci:$work/oci:img" "docker-archive:$out:$name"
