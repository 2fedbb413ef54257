"""The objects an observation lists every time (Jobs, inference services, quotas, Kueue's) are
asked for at once, not one round trip after another (`reconciler/observe/kube.py`, `_observe`):
a cycle's observation waits for the slowest list. What a list on another thread reports
unreadable still reaches the snapshot, and a list that fails still fails the observation."""

from __future__ import annotations

import contextlib
import threading
from unittest import mock

import pytest
from kubernetes import client

from reconciler import conventions as C
from reconciler.observe.kube import observe_cluster
from tests.observe.fake_cluster import NOW, base, serving


def _waiting_on(barrier: threading.Barrier, cls: type, method: str) -> type:
    """`cls` (a fake API class) whose `method` waits at `barrier` before it answers."""
    answer = getattr(cls, method)

    def wait_then_answer(self, *a, **kw):
        barrier.wait()
        return answer(self, *a, **kw)

    return type(cls.__name__, (cls,), {method: wait_then_answer})


def test_the_lists_of_one_observation_are_in_flight_together():
    """Four lists, one of each reader, each held until all four are asked: one after the other,
    the first would wait for the rest for good (the barrier breaks after 30 s and fails it)."""
    c = base()
    c.kueue = {"resourceflavors": [], "clusterqueues": [], "localqueues": []}
    barrier = threading.Barrier(4, timeout=30)
    with serving(c), contextlib.ExitStack() as patched:  # inside `serving`: undone first
        custom = client.CustomObjectsApi

        class Custom(custom):  # only Kueue's first list waits: the others are not counted
            def list_cluster_custom_object(self, group, version, plural, **kw):
                if (group, plural) == (C.KUEUE_GROUP, "resourceflavors"):
                    barrier.wait()
                return super().list_cluster_custom_object(group, version, plural, **kw)

        for name, method in (
            ("BatchV1Api", "list_job_for_all_namespaces"),
            ("AppsV1Api", "list_deployment_for_all_namespaces"),
            ("CoreV1Api", "list_resource_quota_for_all_namespaces"),
        ):
            waiting = _waiting_on(barrier, getattr(client, name), method)
            patched.enter_context(mock.patch.object(client, name, waiting))
        patched.enter_context(mock.patch.object(client, "CustomObjectsApi", Custom))
        observed = observe_cluster(object(), now=NOW)
    assert not barrier.broken
    assert observed.unreadable == [] and observed.kueue == []
    assert {j.name for j in observed.suspended_jobs} and observed.services and observed.quotas


def test_what_a_list_on_another_thread_reports_reaches_the_snapshot():
    c = base()
    c.scaled_objects[0]["spec"] = "x"  # read by the services' list, on a thread of the pool
    c.api_server = False
    with serving(c):
        observed = observe_cluster(object(), now=NOW)
    assert [(u.ref, u.message) for u in observed.unreadable] == [
        ("ScaledObject team-b/summarize", "left out: spec is a string ('x'), not an object")
    ]


def test_a_list_that_fails_fails_the_observation():
    c = base()
    with serving(c):

        class Batch(client.BatchV1Api):
            def list_job_for_all_namespaces(self, **_):
                raise client.ApiException(status=500, reason="etcdserver: leader changed")

        failing = mock.patch.object(client, "BatchV1Api", Batch)
        with failing, pytest.raises(client.ApiException) as err:
            observe_cluster(object(), now=NOW)
    assert err.value.status == 500
