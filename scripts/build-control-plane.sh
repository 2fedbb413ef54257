#!/usr/bin/env bash
# Build the test suite's Kubernetes control plane (tests/cluster/kcp: etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager and a cert generator in one binary) into a cache
# outside the repo, once per source hash; print the binary's path on stdout.
#
#   scripts/build-control-plane.sh            # build if missing, print path
#   GPUPOOL_CACHE=/some/dir scripts/...       # cache root (default $XDG_CACHE_HOME/gpupool)
#   KCP_FORCE=1 scripts/...                   # rebuild even if cached
#
# A cached binary is found in well under a second. The first build (module download plus
# compiling Kubernetes) takes minutes; see tests/cluster/README.md for the measured time.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$repo/tests/cluster/kcp"
export PATH="$PATH:/usr/local/go/bin"

k8s_version="$(awk '$1=="k8s.io/kubernetes"{print $2; exit}' "$src/go.mod")"
if [[ -z "$k8s_version" ]]; then
  echo "build-control-plane: cannot read the k8s.io/kubernetes version from $src/go.mod" >&2
  exit 1
fi
# Hash what decides the binary: go.mod, go.sum, the Go sources and this script (not the Go
# version, so that a machine without Go still finds a binary cached for it).
hash="$(
  cd "$src"
  { cat go.mod go.sum; for f in $(ls *.go | LC_ALL=C sort); do echo "== $f"; cat "$f"; done
    cat "$repo/scripts/build-control-plane.sh"; } | sha256sum | cut -c1-16
)"
cache_root="${GPUPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}"
out_dir="$cache_root/control-plane/$k8s_version-$hash"
bin="$out_dir/kcp"

if [[ -x "$bin" && -z "${KCP_FORCE:-}" ]]; then
  echo "$bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "build-control-plane: $bin is not built and there is no 'go' on PATH (nor in" \
    "/usr/local/go/bin) to build it; Go >= 1.26 is needed" >&2
  exit 3  # tests/cluster/controlplane.py skips on this code
fi

mkdir -p "$out_dir"
major="${k8s_version#v}"; major="${major%%.*}"
minor="${k8s_version#v*.}"; minor="${minor%%.*}"
# What upstream's hack/lib/version.sh stamps, so /version and the components report the release.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

tmp="$out_dir/kcp.tmp.$$"
trap 'rm -f "$tmp"' EXIT
echo "build-control-plane: building kcp ($k8s_version) into $out_dir; the first build takes minutes" >&2
start=$SECONDS
(
  cd "$src"
  # -mod=mod: go.sum is committed but there is no vendor/ tree. Use every core the machine has.
  GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" GOMAXPROCS="${GOMAXPROCS:-$(nproc)}" CGO_ENABLED=0 \
    go build -trimpath -ldflags "$ldflags" -o "$tmp" .
)
mv -f "$tmp" "$bin"
echo "build-control-plane: built in $((SECONDS - start))s" >&2
echo "$bin"
