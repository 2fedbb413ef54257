"""resource.k8s.io is read only when the caller asks (`observe_cluster(..., dra=...)`): the
controller asks while a pool is on DRA or objects gpupool made there are left to prune
(`Controller._reads_dra`); without, not one DRA list is made."""

from __future__ import annotations

from reconciler import conventions as C
from reconciler.observe.kube import observe_cluster
from tests.cluster.dra_slices import gpu_device, node_slice
from tests.observe.fake_cluster import NOW, Cluster, node, serving


class Counted(dict):
    """A fake cluster's DRA objects by plural, counting what is listed."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.listed: list[str] = []

    def get(self, plural, default=None):
        self.listed.append(plural)
        return super().get(plural, default)


def test_no_dra_list_without_dra_and_all_four_plus_taint_rules_with() -> None:
    dra = Counted({"resourceslices": [node_slice("n1", [gpu_device("n1", 0)])]})
    c = Cluster(nodes=[node("n1")], dra=dra)
    with serving(c):
        skipped = observe_cluster(object(), now=NOW, dra=False)
    assert skipped.dra is None and dra.listed == []
    with serving(c):
        read = observe_cluster(object(), now=NOW)
    assert read.dra is not None and [d.name for d in read.dra.devices("n1")] == ["gpu-0"]
    assert sorted(dra.listed) == sorted(
        [
            "resourceslices",
            "deviceclasses",
            "resourceclaims",
            "resourceclaimtemplates",
            "devicetaintrules",
        ]
    )


def test_device_taint_rules_are_read_and_a_bad_one_is_reported() -> None:
    good = {
        "metadata": {"name": "gpupool-drain-n1-gpu-0", "labels": {C.MANAGED_BY_LABEL: "gpupool"}},
        "spec": {
            "deviceSelector": {"driver": C.DRA_DRIVER, "pool": "n1", "device": "gpu-0"},
            "taint": {"key": C.DRA_DRAIN_TAINT, "value": "repartition", "effect": "NoSchedule"},
        },
    }
    bad = {"metadata": {"name": "bad"}, "spec": {"taint": {"key": 7}}}
    c = Cluster(nodes=[node("n1")], dra={"devicetaintrules": [good, bad]})
    with serving(c):
        o = observe_cluster(object(), now=NOW)
    assert o.dra is not None
    (r,) = o.dra.taint_rules
    assert (r.name, r.pool, r.device, r.taint.key, r.managed_by) == (
        "gpupool-drain-n1-gpu-0",
        "n1",
        "gpu-0",
        C.DRA_DRAIN_TAINT,
        "gpupool",
    )
    assert o.dra.gpupool_objects()
    assert [(u.kind, u.name) for u in o.unreadable] == [("DeviceTaintRule", "bad")]
