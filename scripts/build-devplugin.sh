#!/usr/bin/env bash
# Build NVIDIA's nvidia-device-plugin (k8s-device-plugin, the version tests/nvidia/devplugin/go.mod
# pins, from the Go module proxy) and kubeletsim (the kubelet's side of the device-plugin API,
# tests/nvidia/devplugin/kubeletsim) into a cache outside the repo, once per source hash; print
# the directory holding both binaries on stdout. Same conventions as build-nvparse.sh:
#
#   scripts/build-devplugin.sh                # build if missing, print the directory
#   GPUPOOL_CACHE=/some/dir scripts/...       # cache root (default $XDG_CACHE_HOME/gpupool)
#   DEVPLUGIN_FORCE=1 scripts/...             # rebuild even if cached
#
# Exit 3: not built and no Go to build it. Measured build time: docs/development.md.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$repo/tests/nvidia/devplugin"
export PATH="$PATH:/usr/local/go/bin"

version="$(awk '$1=="github.com/NVIDIA/k8s-device-plugin"{print $2}' "$src/go.mod")"
if [[ -z "$version" ]]; then
  echo "build-devplugin: cannot read the k8s-device-plugin version from $src/go.mod" >&2
  exit 1
fi
hash="$(
  cd "$src"
  { cat go.mod go.sum; for f in $(find . -name '*.go' | LC_ALL=C sort); do echo "== $f"; cat "$f"; done
    cat "$repo/scripts/build-devplugin.sh"; } | sha256sum | cut -c1-16
)"
cache_root="${GPUPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}"
out_dir="$cache_root/devplugin/$version-$hash"

if [[ -x "$out_dir/nvidia-device-plugin" && -x "$out_dir/kubeletsim" && -z "${DEVPLUGIN_FORCE:-}" ]]; then
  echo "$out_dir"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "build-devplugin: $out_dir is not built and there is no 'go' on PATH (nor in" \
    "/usr/local/go/bin) to build it; Go >= 1.26 is needed" >&2
  exit 3
fi
mkdir -p "$out_dir"
tmp="$out_dir/tmp.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
echo "build-devplugin: building nvidia-device-plugin $version and kubeletsim into $out_dir" >&2
start=$SECONDS
(
  cd "$src"
  # cgo stays on: go-nvml's bindings are cgo (they dlopen libnvidia-ml.so.1 at run time).
  export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" GOMAXPROCS="${GOMAXPROCS:-$(nproc)}"
  go build -trimpath -ldflags "-s -w" -o "$tmp/nvidia-device-plugin" \
    github.com/NVIDIA/k8s-device-plugin/cmd/nvidia-device-plugin
  go build -trimpath -ldflags "-s -w" -o "$tmp/kubeletsim" ./kubeletsim
)
mv -f "$tmp/nvidia-device-plugin" "$tmp/kubeletsim" "$out_dir/"
echo "build-devplugin: built in $((SECONDS - start))s" >&2
echo "$out_dir"
