#!/usr/bin/env bash
# Build tests/nvidia/nvmlsim (a libnvidia-ml.so.1-compatible NVML library for tests on
# machines without a GPU; C, no dependency) into a cache outside the repo, once per source hash;
# print the directory holding libnvidia-ml.so.1 on stdout (put it on LD_LIBRARY_PATH, or under
# a driver root). Same conventions as build-nvparse.sh:
#
#   scripts/build-nvmlsim.sh                  # build if missing, print the directory
#   GPUPOOL_CACHE=/some/dir scripts/...       # cache root (default $XDG_CACHE_HOME/gpupool)
#   NVMLSIM_FORCE=1 scripts/...               # rebuild even if cached
#
# Exit 3: not built and no C compiler (cc) to build it. Measured build time: docs/development.md.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$repo/tests/nvidia/nvmlsim/nvmlsim.c"
hash="$(cat "$src" "$repo/scripts/build-nvmlsim.sh" | sha256sum | cut -c1-16)"
cache_root="${GPUPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}"
out_dir="$cache_root/nvmlsim/$hash"
lib="$out_dir/libnvidia-ml.so.1"

if [[ -f "$lib" && -z "${NVMLSIM_FORCE:-}" ]]; then
  echo "$out_dir"
  exit 0
fi
cc="${CC:-cc}"
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "build-nvmlsim: $lib is not built and there is no C compiler ($cc) to build it" >&2
  exit 3
fi
mkdir -p "$out_dir"
tmp="$out_dir/lib.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# The soname is NVML's: a loader that asks for libnvidia-ml.so.1 (go-nvml's dlopen, pynvml's
# CDLL) finds this library by that name, and only the exported NVML symbols are visible.
"$cc" -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -fPIC -fvisibility=hidden -shared \
  -Wl,-soname,libnvidia-ml.so.1 -o "$tmp" "$src" -lpthread
mv -f "$tmp" "$lib"
echo "build-nvmlsim: built $lib" >&2
echo "$out_dir"
