"""The GPU request of a pod, a pod template or a container set, read from its resources
(whole cards, MIG instances by profile, shared slices) and its declared card memory
(`gpupool.io/gpu-memory`)."""

from __future__ import annotations

import math
from typing import Any

from reconciler import conventions as C
from reconciler.observe.kube_common import _unreadable
from reconciler.observe.model import Request
from reconciler.policy.quantity import parse_quantity


def request_from_resources(resources: dict[str, Any] | None) -> Request:
    """GPU request of a container set: whole cards, MIG instances by profile, shared slices."""
    gpus, slices, mig = 0, 0, {}
    for k, v in (resources or {}).items():
        n = int(math.ceil(parse_quantity(str(v))))
        if k == C.GPU_RESOURCE:
            gpus += n
        elif k == C.SHARED_RESOURCE:
            slices += n
        elif k.startswith(C.MIG_RESOURCE_PREFIX):
            prof = k[len(C.MIG_RESOURCE_PREFIX) :]
            prof = prof[:-3] + "+me" if prof.endswith(".me") else prof
            mig[prof] = mig.get(prof, 0) + n
    return Request(gpus=gpus, mig=mig, shared_slices=slices)


def _declared_memory_mib(annotations: dict | None, who: tuple[str, str, str]) -> int:
    """`gpupool.io/gpu-memory` as MiB; an unreadable value counts as undeclared (reported
    against `who`: kind, namespace, name)."""
    text = (annotations or {}).get(C.GPU_MEMORY_ANN)
    if not text:
        return 0
    try:
        value = parse_quantity(str(text))
    except (ValueError, TypeError):
        _unreadable(*who, f"{C.GPU_MEMORY_ANN}={text!r} is not a quantity; read as undeclared")
        return 0
    return max(0, int(math.ceil(value / 2**20)))


def pod_request(pod: Any) -> Request:
    meta = pod.metadata
    return _pod_resources(pod).model_copy(
        update={
            "gpu_memory_mib": _declared_memory_mib(
                meta.annotations, ("Pod", meta.namespace, meta.name)
            )
        }
    )


def _pod_resources(pod: Any) -> Request:
    total: dict[str, int] = {}
    for c in pod.spec.containers or []:
        res = (c.resources.limits or {}) if c.resources else {}
        req = (c.resources.requests or {}) if c.resources else {}
        for k, v in {**req, **res}.items():
            if k in (C.GPU_RESOURCE, C.SHARED_RESOURCE) or k.startswith(C.MIG_RESOURCE_PREFIX):
                total[k] = total.get(k, 0) + int(math.ceil(parse_quantity(str(v))))
    return request_from_resources(total)


def template_request(spec: Any) -> Request:
    """The GPU request of one pod a pod template (`spec`) makes."""
    resources: dict[str, Any] = {}
    for c in spec.containers or []:
        if c.resources:
            resources.update(c.resources.requests or {})
            resources.update(c.resources.limits or {})
    return request_from_resources(resources)
