"""A ConfigMap as a pod sees it through a volume mount: late.

Kubernetes documents that a mounted ConfigMap is refreshed by the kubelet's periodic sync from
its own TTL cache, so an update reaches the files "as long as kubelet sync period + ttl of
ConfigMaps cache in kubelet" later (kubernetes.io, Configure a Pod to Use a ConfigMap, "Mounted
ConfigMaps are updated automatically"; both default to one minute), and the kubelet's periodic
sync of a pod comes round every sync period jittered by up to half of it (kubelet
pod_workers.go, `wait.Jitter(resyncInterval, workerResyncIntervalJitterFactor)` with factor
0.5): up to 90s + 60s. A pod whose ConfigMap volume does not exist does not start at all (the
volume cannot be mounted; the GPU operator's mig-manager DaemonSet mounts its ConfigMap as a
non-optional volume, NVIDIA/gpu-operator assets/state-mig-manager/0600_daemonset.yaml), and
starts with the then-current content once it exists. (The volume is mounted as a directory,
not with subPath, so updates do reach it.)

`MountedConfigMap.view()` gives the content the pod's files hold now: the newest version that
has been in the API server for at least `delay` seconds (of the injected clock), the worst case
by default; a test makes a slower kubelet by raising `delay`. Every call also records what the
API server holds, so call it often enough to see each version (the stand-ins call it every step).
A version counts from when this object first saw it, unless `written` says when the API server
wrote it (on wall time: `server_write_time`), so a loop that looks late does not see it late.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from kubernetes import client

SYNC_PERIOD_PLUS_CACHE_TTL = 150.0
"""60s sync period x 1.5 (jitter) + 60s ConfigMap cache TTL: the kubelet's defaults."""


class MountedConfigMap:
    def __init__(
        self,
        api_client,
        namespace: str,
        name: str,
        clock: Callable[[], datetime],
        delay: float = SYNC_PERIOD_PLUS_CACHE_TTL,
        written: Callable[[client.V1ConfigMap], datetime | None] | None = None,
        core: Any = None,  # a CoreV1Api's read_namespaced_config_map (tests); else api_client's
    ):
        self.core = core or client.CoreV1Api(api_client)
        self.namespace, self.name, self.clock, self.delay = namespace, name, clock, delay
        self.written = written
        self.versions: list[
            tuple[datetime | None, str, dict[str, str]]
        ] = []  # (first seen, rv, data)
        self.started = False
        self._observe(mount=True)

    def _observe(self, mount: bool = False) -> None:
        try:
            cm = self.core.read_namespaced_config_map(self.name, self.namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                return
            raise
        rv = cm.metadata.resource_version
        if not self.started:  # the pod starts now, with what is there now
            self.started = True
            self.versions.append((None, rv, dict(cm.data or {})))
        elif not self.versions or self.versions[-1][1] != rv:
            at = self.written(cm) if self.written else None
            self.versions.append((at or self.clock(), rv, dict(cm.data or {})))

    def view(self) -> dict[str, str] | None:
        """The files' content now; None while the pod cannot start (no ConfigMap yet)."""
        self._observe()
        if not self.started:
            return None
        now = self.clock()
        current = self.versions[0][2]
        for seen, _, data in self.versions:
            if seen is None or (now - seen).total_seconds() >= self.delay:
                current = data
        return current


def server_write_time(cm: client.V1ConfigMap) -> datetime | None:
    """When the API server last wrote `cm` (its newest managedFields entry, to the second: a
    version counts from at most a second early), for stand-ins on wall time."""
    times = [f.time for f in cm.metadata.managed_fields or [] if f.time is not None]
    return max(times, default=None)
