"""DRA mode's objects (reconciler/plan/objects/dra_objects.py, plan/dra.py): rendered once and
then left alone (the effect model stores what apply writes, and the next plan finds it as
wanted), a foreign object of one of gpupool's names is a finding, a template a pod still names
is never pruned, and a cluster without resource.k8s.io gets no DRA action."""

from __future__ import annotations

from pathlib import Path

from reconciler.observe.model_dra import (
    ClaimTemplateObject,
    DeviceClassObject,
    DeviceResult,
    DraDevice,
    DraState,
    PodClaims,
    ResourceClaimObject,
    ResourceSlice,
)
from reconciler.plan.dra import class_name, desired_dra_objects, quota_key, whole_counts
from reconciler.plan.planner import plan, plan_with_view
from reconciler.plan.quotas import desired_resource_quotas
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.sim.actions import apply_plan
from tests.plan.scenarios import dra_pool

DRA_KINDS = {"dra-object", "prune-dra-object"}
EMPTY = DraState()


def _inputs(dra: DraState | None = EMPTY):
    text, observed = dra_pool()
    return load([SourceFile("desired.yaml", text)]), observed.model_copy(update={"dra": dra})


def test_what_a_dra_pool_renders() -> None:
    desired, _ = _inputs()
    want = desired_dra_objects(desired)
    cls = want[("DeviceClass", "", "gpupool-a100-mig-3g-40gb")]
    expr = cls["spec"]["selectors"][0]["cel"]["expression"]
    assert "device.driver == 'gpu.nvidia.com'" in expr
    assert "device.attributes['gpu.nvidia.com'].type == 'mig'" in expr
    assert "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'" in expr
    assert "productName in ['NVIDIA A100-SXM4-80GB'" in expr
    assert cls["metadata"]["annotations"] == {"gpupool.io/mig-profile": "3g.40gb"}
    tmpl = want[("ResourceClaimTemplate", "team-b", "gpupool-a100-gpu-4")]
    assert tmpl["spec"]["spec"]["devices"]["requests"] == [
        {"name": "gpu", "exactly": {"deviceClassName": "gpupool-a100-gpu", "count": 4}}
    ]
    assert whole_counts(desired.pools["a100"]) == [1, 2, 4, 8]
    hard = desired_resource_quotas(desired)[("team-b", "gpupool-team-b")]
    assert quota_key("a100") in hard and quota_key("a100", "3g.40gb") in hard
    assert not any(k.startswith("requests.nvidia.com/mig") for k in hard)


def test_rendered_once_then_converged() -> None:
    desired, observed = _inputs()
    first = plan(desired, observed)
    assert {a.kind for a in first.actions} & DRA_KINDS
    after = apply_plan(desired, observed, first, now=observed.observed_at)
    assert not {a.kind for a in plan(desired, after).actions} & DRA_KINDS


def test_a_foreign_object_of_gpupools_name_is_a_finding() -> None:
    name = class_name("a100")
    desired, observed = _inputs(DraState(device_classes=[DeviceClassObject(name=name)]))
    p = plan(desired, observed)
    assert f"dra:DeviceClass:{name}" not in {a.id for a in p.actions}
    assert any(f.code == "foreign-object" and name in f.subject for f in p.findings)


def test_a_template_a_pod_names_is_not_pruned() -> None:
    old = ClaimTemplateObject(
        namespace="team-a", name="gpupool-old-gpu-1", devices={"x": 1}, managed_by="gpupool"
    )
    pod = PodClaims(namespace="team-a", pod="p", templates=["gpupool-old-gpu-1"])
    desired, observed = _inputs(DraState(claim_templates=[old], pods=[pod]))
    ids = {a.id for a in plan(desired, observed).actions}
    assert "prune-dra:ResourceClaimTemplate:team-a/gpupool-old-gpu-1" not in ids


def test_a_template_that_differs_is_deleted_and_made_again() -> None:
    name = "gpupool-a100-gpu-2"
    other = ClaimTemplateObject(
        namespace="team-a", name=name, devices={"gpupool-a100-gpu": 3}, managed_by="gpupool"
    )
    desired, observed = _inputs(DraState(claim_templates=[other]))
    acts = {a.id: a for a in plan(desired, observed).actions}
    prune, make = (
        f"prune-dra:ResourceClaimTemplate:team-a/{name}",
        f"dra:ResourceClaimTemplate:team-a/{name}",
    )
    assert prune in acts[make].depends_on and acts[make].verb == "create"


def _claim(name: str, **kw) -> ResourceClaimObject:
    return ResourceClaimObject(namespace="team-a", name=name, **kw)


PINNED = _claim("p-gpus-0123456789", replaces=["p-gpus-abcde", "p-gpus-old"])
"""A claim exact admission pinned, which replaced the template's claim and an earlier one."""


def _sweeps(*claims: ResourceClaimObject, pods: tuple[PodClaims, ...] = ()) -> list:
    desired, observed = _inputs(DraState(claims=[PINNED, *claims], pods=list(pods)))
    return [
        a
        for a in plan(desired, observed).actions
        if a.kind == "prune-dra-object" and a.object_kind == "ResourceClaim"
    ]


def test_a_replaced_claim_left_after_the_gate_is_swept() -> None:
    """A claim a pinned claim replaced, still there, unallocated and named by no pod: pruned
    (its delete after the gate failed); one already gone is not (`p-gpus-old`)."""
    pod = PodClaims(namespace="team-a", pod="p", claims=[PINNED.name])
    (a,) = _sweeps(_claim("p-gpus-abcde"), pods=(pod,))
    assert (a.id, a.namespace, a.name) == (
        "prune-dra:ResourceClaim:team-a/p-gpus-abcde",
        "team-a",
        "p-gpus-abcde",
    )
    assert "replaced it by the pinned claim p-gpus-0123456789" in a.reason
    assert "ResourceQuota" in a.reason


