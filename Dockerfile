# syntax=docker/dockerfile:1
#
# The image the manifests of deploy/ name: ghcr.io/example/gpupool:0.1.0.
#   docker build -t ghcr.io/example/gpupool:0.1.0 .
#
# One image for both commands: `gpupool reconcile` (the controller; needs the git binary, which
# GitPython and reconciler/loop/sources.py run, and ssh for an ssh:// or git@ URL) and
# `gpupool agent` (the node agent; NVML's libnvidia-ml.so.1 is NOT in the image: the NVIDIA
# container toolkit injects the host driver's copy when the pod runs with runtimeClassName
# nvidia, and nvidia-ml-py loads it at run time).
#
# Made for a read-only root filesystem: nothing is written outside /tmp (HOME, TMPDIR) and
# /var/cache/gpupool (the git cache), both emptyDir volumes in deploy/controller.yaml; Python
# writes no bytecode (the venv's .pyc files are compiled at build time).
#
# Base image: the official python image, pinned by exact version tag AND by the digest of its
# multi-platform index (amd64, arm64, arm/v7, 386, ppc64le), as published in
# docker-library/repo-info, repos/python/remote/3.11.16-slim-bookworm.md (commit 422f3cfe).
# To move to a newer build: docker buildx imagetools inspect python:3.11.16-slim-bookworm
# (the "Digest:" line), or `crane digest`, and replace both FROM lines.

# --------------------------------------------------------------------------- builder
FROM python:3.11.16-slim-bookworm@sha256:c425d915a89a6dcd3183b1797ad9bd8878caff5a417f6371c8df93c8ea8b727f AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY reconciler ./reconciler

# The wheel of gpupool itself (built in isolation with the build backend pyproject.toml names),
# then a venv without pip holding the wheel and its dependencies, binary wheels only (every
# dependency publishes manylinux wheels for CPython 3.11: no compiler in the image).
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
    && python -m venv --without-pip /opt/gpupool \
    && python -m pip --python /opt/gpupool/bin/python install --only-binary=:all: /wheels/gpupool-*.whl \
    && /opt/gpupool/bin/gpupool --help > /dev/null

# --------------------------------------------------------------------------- final
FROM python:3.11.16-slim-bookworm@sha256:c425d915a89a6dcd3183b1797ad9bd8878caff5a417f6371c8df93c8ea8b727f

LABEL org.opencontainers.image.title="gpupool" \
      org.opencontainers.image.description="GitOps reconciler that runs one GPU pool for both training and inference (controller and node agent)" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/example/gpupool" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11.16-slim-bookworm" \
      org.opencontainers.image.base.digest="sha256:c425d915a89a6dcd3183b1797ad9bd8878caff5a417f6371c8df93c8ea8b727f"

# git (the controller's source), openssh-client (GIT_SSH_COMMAND in deploy/controller.yaml),
# ca-certificates (HTTPS remotes). Versions are not pinned: Debian's archive keeps only the
# current version of a package in bookworm and bookworm-security, so an exact pin breaks the
# build at the next security update; the base digest pins everything else.
# The user 65532 gets a passwd entry (ssh refuses to run for a uid without one) whose home is
# /tmp, the emptyDir the manifests mount.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates git openssh-client \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 65532 gpupool \
    && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin gpupool \
    && install -d -o 65532 -g 65532 -m 0700 /var/cache/gpupool

COPY --from=builder /opt/gpupool /opt/gpupool

ENV PATH=/opt/gpupool/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp

USER 65532:65532
ENTRYPOINT ["gpupool"]
CMD ["--help"]
