#!/usr/bin/env bash
# Build Hedwig's images from the repository's Dockerfiles without a Docker engine or a
# registry (`make images`):
#
#   1. a Debian base image with Python, made by mmdebstrap from Debian's packages and packaged
#      with umoci and skopeo (it stands in for python:3.11-slim-bookworm: same Debian, same
#      Python 3.11);
#   2. hub_image/Dockerfile, operator/Dockerfile and spark-apps/Dockerfile, unmodified, built
#      with `buildah bud --isolation chroot --storage-driver vfs` on that base
#      (--build-arg PYTHON_IMAGE=...);
#   3. each image saved as a docker-archive tar named NAME:TAG, ready for
#      `ctr -n k8s.io image import`, `docker load` or `skopeo copy` to a registry.
#
# pip inside the builds gets the host's CA bundle (HTTPS may be re-signed by a local CA) and a
# pip.conf through build-time volumes mounted over paths the base already has: neither stays in
# the images (tests/chart/test_built_images.py checks). It also finds a locally built pyspark
# wheel there (PyPI serves pyspark only as a 400 MB source archive).
#
# Cache, keyed by inputs: ${HEDWIG_CACHE:-~/.cache/hedwig}/images/
#   base/python-<suite>-<key>.tar   key: suite, mirrors, package list, recipe
#   <image>-<key>.tar               key: the base's key, the Dockerfile, every file its
#                                   .dockerignore lets into the context, the tag
# An image whose key is cached is not rebuilt. The last lines printed are "NAME:TAG PATH",
# one per image.
#
#   images/build.sh [hub|operator|spark ...]       (default: all three)
#   images/build.sh --keys                         "IMAGE PATH" of each cached tar, built or not
#
# Environment: HEDWIG_CACHE; IMAGE_TAG (default: the chart's appVersion); IMAGE_PREFIX (e.g.
# registry.example.com/team/, prepended to the names: see docs/deploying.md for pushing).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${HEDWIG_CACHE:-${HOME:?set HOME or HEDWIG_CACHE}/.cache/hedwig}/images
SUITE=bookworm
MIRRORS=(
    "deb http://deb.debian.org/debian $SUITE main"
    "deb http://deb.debian.org/debian $SUITE-updates main"
    "deb http://deb.debian.org/debian-security $SUITE-security main"
)
# python-is-python3: the Dockerfiles call `python`, as python:3.11-slim provides it.
BASE_PACKAGES=(python3 python3-venv python-is-python3 ca-certificates)
BASE_RECIPE=1
# Bump when the way the images are built changes (mounts, flags).
IMAGE_RECIPE=2
PYSPARK_VERSION=$(sed -n 's/.*"pyspark==\([^"]*\)".*/\1/p' "$ROOT/pyproject.toml")
TAG=${IMAGE_TAG:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$ROOT/charts/hedwig/Chart.yaml")}
PREFIX=${IMAGE_PREFIX:-}

declare -A DOCKERFILE=(
    [hub]=hub_image/Dockerfile
    [operator]=operator/Dockerfile
    [spark]=spark-apps/Dockerfile
)
declare -A NAME=([hub]=hedwig-hub [operator]=hedwig-operator [spark]=hedwig-spark)
KEYS_ONLY=false
if [[ "${1:-}" == --keys ]]; then KEYS_ONLY=true; shift; fi
WANTED=("$@")
[[ ${#WANTED[@]} -gt 0 ]] || WANTED=(hub operator spark)
for w in "${WANTED[@]}"; do
    [[ -n "${DOCKERFILE[$w]:-}" ]] || { echo "unknown image $w (hub, operator, spark)" >&2; exit 2; }
done

base_key=$(printf '%s\n' "$SUITE" "${MIRRORS[@]}" "${BASE_PACKAGES[@]}" "$BASE_RECIPE" \
    | sha256sum | cut -c1-12)
# The files the build context sends: what the .dockerignore next to the Dockerfile lets in.
context_files() {
    local ignore=$1 pattern
    while IFS= read -r pattern; do
        pattern=${pattern#!}
        (cd "$ROOT" && find "${pattern%/}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc')
    done < <(grep '^!' "$ignore") | LC_ALL=C sort
}

image_key() {
    local image=$1 dockerfile=${DOCKERFILE[$1]}
    {
        echo "$base_key $TAG $PREFIX $IMAGE_RECIPE"
        [[ $image == spark ]] && echo "pyspark $PYSPARK_VERSION"
        (cd "$ROOT" && sha256sum "$dockerfile" $(context_files "$ROOT/${dockerfile}.dockerignore"))
    } | sha256sum | cut -c1-12
}

if $KEYS_ONLY; then
    for image in "${WANTED[@]}"; do
        echo "$image $CACHE/${NAME[$image]}-$(image_key "$image").tar"
    done
    exit 0
fi

log() { printf '[images %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
"$ROOT/scripts/ensure-node-packages.sh"

mkdir -p "$CACHE/base" "$CACHE/wheels"
exec 9>"$CACHE/.build.lock"
flock 9

# --- 1. the base image ------------------------------------------------------------------
BASE_IMAGE="localhost/hedwig-python:$SUITE-$base_key"
BASE_TAR="$CACHE/base/python-$SUITE-$base_key.tar"
if [[ ! -s "$BASE_TAR" ]]; then
    log "making the base image $BASE_IMAGE with mmdebstrap (about a minute)"
    work=$(mktemp -d)
    include=$(IFS=,; echo "${BASE_PACKAGES[*]}")
    mmdebstrap --quiet --variant=minbase --include="$include" \
        --customize-hook='rm -rf "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/locale/* "$1"/var/cache/apt/*.bin' \
        "$SUITE" "$work/rootfs" "${MIRRORS[@]}"
    "$ROOT/images/oci-archive.sh" "$work/rootfs" "$BASE_IMAGE" "$BASE_TAR.partial" python3
    mv "$BASE_TAR.partial" "$BASE_TAR"
    rm -rf "$work"
    find "$CACHE/base" -name 'python-*.tar' ! -name "$(basename "$BASE_TAR")" -delete
fi

# --- 2. the images ----------------------------------------------------------------------
BUILDAH=(buildah --root "$CACHE/buildah/root" --runroot "$CACHE/buildah/run" --storage-driver vfs)
base_loaded=false
load_base() {
    $base_loaded && return
    if ! "${BUILDAH[@]}" inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
        "${BUILDAH[@]}" pull --quiet "docker-archive:$BASE_TAR" >/dev/null
    fi
    base_loaded=true
}

# pip's settings for the builds, in a home directory mounted over the image's /root while it
# builds (the build stages run pip as root). Mounting over paths the base already has (/root,
# Debian's CA bundle) leaves nothing behind: a mount point that does not exist would stay in
# the image as an empty placeholder.
build_home=$(mktemp -d)
trap 'rm -rf "$build_home"' EXIT
mkdir -p "$build_home/.config/pip" "$build_home/wheels"
cat > "$build_home/.config/pip/pip.conf" <<EOF
[global]
cert = /etc/ssl/certs/ca-certificates.crt
find-links = /root/wheels
EOF

results=()
for image in "${WANTED[@]}"; do
    dockerfile=${DOCKERFILE[$image]}
    ref="$PREFIX${NAME[$image]}:$TAG"
    key=$(image_key "$image")
    tar="$CACHE/${NAME[$image]}-$key.tar"
    if [[ ! -s "$tar" ]]; then
        load_base
        if [[ $image == spark ]] && ! ls "$CACHE/wheels/pyspark-$PYSPARK_VERSION-"*.whl >/dev/null 2>&1; then
            log "building the pyspark $PYSPARK_VERSION wheel once (PyPI has only its source)"
            python3 -m pip wheel --quiet --no-deps -w "$CACHE/wheels" "pyspark==$PYSPARK_VERSION"
        fi
        log "building $ref from $dockerfile"
        started=$(date +%s)
        "${BUILDAH[@]}" bud --quiet --isolation chroot --pull=never --format docker \
            --layers=false \
            --build-arg "PYTHON_IMAGE=$BASE_IMAGE" --build-arg "VERSION=$TAG" \
            -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
            -v "$build_home:/root" -v "$CACHE/wheels:/root/wheels:ro" \
            -f "$dockerfile" -t "localhost/${NAME[$image]}:build-$key" "$ROOT" >/dev/null
        "${BUILDAH[@]}" push --quiet "localhost/${NAME[$image]}:build-$key" \
            "docker-archive:$tar.partial:$ref" >/dev/null
        "${BUILDAH[@]}" rmi "localhost/${NAME[$image]}:build-$key" >/dev/null
        mv "$tar.partial" "$tar"
        find "$CACHE" -maxdepth 1 -name "${NAME[$image]}-*.tar" ! -name "$(basename "$tar")" -delete
        log "built $ref in $(( $(date +%s) - started ))s: $tar ($(du -h "$tar" | cut -f1))"
    fi
    results+=("$ref $tar")
done
"${BUILDAH[@]}" rm --all >/dev/null 2>&1 || true
printf '%s\n' "${results[@]}"