def test_a_replaced_claim_is_kept_while_named_allocated_or_reserved() -> None:
    """Not swept: a claim a pod's status still names (the pinned one not named yet, or a
    snapshot whose pods lag), one allocated, one reserved for a pod."""
    named = PodClaims(namespace="team-a", pod="p", claims=["p-gpus-abcde"])
    assert _sweeps(_claim("p-gpus-abcde"), pods=(named,)) == []
    result = DeviceResult(request="gpu", driver="gpu.nvidia.com", pool="n", device="gpu-0")
    assert _sweeps(_claim("p-gpus-abcde", allocated=[result])) == []
    assert _sweeps(_claim("p-gpus-abcde", reserved_for=["p"])) == []
    # a claim of that name in another namespace is not the one replaced
    other = ResourceClaimObject(namespace="team-b", name="p-gpus-abcde")
    assert _sweeps(other) == []


def test_a_claim_two_pinned_claims_replace_is_swept_once() -> None:
    again = _claim("p-gpus-9999999999", replaces=["p-gpus-abcde"])
    (a,) = _sweeps(_claim("p-gpus-abcde"), again)
    assert a.name == "p-gpus-abcde"


def _slice(node: str, devices: list[dict]) -> ResourceSlice:
    return ResourceSlice(
        name=node, driver="gpu.nvidia.com", pool=node, node=node, generation=1, devices=devices
    )


def _whole_and_mig() -> tuple[list[DraDevice], list[DraDevice]]:
    """Eight whole cards as NVIDIA's driver publishes them, and the same with card 0 split in
    two 3g.40gb instances (a layout the node agent of the scenario does not report)."""
    whole = [DraDevice(name=f"gpu-{i}", attributes={"type": "gpu"}) for i in range(8)]
    mig = [
        DraDevice(name=f"gpu-0-mig-3g40gb-9-{s}", attributes={"type": "mig", "profile": "3g.40gb"})
        for s in (0, 4)
    ] + whole[1:]
    return whole, mig


def test_slices_that_disagree_with_the_agent_are_a_finding() -> None:
    whole, mig = _whole_and_mig()
    desired, observed = _inputs(DraState(slices=[_slice("a100-1", whole), _slice("a100-2", mig)]))
    found = {(f.code, f.subject): f.message for f in plan(desired, observed).findings}
    assert ("dra-slices-stale", "Node a100-2") in found
    assert "gpu0:3g.40gb@0" in found[("dra-slices-stale", "Node a100-2")]
    assert ("dra-slices-stale", "Node a100-1") not in found
    assert not [k for k in found if k[0] == "dra-slices-missing"]
    desired, observed = _inputs(DraState(slices=[_slice("a100-1", whole)]))
    found = {(f.code, f.subject) for f in plan(desired, observed).findings}
    assert ("dra-slices-missing", "Node a100-2") in found


def test_a_nodes_layouts_are_kept_while_its_slices_and_report_are_the_same() -> None:
    """`slices_agree` through a view memo: a node's two layouts are answered from the last
    plan while the node and its slices are the very objects they were (no pass over the
    devices), and computed again for a slice republished."""
    whole, mig = _whole_and_mig()
    desired, observed = _inputs(DraState(slices=[_slice("a100-1", whole), _slice("a100-2", mig)]))
    first, _, memo = plan_with_view(desired, observed, None, None)
    kept = memo.steps["dra-layouts"]
    assert len(kept) == 2
    again, _, memo = plan_with_view(desired, observed, None, memo)
    assert again == first and all(memo.steps["dra-layouts"][k] is kept[k] for k in kept)
    republished = observed.model_copy(
        update={"dra": DraState(slices=[_slice("a100-1", whole), _slice("a100-2", whole)])}
    )
    after, _, memo = plan_with_view(desired, republished, None, memo)
    assert after == plan(desired, republished)
    assert not [f for f in after.findings if f.code == "dra-slices-stale"]
    assert [f for f in first.findings if f.code == "dra-slices-stale"]


def test_without_resource_k8s_io_no_dra_action() -> None:
    desired, observed = _inputs(None)
    assert not {a.kind for a in plan(desired, observed).actions} & DRA_KINDS


EXAMPLE_POOL = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {name: a100}
spec:
  gpuModel: A100-SXM4-80GB
  backend: dra
  nodeSelector: {matchLabels: {gpupool.io/pool: a100}}
  capacity: {nodes: 2, gpusPerNode: 8}
  inference:
    mig: {layouts: [{name: two-3g, profiles: [3g.40gb, 3g.40gb]}]}
---
apiVersion: gpupool.io/v1alpha1
kind: Quota
metadata: {name: team-a}
spec:
  namespaces: [team-a]
  pools: [{pool: a100, whole: {guaranteed: 4}}]
"""


def test_the_deploy_example_is_what_gpupool_renders() -> None:
    import yaml

    path = Path(__file__).resolve().parents[2] / "deploy" / "dra" / "example-pool-objects.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d["kind"] != "Pod"]
    want = desired_dra_objects(load([SourceFile("pool.yaml", EXAMPLE_POOL)]))
    assert docs
    for d in docs:
        meta = dict(d["metadata"])
        key = (d["kind"], meta.pop("namespace", ""), meta.pop("name"))
        assert want[key] == {"metadata": meta, "spec": d["spec"]}, key
