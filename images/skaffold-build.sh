#!/usr/bin/env bash
# skaffold's custom builder for Hedwig's images (skaffold.yaml): the same build as
# `make images` (images/build.sh: no Docker engine needed), named as skaffold asks.
#
# skaffold sets IMAGE (the full reference it wants, e.g. registry.example.com/hedwig-hub:abc123)
# and PUSH_IMAGE. With PUSH_IMAGE=true the image is copied to its registry with skopeo (log in
# first: `skopeo login registry.example.com`); otherwise it is written as a docker-archive tar
# under $HEDWIG_SKAFFOLD_OUT (default ~/.cache/hedwig/images/skaffold) and loaded into a local
# Docker engine if there is one. The last line printed is "IMAGE PATH-OR-REGISTRY".
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
: "${IMAGE:?skaffold sets IMAGE to the reference to build}"
name=${IMAGE##*/}
name=${name%%[:@]*}
case "$name" in
    hedwig-hub) which=hub ;;
    hedwig-operator) which=operator ;;
    hedwig-spark) which=spark ;;
    *) echo "skaffold-build.sh: no image called $name (hedwig-hub, hedwig-operator, hedwig-spark)" >&2; exit 2 ;;
esac
built=$("$ROOT/images/build.sh" "$which" | tail -1)
tar=${built#* }
if [[ "${PUSH_IMAGE:-false}" == true ]]; then
    skopeo copy --quiet "docker-archive:$tar" "docker://$IMAGE"
    echo "$IMAGE pushed"
    exit 0
fi
out=${HEDWIG_SKAFFOLD_OUT:-${HEDWIG_CACHE:-$HOME/.cache/hedwig}/images/skaffold}
mkdir -p "$out"
rm -f "$out/$name.tar"
skopeo copy --quiet "docker-archive:$tar" "docker-archive:$out/$name.tar:$IMAGE"
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    docker load --quiet --input "$out/$name.tar"
fi
echo "$IMAGE $out/$name.tar"
