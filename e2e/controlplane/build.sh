#!/usr/bin/env bash
# Build the binaries of a real Kubernetes control plane from the Go module
# proxy (no release downloads, no Docker) and cache them outside the work tree:
#
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
#                        wrapper module go/kubernetes (k8s.io/kubernetes)
#   etcd                 wrapper module go/etcd (go.etcd.io/etcd/server/v3)
#   kwok                 sigs.k8s.io/kwok/cmd/kwok (fakes nodes and pods)
#   helm                 helm.sh/helm/v3/cmd/helm
#
# plus the kwok stage definitions (stages/*.yaml beside bin/).
#
# Cache: ${HEDWIG_CACHE:-$HOME/.cache/hedwig}/controlplane/<version-key>/{bin,stages}
# Idempotent: when the version key is already complete it does nothing.
# The last line printed is always the bin directory.
#
# Environment:
#   HEDWIG_CACHE            cache root (default $HOME/.cache/hedwig)
#   HEDWIG_BUILD_NICE       niceness of the Go builds (default 10)
#   HEDWIG_CONTROLPLANE_KEY print the version key and exit when set to 1
set -euo pipefail

KUBERNETES_VERSION=v1.36.3   # keep in step with go/kubernetes/go.mod
ETCD_VERSION=v3.6.16         # keep in step with go/etcd/go.mod
KWOK_VERSION=v0.8.0
HELM_VERSION=v3.22.0
# Bump when the way the binaries are built changes (flags, tags, stages).
RECIPE=1

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE_ROOT=${HEDWIG_CACHE:-${HOME:?set HOME or HEDWIG_CACHE}/.cache/hedwig}/controlplane
NICE=${HEDWIG_BUILD_NICE:-10}

BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok helm)
STAGES=(node-initialize.yaml node-heartbeat-with-lease.yaml pod-ready.yaml pod-complete.yaml pod-delete.yaml)

# The key names the versions and a digest of the wrapper modules, so a change
# to either builds into a fresh directory instead of reusing stale binaries.
wrapper_digest=$(cd "$HERE/go" && cat kubernetes/go.mod kubernetes/go.sum kubernetes/tools.go \
    etcd/go.mod etcd/go.sum etcd/main.go | sha256sum | cut -c1-10)
KEY="k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}_r${RECIPE}-${wrapper_digest}"
DEST="$CACHE_ROOT/$KEY"

if [[ "${HEDWIG_CONTROLPLANE_KEY:-}" == 1 ]]; then
    echo "$KEY"
    exit 0
fi

complete() {
    local dir=$1 b s
    [[ -f "$dir/.complete" ]] || return 1
    for b in "${BINARIES[@]}"; do [[ -x "$dir/bin/$b" ]] || return 1; done
    for s in "${STAGES[@]}"; do [[ -f "$dir/stages/$s" ]] || return 1; done
}

if complete "$DEST"; then
    echo "$DEST/bin"
    exit 0
fi

mkdir -p "$CACHE_ROOT"
# One build at a time per cache (parallel CI jobs or test workers).
if command -v flock >/dev/null; then
    exec 9>"$CACHE_ROOT/.build.lock"
    flock 9
fi
if complete "$DEST"; then
    echo "$DEST/bin"
    exit 0
fi

log() { printf '[controlplane build %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

command -v go >/dev/null || { log "go is not installed"; exit 1; }

STAGING="$CACHE_ROOT/.staging-$KEY-$$"
WORK=$(mktemp -d)
trap 'rm -rf "$STAGING" "$WORK"' EXIT
mkdir -p "$STAGING/bin" "$STAGING/stages"
start=$(date +%s)

# Build in copies of the wrapper modules so the work tree is never modified.
cp -r "$HERE/go/kubernetes" "$HERE/go/etcd" "$WORK/"

export CGO_ENABLED=0
export GOFLAGS="-mod=mod -buildvcs=false -trimpath"
gobuild() { nice -n "$NICE" go "$@"; }

# --- kube-apiserver, kube-controller-manager, kube-scheduler, kubectl ------
minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
log "building Kubernetes $KUBERNETES_VERSION (first time: module downloads and a long compile)"
(cd "$WORK/kubernetes" && gobuild build -tags selinux,notest,grpcnotrace \
    -ldflags "$k8s_ldflags" -o "$STAGING/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl)

# --- etcd ------------------------------------------------------------------
log "building etcd $ETCD_VERSION"
(cd "$WORK/etcd" && gobuild build -ldflags "-s -w" -o "$STAGING/bin/etcd" .)

# --- kwok and helm: plain "go install pkg@version" (no replace directives) --
export GOFLAGS="-buildvcs=false -trimpath"
cd "$WORK"
log "building kwok $KWOK_VERSION"
GOBIN="$STAGING/bin" gobuild install \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"

log "building helm $HELM_VERSION"
helm_mod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
helm_k8s_minor=$(awk '$1 == "k8s.io/client-go" {split($2, v, "."); print v[2]; exit}' "$helm_mod")
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
helm_ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    helm_ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$helm_k8s_minor"
done
GOBIN="$STAGING/bin" gobuild install -ldflags "$helm_ldflags" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"

# --- kwok stages: kwok does nothing without them -----------------------------
kwok_dir=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
stage_src="$kwok_dir/kustomize/stage"
cp "$stage_src/node/fast/node-initialize.yaml" \
   "$stage_src/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
   "$stage_src/pod/fast/pod-ready.yaml" \
   "$stage_src/pod/fast/pod-complete.yaml" \
   "$stage_src/pod/fast/pod-delete.yaml" \
   "$STAGING/stages/"
chmod -R u+w "$STAGING/stages"

elapsed=$(( $(date +%s) - start ))
cat > "$STAGING/versions.json" <<EOF
{"kubernetes": "$KUBERNETES_VERSION", "etcd": "$ETCD_VERSION", "kwok": "$KWOK_VERSION", "helm": "$HELM_VERSION", "key": "$KEY", "build_seconds": $elapsed, "go": "$(go env GOVERSION)"}
EOF
touch "$STAGING/.complete"
rm -rf "$DEST"
mv "$STAGING" "$DEST"
log "built in ${elapsed}s into $DEST"
echo "$DEST/bin"
