#!/usr/bin/env bash
# Download a pinned Go module through the Go module proxy (into the module cache, outside the
# repo) and print the absolute path of a file or directory inside it: how the tests get the
# CRDs of other projects (KEDA's ScaledObject, Kueue's kinds) from those projects' own published
# modules, nothing copied into this repository.
#
#   scripts/fetch-crds.sh MODULE@VERSION PATH
#   scripts/fetch-crds.sh github.com/kedacore/keda/v2@v2.19.0 config/crd/bases/keda.sh_scaledobjects.yaml
#   scripts/fetch-crds.sh sigs.k8s.io/kueue@v0.17.0 config/components/crd/bases
#
# stdout: the path (a file, or a directory for the caller to list); nothing else.
# Exit 0: found. 1: bad arguments, download failed, or PATH not in the module. 3: no `go` on
# PATH nor in /usr/local/go/bin (callers skip, as for scripts/build-control-plane.sh).
# The module's go.mod must be one this Go understands (KEDA v2.19.0 works with Go 1.26).
set -euo pipefail
export PATH="$PATH:/usr/local/go/bin"

if [[ $# -ne 2 || "$1" != *@* || -z "$2" ]]; then
  echo "usage: $0 MODULE@VERSION PATH-IN-MODULE" >&2
  exit 1
fi
module="$1" inner="$2"
if [[ "$inner" == /* || "$inner" == *..* ]]; then
  echo "fetch-crds: PATH must be relative to the module root: $inner" >&2
  exit 1
fi
if ! command -v go >/dev/null 2>&1; then
  echo "fetch-crds: no 'go' on PATH (nor in /usr/local/go/bin) to download $module" >&2
  exit 3
fi

# outside any module: `go mod download MODULE@VERSION` then needs no go.mod
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if ! json="$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$module")"; then
  echo "fetch-crds: go mod download $module failed:" >&2
  echo "$json" >&2
  exit 1
fi
dir="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' | head -n1)"
if [[ -z "$dir" || ! -d "$dir" ]]; then
  echo "fetch-crds: go mod download $module gave no module directory" >&2
  echo "$json" >&2
  exit 1
fi
if [[ ! -e "$dir/$inner" ]]; then
  echo "fetch-crds: $inner is not in $module ($dir)" >&2
  exit 1
fi
echo "$dir/$inner"
