"""resource.k8s.io is read only when the caller asks (`observe_cluster(..., dra=...)`): the
controller asks while a pool is on DRA or objects gpupool made there are left to prune
(`Controller._reads_dra`); without, not one DRA list is made."""

from __future__ import annotations

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
