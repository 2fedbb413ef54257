#!/usr/bin/env bash
# Build Kueue's manager (sigs.k8s.io/kueue cmd/kueue, at the version tests/neighbours/kueue/go.mod
# pins) into a cache outside the repo, once per source hash; print the binary's path on stdout.
# Same conventions as build-control-plane.sh and build-nvparse.sh:
#
#   scripts/build-kueue.sh                    # build if missing, print path
#   GPUPOOL_CACHE=/some/dir scripts/...       # cache root (default $XDG_CACHE_HOME/gpupool)
#   KUEUE_FORCE=1 scripts/...                 # rebuild even if cached
#
# Kueue has a module of its own (tests/neighbours/kueue), not the control plane's: Kueue v0.17.0
# is built against Kubernetes 0.35 libraries, and under the control plane's 0.37 ones
# controller-runtime v0.23.3 and kubeflow's trainer API do not compile.
#
# Exit 3: not built and no Go to build it (tests/integration/kueue_manager.py turns that into a
# failure that says so, or a skip with GPUPOOL_SKIP_KUEUE=1). Measured build time:
# docs/development.md, "How long it takes".
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$repo/tests/neighbours/kueue"
export PATH="$PATH:/usr/local/go/bin"

version="$(awk '$1=="sigs.k8s.io/kueue"{print $2; exit}' "$src/go.mod")"
if [[ -z "$version" ]]; then
  echo "build-kueue: cannot read the sigs.k8s.io/kueue version from $src/go.mod" >&2
  exit 1
fi
hash="$(
  cd "$src"
  { cat go.mod go.sum; cat "$repo/scripts/build-kueue.sh"; } | sha256sum | cut -c1-16
)"
cache_root="${GPUPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}"
out_dir="$cache_root/kueue/$version-$hash"
bin="$out_dir/kueue"

if [[ -x "$bin" && -z "${KUEUE_FORCE:-}" ]]; then
  echo "$bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "build-kueue: $bin is not built and there is no 'go' on PATH (nor in" \
    "/usr/local/go/bin) to build it; Go >= 1.26 is needed" >&2
  exit 3
fi

mkdir -p "$out_dir"
tmp="$out_dir/kueue.tmp.$$"
trap 'rm -f "$tmp"' EXIT
echo "build-kueue: building Kueue's manager ($version) into $out_dir; the first build takes minutes" >&2
start=$SECONDS
(
  cd "$src"
  # Only cmd/kueue (the go.mod's tool), no cgo, no debug info.
  GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" GOMAXPROCS="${GOMAXPROCS:-$(nproc)}" CGO_ENABLED=0 \
    go build -trimpath -ldflags "-s -w" -o "$tmp" sigs.k8s.io/kueue/cmd/kueue
)
mv -f "$tmp" "$bin"
echo "build-kueue: built in $((SECONDS - start))s" >&2
echo "$bin"
