#!/usr/bin/env bash
# Build `helm` (helm.sh/helm/v4, cmd/helm, at the pinned version) from the Go module proxy into a
# cache outside the repo, once per version; print the binary's path on stdout. Same conventions as
# build-nvparse.sh:
#
#   scripts/build-helm.sh                     # build if missing, print path
#   GPUPOOL_CACHE=/some/dir scripts/...       # cache root (default $XDG_CACHE_HOME/gpupool)
#   HELM_FORCE=1 scripts/...                  # rebuild even if cached
#
# Exit 3: not built and no Go to build it (tests/deploy/helm.py turns that into a failure that
# says so, or a skip with GPUPOOL_SKIP_HELM=1). Measured build time: docs/development.md, "How
# long it takes". The version is pinned here and in tests/deploy/helm.py (HELM_VERSION).
set -euo pipefail

version="${HELM_VERSION:-v4.3.2}"
export PATH="$PATH:/usr/local/go/bin"
cache_root="${GPUPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}"
out_dir="$cache_root/helm/$version"
bin="$out_dir/helm"

if [[ -x "$bin" && -z "${HELM_FORCE:-}" ]]; then
  echo "$bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "build-helm: $bin is not built and there is no 'go' on PATH (nor in" \
    "/usr/local/go/bin) to build it; Go >= 1.26 is needed" >&2
  exit 3
fi

mkdir -p "$out_dir"
tmp="$(mktemp -d "$out_dir/build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "build-helm: building helm $version into $out_dir" >&2
start=$SECONDS
# `go install module/cmd@version` builds the module as released (its own go.mod and go.sum,
# checked against the checksum database), outside any local module. -X stamps the version that
# `helm version` prints (helm's Makefile sets the same variable).
(
  cd "$tmp"
  GOBIN="$tmp" GOFLAGS="${GOFLAGS:-}" GOMAXPROCS="${GOMAXPROCS:-$(nproc)}" CGO_ENABLED=0 \
    go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version" \
    "helm.sh/helm/v4/cmd/helm@$version"
)
mv -f "$tmp/helm" "$bin"
echo "build-helm: built in $((SECONDS - start))s" >&2
echo "$bin"
