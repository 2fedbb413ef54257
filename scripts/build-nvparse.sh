#!/usr/bin/env bash
# Build tests/nvidia/nvparse (NVIDIA's config parsers: k8s-device-plugin api/config/v1 and
# mig-parted api/spec/v1, at the versions its go.mod pins) into a cache outside the repo, once
# per source hash; print the binary's path on stdout. Same conventions as build-control-plane.sh:
#
#   scripts/build-nvparse.sh                  # build if missing, print path
#   GPUPOOL_CACHE=/some/dir scripts/...       # cache root (default $XDG_CACHE_HOME/gpupool)
#   NVPARSE_FORCE=1 scripts/...               # rebuild even if cached
#
# Exit 3: not built and no Go to build it (tests/nvidia/nvparse_run.py turns that into a
# failure that says so). Measured build time: docs/development.md, "How long it takes".
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$repo/tests/nvidia/nvparse"
export PATH="$PATH:/usr/local/go/bin"

versions="$(awk '$1=="github.com/NVIDIA/k8s-device-plugin"{dp=$2} $1=="github.com/NVIDIA/mig-parted"{mp=$2}
  END{if (dp && mp) print "dp" dp "-mp" mp}' "$src/go.mod")"
if [[ -z "$versions" ]]; then
  echo "build-nvparse: cannot read the NVIDIA module versions from $src/go.mod" >&2
  exit 1
fi
hash="$(
  cd "$src"
  { cat go.mod go.sum; for f in $(ls *.go | LC_ALL=C sort); do echo "== $f"; cat "$f"; done
    cat "$repo/scripts/build-nvparse.sh"; } | sha256sum | cut -c1-16
)"
cache_root="${GPUPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}"
out_dir="$cache_root/nvparse/$versions-$hash"
bin="$out_dir/nvparse"

if [[ -x "$bin" && -z "${NVPARSE_FORCE:-}" ]]; then
  echo "$bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "build-nvparse: $bin is not built and there is no 'go' on PATH (nor in" \
    "/usr/local/go/bin) to build it; Go >= 1.26 is needed" >&2
  exit 3
fi

mkdir -p "$out_dir"
tmp="$out_dir/nvparse.tmp.$$"
trap 'rm -f "$tmp"' EXIT
echo "build-nvparse: building nvparse ($versions) into $out_dir" >&2
start=$SECONDS
(
  cd "$src"
  # cgo stays on (a C compiler is needed): api/config/v1 imports go-nvml, whose package does not
  # build without cgo. Nothing here loads NVML at run time.
  GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" GOMAXPROCS="${GOMAXPROCS:-$(nproc)}" \
    go build -trimpath -ldflags "-s -w" -o "$tmp" .
)
mv -f "$tmp" "$bin"
echo "build-nvparse: built in $((SECONDS - start))s" >&2
echo "$bin"
