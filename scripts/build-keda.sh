#!/usr/bin/env bash
# Build KEDA's own operator (cmd/operator) and metrics server (cmd/adapter), at the version
# tests/neighbours/keda/go.mod pins, from the Go module proxy into a cache outside the repo, once
# per source hash; print the cache directory (holding keda-operator and keda-adapter) on stdout.
# Same conventions as build-nvparse.sh:
#
#   scripts/build-keda.sh                     # build if missing, print the directory
#   GPUPOOL_CACHE=/some/dir scripts/...       # cache root (default $XDG_CACHE_HOME/gpupool)
#   KEDA_FORCE=1 scripts/...                  # rebuild even if cached
#
# Exit 3: not built and no Go to build it (tests/neighbours/keda/run.py turns that into a
# failure that says so, or a skip with GPUPOOL_SKIP_KEDA=1). KEDA links every scaler it has
# (cloud SDKs included: its pkg/scaling builds them all from one package), so the first build
# takes long: docs/development.md, "How long it takes".
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$repo/tests/neighbours/keda"
export PATH="$PATH:/usr/local/go/bin"
module="github.com/kedacore/keda/v2"

version="$(awk -v m="$module" '$1=="require" && $2==m {print $3} $1==m {print $2}' "$src/go.mod" |
  head -1)"
if [[ -z "$version" ]]; then
  echo "build-keda: cannot read the $module version from $src/go.mod" >&2
  exit 1
fi
hash="$(
  cd "$src"
  { cat go.mod go.sum "$repo/scripts/build-keda.sh"; } | sha256sum | cut -c1-16
)"
cache_root="${GPUPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}"
out_dir="$cache_root/keda/$version-$hash"

if [[ -x "$out_dir/keda-operator" && -x "$out_dir/keda-adapter" && -z "${KEDA_FORCE:-}" ]]; then
  echo "$out_dir"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "build-keda: $out_dir is not built and there is no 'go' on PATH (nor in" \
    "/usr/local/go/bin) to build KEDA $version; Go >= 1.25.6 is needed" >&2
  exit 3
fi

mkdir -p "$out_dir"
tmp="$(mktemp -d "$out_dir/build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "build-keda: building KEDA $version (operator, metrics server) into $out_dir" >&2
start=$SECONDS
(
  cd "$src"
  # One `go build` for both: they share most packages. No cgo is needed.
  CGO_ENABLED=0 GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" GOMAXPROCS="${GOMAXPROCS:-$(nproc)}" \
    go build -trimpath -ldflags "-s -w" -o "$tmp/" "$module/cmd/operator" "$module/cmd/adapter"
)
mv -f "$tmp/operator" "$out_dir/keda-operator"
mv -f "$tmp/adapter" "$out_dir/keda-adapter"
echo "build-keda: built in $((SECONDS - start))s" >&2
echo "$out_dir"
