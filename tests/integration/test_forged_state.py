"""gpupool's state on pods and Jobs, on the real API server (issue "Tenant-proof", item 2).

Two halves. deploy/state-admission.yaml, as shipped: a tenant's ServiceAccount (the built-in
`edit` role in its namespace) may not write gpupool's pod annotations (`gpupool.io/admitted`,
`reserved`, `intended-gpus`, `checkpoint-requested-at`, `move-to`) nor a Job's
(`next-pod-reserved`, `suspended-at`), on create or update, nor claim them for gpupool's field
manager through `metadata.managedFields`; its own annotations stay writable; the controller's
ServiceAccount writes them (through `KubeOps`, under its field manager). And observation,
without that policy (the World installs deploy/ without it, as a cluster that did not apply
it): an annotation someone else wrote (here the cluster admin, as `kubectl annotate` records
itself) is not believed by `observe_cluster`, nor an admission gpupool wrote to a node that
does not exist, while gpupool's own is; the plan holds no cards for the forged admission, and
the controller's cycle puts an Event on the pod saying why.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client

from reconciler import conventions as C
from reconciler.apply.kube import KubeOps
from reconciler.observe.kube import observe_cluster
from reconciler.observe.kube_owners import field_managers, gpupool_owns, gpupool_wrote
from reconciler.observe.trust import annotation_path, gpus_believed
from reconciler.plan.actions import Admit
from reconciler.plan.planner import plan_with_facts
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.support.wait import wait_for

from .gating import gated_namespace, pod
from .harness import DEPLOY, MERGE, add_gpu_node, controller, create_pod, docs
from .scenario import TEXT, base, seed_priority_classes
from .world import AGENT_SA, World
from .world import NS as GPUPOOL_NS

pytestmark = pytest.mark.kube

POLICY = "gpupool-state"
POD_STATE = (
    C.ADMITTED_ANN,
    C.RESERVED_ANN,
    C.INTENDED_GPUS_ANN,
    C.CHECKPOINT_REQUESTED_ANN,
    C.MOVE_TO_ANN,
)
JOB_STATE = (C.NEXT_POD_RESERVED_ANN, C.SUSPENDED_BY_ANN)
TENANTS_OWN = {  # annotations a workload's owner writes: not gpupool's to guard
    C.CHECKPOINTABLE_ANN: "true",
    C.LAST_CHECKPOINT_ANN: "2026-12-03T06:00:00Z",
    C.CHECKPOINT_DONE_ANN: "true",
    C.GANG_ANN: "g",
    C.GANG_SIZE_ANN: "1",
}
NOWHERE = "forged-nowhere"  # a pool with no nodes: the pods that ask for it stay Pending
OTHER = "kubectl-annotate"  # the field manager `kubectl annotate` records


# ---------------------------------------------------------------- helpers


def install_policy(kube: World) -> None:
    """deploy/state-admission.yaml as shipped (kustomization.yaml installs it; the World's
    install leaves it out), checked by the API server without warnings; deleted at teardown."""
    assert "state-admission.yaml" in docs(DEPLOY / "kustomization.yaml")[0]["resources"]
    adm = client.AdmissionregistrationV1Api(kube.api_client)
    for d in docs(DEPLOY / "state-admission.yaml"):
        if d["kind"] == "ValidatingAdmissionPolicy":
            create, delete = (
                adm.create_validating_admission_policy,
                adm.delete_validating_admission_policy,
            )
        else:
            create, delete = (
                adm.create_validating_admission_policy_binding,
                adm.delete_validating_admission_policy_binding,
            )
        try:
            delete(d["metadata"]["name"])  # left by an interrupted run
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        kube.cleanup(lambda n=d["metadata"]["name"], delete=delete: delete(n))
        create(d)
    status = wait_for(
        f"the API server to type-check {POLICY}",
        lambda: (
            (st := adm.read_validating_admission_policy(POLICY).status)
            and st.observed_generation
            and st
        ),
        timeout=20,
    )
    tc = status.type_checking
    warnings = (tc.expression_warnings or []) if tc else []
    assert not warnings, [(w.field_ref, w.warning) for w in warnings]


def tenant(kube: World, ns: str) -> client.ApiClient:
    """A ServiceAccount of namespace `ns` with the built-in `edit` role there: what a team's
    CI or a user with edit rights may do."""
    kube.core.create_namespaced_service_account(ns, {"metadata": {"name": "tenant"}})
    client.RbacAuthorizationV1Api(kube.api_client).create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": "tenant-edit"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "edit",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}],
        },
    )
    api = kube.plane.service_account_client(ns, "tenant", create=False)
    kube.cleanup(api.close)
    return api


def refused(call: Callable[..., object], fragment: str) -> None:
    """`call()` is refused (403) with `fragment` in the message. The API server enforces a new
    policy once its informer has it: first wait until a dry run of the same request is refused
    (admission runs for dry runs; nothing is written)."""

    def dry_run_refused() -> bool:
        try:
            call(dry_run="All")
        except client.ApiException as exc:
            if exc.status == 403:
                return True
            raise
        return False

    wait_for(f"a dry run to be refused: {fragment}", dry_run_refused, timeout=20)
    with pytest.raises(client.ApiException) as err:
        call()
    assert err.value.status == 403, err.value.body
    assert fragment in err.value.body, err.value.body


def annotate(api: client.CoreV1Api, ns: str, name: str, annotations: dict, **kw) -> client.V1Pod:
    return api.patch_namespaced_pod(
        name, ns, {"metadata": {"annotations": annotations}}, _content_type=MERGE, **kw
    )


def claim(obj: client.V1Pod | client.V1Job, *path: str, manager: str = C.FIELD_MANAGER) -> dict:
    """A patch that rewrites the object's managedFields so that `manager` (gpupool's) owns the
    field at `path` (fieldsV1 keys), changing nothing else: what the API server keeps as sent
    when no field's value changes."""
    api = client.ApiClient()
    entries = api.sanitize_for_serialization(obj.metadata.managed_fields)
    fields: dict = {}
    node = fields
    for key in path:
        node = node.setdefault(key, {})
    entries.append(
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": obj.api_version or "v1",
            "fieldsType": "FieldsV1",
            "time": entries[0]["time"],
            "fieldsV1": fields,
        }
    )
    return {"metadata": {"managedFields": entries}}


