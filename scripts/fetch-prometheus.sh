#!/usr/bin/env bash
# Obtain the Prometheus server the signal tests run against: Debian's `prometheus` package,
# downloaded with apt-get (not installed: nothing outside the cache is touched) and unpacked
# with dpkg -x into a cache outside the repo; print the binary's path on stdout.
#
#   scripts/fetch-prometheus.sh               # download if missing, print path
#   GPUPOOL_CACHE=/some/dir scripts/...       # cache root (default $XDG_CACHE_HOME/gpupool)
#   PROMETHEUS_DEB_VERSION=... scripts/...    # another version of the package
#
# A cached binary is found in well under a second. Needs apt-get and dpkg-deb (Debian/Ubuntu)
# with a sources list that has the version (Debian bookworm's main has 2.42.0+ds-5+deb12u1).
set -euo pipefail

version="${PROMETHEUS_DEB_VERSION:-2.42.0+ds-5+deb12u1}"
cache_root="${GPUPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}"
out_dir="$cache_root/prometheus/$version"
bin="$out_dir/root/usr/bin/prometheus"

if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi
for tool in apt-get dpkg-deb; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "fetch-prometheus: $bin is not there and there is no '$tool' to fetch Debian's" \
      "prometheus $version (set GPUPOOL_SKIP_PROMETHEUS=1 to skip the tests that need it)" >&2
    exit 3
  fi
done

mkdir -p "$out_dir"
work="$(mktemp -d "$out_dir/fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "fetch-prometheus: downloading Debian's prometheus $version into $out_dir" >&2
# a fresh machine may have empty package lists: refresh them once (needs root) and retry
(cd "$work" && apt-get download -q "prometheus=$version" >&2) ||
  { [[ "$(id -u)" == 0 ]] && apt-get update -q >&2 &&
    (cd "$work" && apt-get download -q "prometheus=$version" >&2); } || {
  echo "fetch-prometheus: 'apt-get download prometheus=$version' failed (an 'apt-get update'" \
    "may be needed, or the version is not in this machine's sources)" >&2
  exit 1
}
deb="$(ls "$work"/prometheus_*.deb | head -n 1)"
dpkg-deb -x "$deb" "$work/root"
if [[ ! -x "$work/root/usr/bin/prometheus" ]]; then
  echo "fetch-prometheus: $deb has no usr/bin/prometheus" >&2
  exit 1
fi
rm -rf "$out_dir/root"
mv "$work/root" "$out_dir/root"
echo "$bin"
