"""Keys computed once per object (`Obs`'s cached properties) are invisible to pydantic: equality,
hashing, dumps and JSON read the fields only, and a copy with changed fields computes them
again instead of carrying the old value."""

from __future__ import annotations

import copy
import pickle

from reconciler.observe.model import (
    Autoscaler,
    InferenceService,
    Obs,
    PodGpus,
    Request,
    SuspendedJob,
    Workload,
)


def _pod(name: str = "a", **kw) -> Workload:
    return Workload(namespace="team", name=name, request=Request(gpus=1), node="n1", **kw)


def test_the_classes_name_their_cached_properties():
    assert Workload.cached_names == ("key", "placed")
    for cls in (PodGpus, InferenceService, Autoscaler, SuspendedJob):
        assert cls.cached_names == ("key",)
    assert Obs.cached_names == ()


def test_a_read_key_changes_nothing_pydantic_sees():
    read, fresh = _pod(), _pod()
    assert read.key == "team/a" and read.placed
    assert "key" in read.__dict__ and "key" not in fresh.__dict__
    assert read == fresh
    assert read.model_dump() == fresh.model_dump()
    assert read.model_dump_json() == fresh.model_dump_json()
    assert "key" not in read.model_dump(by_alias=True)
    assert repr(read) == repr(fresh)
    assert read.model_fields_set == fresh.model_fields_set
    assert Workload.model_validate_json(read.model_dump_json()) == read


def test_a_copy_with_changed_fields_computes_its_key_again():
    w = _pod()
    assert w.key == "team/a" and w.placed
    moved = w.model_copy(update={"name": "b", "node": None})
    assert moved.key == "team/b" and not moved.placed
    assert moved == _pod("b").model_copy(update={"node": None})
    same = w.model_copy()
    assert same.key == "team/a" and same == w
    deep = w.model_copy(update={"namespace": "other"}, deep=True)
    assert deep.key == "other/a"


def test_copies_and_pickles_keep_a_key_that_matches_their_fields():
    w = _pod()
    assert w.key
    for c in (copy.copy(w), copy.deepcopy(w), pickle.loads(pickle.dumps(w))):
        assert c == w and c.key == "team/a"


def test_hashing_reads_the_fields_only():
    read, fresh = (
        Autoscaler(kind="ScaledObject", namespace="ns", name="so", min_replicas=0, max_replicas=3)
        for _ in range(2)
    )
    assert read.key == "ns/so" and "key" in read.__dict__
    assert hash(read) == hash(fresh) and {read, fresh} == {fresh}


def test_service_keys_too():
    s = InferenceService(
        namespace="ns", name="svc", replicas=1, replica_request=Request(shared_slices=1)
    )
    assert s.key == "ns/svc"
    assert s.model_copy(update={"name": "other"}).key == "ns/other"
