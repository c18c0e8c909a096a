#!/usr/bin/env bash
# Build what a real node of the e2e test bed needs, beside the control plane
# (build.sh), from the Go module proxy and Debian, and cache it outside the
# work tree:
#
#   kubelet, kube-proxy  the same wrapper module and version as the control
#                        plane (go/kubernetes, k8s.io/kubernetes)
#   cni/bridge, cni/host-local, cni/loopback, cni/portmap
#                        github.com/containernetworking/plugins
#   coredns              github.com/coredns/coredns (cluster DNS, run as a
#                        local process on the node's address)
#   pause.tar            the pod sandbox image: pause.c from the Kubernetes
#                        module compiled with gcc -static, as an OCI archive
#
# containerd and runc are Debian's (scripts/ensure-node-packages.sh installs
# them with the image tools).
#
# Cache: ${HEDWIG_CACHE:-$HOME/.cache/hedwig}/node/<key>/{bin,cni,images}
# Idempotent: when the key is complete it does nothing. The last line printed
# is the cache directory.
set -euo pipefail

KUBERNETES_VERSION=v1.36.3   # the control plane's (build.sh)
CNI_PLUGINS_VERSION=v1.9.1
COREDNS_VERSION=v1.15.0
# Bump when the way things are built changes.
RECIPE=1

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE_ROOT=${HEDWIG_CACHE:-${HOME:?set HOME or HEDWIG_CACHE}/.cache/hedwig}/node
NICE=${HEDWIG_BUILD_NICE:-10}

wrapper_digest=$(cd "$HERE/go" && cat kubernetes/go.mod kubernetes/go.sum kubernetes/tools.go \
    | sha256sum | cut -c1-10)
KEY="k8s-${KUBERNETES_VERSION}_cni-${CNI_PLUGINS_VERSION}_coredns-${COREDNS_VERSION}_r${RECIPE}-${wrapper_digest}"
DEST="$CACHE_ROOT/$KEY"

complete() {
    local dir=$1 f
    [[ -f "$dir/.complete" ]] || return 1
    for f in bin/kubelet bin/kube-proxy bin/coredns cni/bridge cni/host-local cni/loopback \
             cni/portmap images/pause.tar; do
        [[ -s "$dir/$f" ]] || return 1
    done
}

if complete "$DEST"; then echo "$DEST"; exit 0; fi
if [[ "${HEDWIG_NODE_NO_BUILD:-}" == 1 ]]; then
    echo "the node's binaries are not built: run $0" >&2
    exit 1
fi
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.build.lock"
flock 9
if complete "$DEST"; then echo "$DEST"; exit 0; fi

log() { printf '[node build %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
command -v go >/dev/null || { log "go is not installed"; exit 1; }
for tool in gcc umoci skopeo; do
    command -v "$tool" >/dev/null || { log "$tool is missing (scripts/ensure-node-packages.sh)"; exit 1; }
done

STAGING="$CACHE_ROOT/.staging-$KEY-$$"
WORK=$(mktemp -d)
trap 'rm -rf "$STAGING" "$WORK"' EXIT
mkdir -p "$STAGING/bin" "$STAGING/cni" "$STAGING/images"
start=$(date +%s)
gobuild() { nice -n "$NICE" go "$@"; }

# --- kubelet and kube-proxy: a copy of the control plane's wrapper module ------
# -mod=mod lets go add the few go.sum lines the node's packages need to the
# copy, so the control plane's key (a digest of the wrapper) stays the same.
cp -r "$HERE/go/kubernetes" "$WORK/"
minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
log "building kubelet and kube-proxy $KUBERNETES_VERSION"
(cd "$WORK/kubernetes" && CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false -trimpath" \
    gobuild build -tags selinux,notest,grpcnotrace -ldflags "$k8s_ldflags" -o "$STAGING/bin/" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)

# --- CNI plugins and CoreDNS: plain go install (no replace directives) ---------
cd "$WORK"
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false -trimpath"
log "building CNI plugins $CNI_PLUGINS_VERSION"
plugins=github.com/containernetworking/plugins/plugins
GOBIN="$STAGING/cni" gobuild install -ldflags "-s -w" \
    "$plugins/main/bridge@$CNI_PLUGINS_VERSION" "$plugins/ipam/host-local@$CNI_PLUGINS_VERSION" \
    "$plugins/main/loopback@$CNI_PLUGINS_VERSION" "$plugins/meta/portmap@$CNI_PLUGINS_VERSION"
log "building CoreDNS $COREDNS_VERSION"
GOBIN="$STAGING/bin" gobuild install -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"

# --- the pause image ---------------------------------------------------------------
log "building the pause image"
k8s_dir=$(cd "$WORK/kubernetes" && GOFLAGS=-mod=mod go list -m -json k8s.io/kubernetes \
    | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
mkdir -p "$WORK/pause-root"
gcc -Os -static -DVERSION="$KUBERNETES_VERSION" -o "$WORK/pause-root/pause" \
    "$k8s_dir/build/pause/linux/pause.c"
strip "$WORK/pause-root/pause"
"$HERE/../../images/oci-archive.sh" "$WORK/pause-root" "localhost/pause:$KUBERNETES_VERSION" \
    "$STAGING/images/pause.tar" /pause

elapsed=$(( $(date +%s) - start ))
cat > "$STAGING/versions.json" <<EOF
{"kubernetes": "$KUBERNETES_VERSION", "cni_plugins": "$CNI_PLUGINS_VERSION", "coredns": "$COREDNS_VERSION", "pause_image": "localhost/pause:$KUBERNETES_VERSION", "key": "$KEY", "build_seconds": $elapsed}
EOF
touch "$STAGING/.complete"
rm -rf "$DEST"
mv "$STAGING" "$DEST"
log "built in ${elapsed}s into $DEST"
echo "$DEST"