def job_body(name: str, annotations: dict | None = None, *, suspend: bool = True) -> dict:
    """A Job whose pod asks for a pool with no nodes (suspended: the Job controller creates no
    pod for it)."""
    return {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "suspend": suspend,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {C.POOL_LABEL: NOWHERE},
                    "containers": [{"name": "c", "image": "registry.example/train:1"}],
                }
            },
        },
    }


def annotation(key: str) -> tuple[str, str, str]:
    return ("f:metadata", "f:annotations", f"f:{key}")


# ---------------------------------------------------------------- the policy


def test_only_the_controller_writes_gpupools_pod_state(kube: World):
    ns = kube.new_namespace("forged")
    # a pod whose annotation someone wrote before the policy was installed
    kube.core.create_namespaced_pod(ns, pod("legacy", limits={C.GPU_RESOURCE: "1"}, pool=NOWHERE))
    annotate(kube.core, ns, "legacy", {C.ADMITTED_ANN: "node-x"}, field_manager=OTHER)
    install_policy(kube)
    core = client.CoreV1Api(tenant(kube, ns))
    core.create_namespaced_pod(ns, pod("train", limits={C.GPU_RESOURCE: "1"}, pool=NOWHERE))

    # the tenant writes none of gpupool's keys: not on update ...
    for key in POD_STATE:
        refused(
            lambda key=key, **kw: annotate(core, ns, "train", {key: "node-x"}, **kw),
            f"only the gpupool controller may write {key}",
        )
    # ... nor on create (nor through a Binding, whose annotations the pod gets)
    forged = pod("forged", limits={C.GPU_RESOURCE: "1"}, pool=NOWHERE)
    forged["metadata"]["annotations"] = {C.ADMITTED_ANN: "node-x", C.RESERVED_ANN: "node-x:0"}
    refused(
        lambda **kw: core.create_namespaced_pod(ns, forged, **kw),
        f"may write {C.ADMITTED_ANN}, {C.RESERVED_ANN}",
    )
    binding = {
        "metadata": {"name": "train", "annotations": {C.ADMITTED_ANN: "node-x"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-x"},
    }
    refused(
        lambda **kw: kube.core.create_namespaced_pod_binding("train", ns, binding, **kw),
        f"may write {C.ADMITTED_ANN}",
    )
    # its own annotations are its own
    annotate(core, ns, "train", TENANTS_OWN)

    # the controller writes them, under gpupool's field manager
    ops = KubeOps(kube.controller_client())
    ours = {C.ADMITTED_ANN: "node-x", C.RESERVED_ANN: "node-x:0", C.CHECKPOINT_REQUESTED_ANN: "t"}
    ops.annotate_pod(ns, "train", ours)
    p = kube.core.read_namespaced_pod("train", ns)
    assert {k: p.metadata.annotations[k] for k in ours} == ours
    assert all(gpupool_wrote(p, k) for k in ours)
    # and once there, the tenant can neither change nor remove them, but still its own
    refused(
        lambda **kw: annotate(core, ns, "train", {C.ADMITTED_ANN: None}, **kw),
        f"may write {C.ADMITTED_ANN}",
    )
    annotate(core, ns, "train", {C.LAST_CHECKPOINT_ANN: "2026-12-03T07:00:00Z"})
    assert gpupool_wrote(kube.core.read_namespaced_pod("train", ns), C.ADMITTED_ANN)

    # the record of who wrote an annotation cannot be rewritten to name gpupool: the tenant's
    # own pod's leftover annotation stays another manager's
    legacy = core.read_namespaced_pod("legacy", ns)
    assert not gpupool_wrote(legacy, C.ADMITTED_ANN)
    refused(
        lambda **kw: core.patch_namespaced_pod(
            "legacy", ns, claim(legacy, *annotation(C.ADMITTED_ANN)), _content_type=MERGE, **kw
        ),
        f"may not make gpupool the owner of {C.ADMITTED_ANN}",
    )
    assert not gpupool_wrote(kube.core.read_namespaced_pod("legacy", ns), C.ADMITTED_ANN)


def test_only_the_controller_removes_gpupools_scheduling_gate(kube: World):
    """A tenant cannot take its pod past gpupool's admission: the gate stays until the
    controller removes it (deploy/state-admission.yaml); other gates stay the tenant's."""
    ns = kube.new_namespace("forged")
    install_policy(kube)
    core = client.CoreV1Api(tenant(kube, ns))
    gates = (C.ADMISSION_GATE, "example.com/other")
    core.create_namespaced_pod(
        ns, pod("gated", limits={C.GPU_RESOURCE: "1"}, pool=NOWHERE, gates=gates)
    )

    def ungate(keep: list[str], **kw):
        body = {"spec": {"schedulingGates": [{"name": g} for g in keep]}}
        return core.patch_namespaced_pod("gated", ns, body, _content_type=MERGE, **kw)

    refused(lambda **kw: ungate([], **kw), "may remove the scheduling gate gpupool.io/admission")
    refused(
        lambda **kw: ungate(["example.com/other"], **kw),
        "may remove the scheduling gate gpupool.io/admission",
    )
    ungate([C.ADMISSION_GATE])  # its own gate is its own to remove
    # the controller removes it (as its admission does)
    client.CoreV1Api(kube.controller_client()).patch_namespaced_pod(
        "gated", ns, {"spec": {"schedulingGates": []}}, _content_type=MERGE
    )
    assert not kube.core.read_namespaced_pod("gated", ns).spec.scheduling_gates


def test_only_the_controller_writes_gpupools_job_state(kube: World):
    ns = kube.new_namespace("forged")
    install_policy(kube)
    batch = client.BatchV1Api(tenant(kube, ns))
    for i, key in enumerate(JOB_STATE):
        refused(
            lambda key=key, i=i, **kw: batch.create_namespaced_job(
                ns, job_body(f"forged-{i}", {key: "node-x:0@2026-12-03T06:00:00Z"}), **kw
            ),
            f"only the gpupool controller may write {key}",
        )
    batch.create_namespaced_job(
        ns, job_body("train", {C.CHECKPOINTABLE_ANN: "true"}, suspend=False)
    )
    for key in JOB_STATE:
        refused(
            lambda key=key, **kw: batch.patch_namespaced_job(
                "train", ns, {"metadata": {"annotations": {key: "x"}}}, _content_type=MERGE, **kw
            ),
            f"may write {key}",
        )
    # the controller suspends it (gpupool owns spec.suspend); the tenant may take the Job back
    # (unsuspend it, suspend it itself), but may not make gpupool the owner of spec.suspend again
    ops = KubeOps(kube.controller_client())
    ops.set_job_suspend(ns, "train", suspend=True, annotations={C.SUSPENDED_BY_ANN: "t"})
    j = kube.batch.read_namespaced_job("train", ns)
    assert gpupool_owns(j, "f:spec", "f:suspend") and gpupool_wrote(j, C.SUSPENDED_BY_ANN)
    for value in (False, True):
        batch.patch_namespaced_job("train", ns, {"spec": {"suspend": value}}, _content_type=MERGE)
    j = batch.read_namespaced_job("train", ns)
    assert not gpupool_owns(j, "f:spec", "f:suspend")
    refused(
        lambda **kw: batch.patch_namespaced_job(
            "train", ns, claim(j, "f:spec", "f:suspend"), _content_type=MERGE, **kw
        ),
        "may not make gpupool the owner of spec.suspend",
    )
    assert not gpupool_owns(kube.batch.read_namespaced_job("train", ns), "f:spec", "f:suspend")


def agent_may_patch_pods(kube: World, ns: str) -> None:
    """What an install whose node agents annotate pods grants them (the shipped RBAC does not:
    the agent publishes status.pods instead): `patch` on pods in `ns`."""
    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    rbac.create_namespaced_role(
        ns,
        {
            "metadata": {"name": "agent-annotates"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": "agent-annotates"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "agent-annotates",
            },
            "subjects": [{"kind": "ServiceAccount", "name": AGENT_SA, "namespace": GPUPOOL_NS}],
        },
    )


def test_only_the_node_agent_writes_a_pods_gpus(kube: World):
    """`gpupool.io/gpus` (which cards a pod holds, where the agent publishes no pods): a
    tenant may neither write it on its pods nor make the agent's field manager its owner; the
    node agent's ServiceAccount writes it, under `gpupool-agent`, on pods bound to its own
    node only; what it wrote is believed (reconciler/observe/trust.py)."""
    sim = add_gpu_node(kube, "h100-fs1", count=4)
    ns = kube.new_namespace("forged")
    create_pod(kube, ns, "one", node="h100-fs1", gpus=1, pool=None, cls=None)
    far = pod("far", limits={C.GPU_RESOURCE: "1"}, pool=NOWHERE)
    far["spec"]["nodeName"] = "h100-elsewhere"  # bound to another node (no kubelet runs it)
    kube.core.create_namespaced_pod(ns, far)
    # a value someone wrote before the policy was installed
    annotate(kube.core, ns, "far", {C.GPUS_ANN: "0"}, field_manager=OTHER)
    install_policy(kube)
    agent_may_patch_pods(kube, ns)
    core = client.CoreV1Api(tenant(kube, ns))
    refused(
        lambda **kw: annotate(core, ns, "one", {C.GPUS_ANN: "3"}, **kw),
        f"only the gpupool controller may write {C.GPUS_ANN}",
    )
    forged = pod("forged", limits={C.GPU_RESOURCE: "1"}, pool=NOWHERE)
    forged["metadata"]["annotations"] = {C.GPUS_ANN: "0"}
    refused(
        lambda **kw: core.create_namespaced_pod(ns, forged, **kw),
        f"may write {C.GPUS_ANN}",
    )
    # the agent of h100-fs1 writes it on its node's pod, not on another node's
    agent = client.CoreV1Api(sim.agent_client())
    wait_for(
        "the agent's pod RBAC",
        lambda: annotate(agent, ns, "one", {C.GPUS_ANN: "0"}, field_manager=C.AGENT_FIELD_MANAGER),
        timeout=20,
        ignore=(client.ApiException,),
    )
    p = kube.core.read_namespaced_pod("one", ns)
    assert p.metadata.annotations[C.GPUS_ANN] == "0"
    assert gpus_believed(field_managers(p, *annotation_path(C.GPUS_ANN)))
    refused(
        lambda **kw: annotate(
            agent, ns, "far", {C.GPUS_ANN: "1"}, field_manager=C.AGENT_FIELD_MANAGER, **kw
        ),
        f"may write {C.GPUS_ANN}",
    )
    # once there, the tenant can neither change nor remove it
    refused(
        lambda **kw: annotate(core, ns, "one", {C.GPUS_ANN: None}, **kw),
        f"may write {C.GPUS_ANN}",
    )
    # nor claim the leftover value for the agent's field manager
    far_now = core.read_namespaced_pod("far", ns)
    assert not gpus_believed(field_managers(far_now, *annotation_path(C.GPUS_ANN)))
    refused(
        lambda **kw: core.patch_namespaced_pod(
            "far",
            ns,
            claim(far_now, *annotation(C.GPUS_ANN), manager=C.AGENT_FIELD_MANAGER),
            _content_type=MERGE,
            **kw,
        ),
        f"may not make gpupool the owner of {C.GPUS_ANN}",
    )
    far_now = kube.core.read_namespaced_pod("far", ns)
    assert not gpus_believed(field_managers(far_now, *annotation_path(C.GPUS_ANN)))


# ---------------------------------------------------------------- what observation believes


def unreadable_events(kube: World, ns: str, name: str) -> list:
    return [
        e
        for e in kube.core.list_namespaced_event(ns).items
        if e.reason == "GpuPoolUnreadable" and e.involved_object.name == name
    ]


def test_observe_believes_only_gpupools_own_writes(kube: World, tmp_path):
    """h100-1 and h100-2 are empty. team-b's `squat` (8 cards, a pool with no nodes, so
    unschedulable) carries `admitted: h100-1` written by someone else; `held` carries
    `admitted: h100-2` written by the controller; `ghost` carries an admission gpupool wrote to
    a node that does not exist. A gated 8-card training-high pod is admitted onto h100-1:
    believed, `squat` held all of it and the pod waited ("nothing can be freed")."""
    clock = kube.clock
    base(kube, tmp_path, clock, workloads=False)
    seed_priority_classes(kube)
    ns = gated_namespace(kube)
    ops = KubeOps(kube.controller_client())
    every = ",".join(map(str, range(8)))
    for name in ("squat", "held", "ghost"):
        create_pod(kube, "team-b", name, gpus=8, cls="training-low", pool=NOWHERE)
    annotate(
        kube.core,
        "team-b",
        "squat",
        {C.ADMITTED_ANN: "h100-1", C.INTENDED_GPUS_ANN: every},
        field_manager=OTHER,
    )
    ops.annotate_pod("team-b", "held", {C.ADMITTED_ANN: "h100-2", C.INTENDED_GPUS_ANN: every})
    ops.annotate_pod("team-b", "ghost", {C.ADMITTED_ANN: "h100-9", C.INTENDED_GPUS_ANN: every})
    create_pod(kube, ns, "train", gpus=8, cls="training-high")
    kube.settle()

    observed = observe_cluster(kube.controller_client(), now=clock.now)
    ws = {w.key: w for w in observed.workloads}
    squat, held, ghost = (ws[f"team-b/{n}"] for n in ("squat", "held", "ghost"))
    assert (squat.admission, squat.node, squat.placed) == ("scheduler", None, False)
    assert (ghost.admission, ghost.node, ghost.placed) == ("scheduler", None, False)
    assert (held.admission, held.node, held.placed) == ("admitted", "h100-2", True)
    assert len(held.allocations) == 8
    reports = {u.ref: u.message for u in observed.unreadable}
    assert set(reports) == {"Pod team-b/squat", "Pod team-b/ghost"}, reports
    assert reports["Pod team-b/squat"].startswith("forged-state:")
    assert OTHER in reports["Pod team-b/squat"] and C.ADMITTED_ANN in reports["Pod team-b/squat"]
    assert (
        "h100-9" in reports["Pod team-b/ghost"] and "does not exist" in reports["Pod team-b/ghost"]
    )

    desired = load([SourceFile("desired.yaml", TEXT)])
    p, _ = plan_with_facts(desired, observed, now=clock.now)
    admits = {pa.name: pa.node for a in p.actions if isinstance(a, Admit) for pa in a.pods}
    assert admits == {"train": "h100-1"}, p.findings
    assert {f.subject for f in p.findings if f.code == "unreadable-object"} == set(reports)

    # the controller's cycle, with deploy/state-admission.yaml in force as the kustomization
    # installs it (nothing gpupool, kube-scheduler or the kubelet writes is refused): the
    # admission, and an Event on each pod saying why its state was ignored
    install_policy(kube)
    refused(
        lambda **kw: annotate(kube.core, "team-b", "held", {C.ADMITTED_ANN: "h100-1"}, **kw),
        f"may write {C.ADMITTED_ANN}",
    )
    ctl = controller(kube, tmp_path, clock)
    r = ctl.cycle()
    assert r.error is None, r.error
    [ev] = unreadable_events(kube, "team-b", "squat")
    assert "forged-state" in ev.message and OTHER in ev.message, ev.message
    assert len(unreadable_events(kube, "team-b", "ghost")) == 1
    assert unreadable_events(kube, "team-b", "held") == []
    kube.settle()
    train = kube.core.read_namespaced_pod("train", ns)
    assert (train.spec.node_name, train.status.phase) == ("h100-1", "Running")
    assert train.metadata.annotations[C.ADMITTED_ANN] == "h100-1"
    assert gpupool_wrote(train, C.ADMITTED_ANN) and gpupool_wrote(train, C.INTENDED_GPUS_ANN)
