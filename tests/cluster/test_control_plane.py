"""The real control plane and the simulated kubelets do what the other tests will rely on."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.cluster.kubelets import SUCCEED_AFTER_ANNOTATION, NodeSpec
from tests.support.wait import wait_for

pytestmark = pytest.mark.kube


def new_namespace(core: client.CoreV1Api, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


@pytest.fixture
def admin(control_plane):
    with control_plane.api_client() as api:
        yield api


@pytest.fixture(scope="module")
def nodes(kubelets):
    """Two GPU nodes of different size and one CPU-only node."""
    kubelets.add_node(NodeSpec("gpu-big", gpus=8))
    kubelets.add_node(NodeSpec("gpu-small", gpus=1, gpu_product="NVIDIA A100-SXM4-40GB"))
    kubelets.add_node(NodeSpec("cpu-only"))
    return kubelets


def deployment(name: str, replicas: int, labels: dict, resources: dict | None = None):
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    termination_grace_period_seconds=30,
                    containers=[
                        client.V1Container(
                            name="main",
                            image="registry.example/worker:1",
                            resources=client.V1ResourceRequirements(
                                requests=resources, limits=resources
                            ),
                        )
                    ],
                ),
            ),
        ),
    )


def running_pods(core, ns, selector):
    pods = core.list_namespaced_pod(ns, label_selector=selector).items
    return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]


def test_control_plane_is_real(control_plane, admin):
    info = client.VersionApi(admin).get_code()
    assert info.git_version == "v1.37.2"
    groups = {g.name: g for g in client.ApisApi(admin).get_api_versions().groups}
    assert "admissionregistration.k8s.io" in groups
    resources = {
        r.name for r in client.AdmissionregistrationV1Api(admin).get_api_resources().resources
    }
    # Both admission-policy kinds are GA and served in v1 with the default flags.
    assert {"validatingadmissionpolicies", "mutatingadmissionpolicies"} <= resources
    # The controller-manager made the default ServiceAccount; the node authorizer and RBAC are on.
    core = client.CoreV1Api(admin)
    assert core.read_namespaced_service_account("default", "default").metadata.name == "default"


def test_rbac_denies_then_allows(control_plane, admin):
    core = client.CoreV1Api(admin)
    ns = new_namespace(core, "rbac")
    user = f"system:serviceaccount:{ns}:reader"
    with control_plane.service_account_client(ns, "reader") as sa:
        sa_core = client.CoreV1Api(sa)
        with pytest.raises(ApiException) as denied:
            sa_core.list_namespaced_pod(ns)
        assert denied.value.status == 403

        rbac = client.RbacAuthorizationV1Api(admin)
        rbac.create_namespaced_role(
            ns,
            client.V1Role(
                metadata=client.V1ObjectMeta(name="pod-reader"),
                rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["list"])],
            ),
        )
        rbac.create_namespaced_role_binding(
            ns,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name="reader"),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"
                ),
                subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=ns)],
            ),
        )

        def allowed():
            try:
                return sa_core.list_namespaced_pod(ns) is not None
            except ApiException as e:
                if e.status != 403:
                    raise
                return False

        wait_for("the RoleBinding to take effect", allowed, timeout=10)
        # Still only what was granted: another namespace stays forbidden.
        with pytest.raises(ApiException) as elsewhere:
            sa_core.list_namespaced_pod("default")
        assert elsewhere.value.status == 403

    # The audit log proves which request was refused and which allowed, and as whom.
    ev = control_plane.wait_audit_event(
        user=user, verb="list", resource="pods", namespace=ns, code=403
    )
    assert ev.subresource is None
    control_plane.wait_audit_event(user=user, verb="list", resource="pods", namespace=ns, code=200)


def test_gpu_pods_are_scheduled_onto_a_node_with_enough_gpus(control_plane, admin, nodes):
    core, apps = client.CoreV1Api(admin), client.AppsV1Api(admin)
    node = core.read_node("gpu-big")
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node.metadata.labels["nvidia.com/gpu.count"] == "8"
    assert core.read_node("gpu-small").metadata.labels["nvidia.com/gpu.product"] == (
        "NVIDIA-A100-SXM4-40GB"
    )

    ns = new_namespace(core, "sched")
    labels = {"app": "trainer"}
    apps.create_namespaced_deployment(
        ns, deployment("trainer", 2, labels, {"nvidia.com/gpu": "2", "cpu": "1"})
    )
    pods = wait_for(
        "2 Running trainer pods",
        lambda: (
            len(running_pods(core, ns, "app=trainer")) == 2
            and running_pods(core, ns, "app=trainer")
        ),
    )
    for p in pods:
        # gpu-small has 1 GPU, cpu-only none: only gpu-big fits 2 GPUs.
        assert p.spec.node_name == "gpu-big"
        assert p.status.pod_ip and p.status.pod_ip.startswith("10.244.")
        assert {c.type: c.status for c in p.status.conditions}["Ready"] == "True"
        assert p.status.container_statuses[0].state.running is not None
    wait_for(
        "the Deployment to report 2 available",
        lambda: (
            (apps.read_namespaced_deployment_status("trainer", ns).status.available_replicas or 0)
            == 2
        ),
    )

    # A pod that needs more GPUs than any node has stays Pending, refused by the scheduler.
    core.create_namespaced_pod(
        ns,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="too-big"),
            spec=client.V1PodSpec(
                containers=[
                    client.V1Container(
                        name="main",
                        image="registry.example/worker:1",
                        resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "16"}),
                    )
                ]
            ),
        ),
    )

    def unschedulable():
        p = core.read_namespaced_pod("too-big", ns)
        conds = {c.type: c for c in p.status.conditions or []}
        c = conds.get("PodScheduled")
        return c is not None and c.status == "False" and c.reason == "Unschedulable" and c

    cond = wait_for("the scheduler to refuse too-big", unschedulable)
    assert "nvidia.com/gpu" in cond.message
    assert core.read_namespaced_pod("too-big", ns).spec.node_name is None


def test_pdb_refuses_eviction_then_allows_it(control_plane, admin, nodes):
    core, apps = client.CoreV1Api(admin), client.AppsV1Api(admin)
    policy = client.PolicyV1Api(admin)
    ns = new_namespace(core, "pdb")
    labels = {"app": "web"}
    apps.create_namespaced_deployment(ns, deployment("web", 2, labels, {"cpu": "100m"}))
    policy.create_namespaced_pod_disruption_budget(
        ns,
        client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1PodDisruptionBudgetSpec(
                min_available=2, selector=client.V1LabelSelector(match_labels=labels)
            ),
        ),
    )
    wait_for("2 Running web pods", lambda: len(running_pods(core, ns, "app=web")) == 2)

    def pdb_status(allowed):
        s = policy.read_namespaced_pod_disruption_budget_status("web", ns).status
        return s is not None and s.current_healthy == 2 and s.disruptions_allowed == allowed

    wait_for("the disruption controller to count 2 healthy", lambda: pdb_status(0))
    victim = running_pods(core, ns, "app=web")[0].metadata.name

    def evict():
        core.create_namespaced_pod_eviction(
            victim,
            ns,
            client.V1Eviction(metadata=client.V1ObjectMeta(name=victim, namespace=ns)),
        )

    with pytest.raises(ApiException) as refused:
        evict()
    assert refused.value.status == 429
    assert "disruption budget" in refused.value.body

    policy.patch_namespaced_pod_disruption_budget("web", ns, {"spec": {"minAvailable": 1}})
    wait_for("the PDB to allow one disruption", lambda: pdb_status(1))
    evict()

    # The simulated kubelet finishes the graceful deletion; the ReplicaSet replaces the pod.
    def gone():
        try:
            core.read_namespaced_pod(victim, ns)
            return False
        except ApiException as e:
            return e.status == 404

    wait_for("the evicted pod to be deleted by its kubelet", gone, timeout=20)
    wait_for("a replacement pod", lambda: len(running_pods(core, ns, "app=web")) == 2)


def test_not_ready_node_is_tainted(control_plane, admin, kubelets):
    core = client.CoreV1Api(admin)
    kubelets.add_node(NodeSpec("flaky", gpus=2))
    kubelets.set_not_ready("flaky")

    def tainted():
        taints = core.read_node("flaky").spec.taints or []
        return any(
            t.key == "node.kubernetes.io/not-ready" and t.effect == "NoExecute" for t in taints
        )

    wait_for("the node-lifecycle controller to taint flaky NoExecute", tainted, timeout=20)
    kubelets.set_resources("flaky", {"nvidia.com/gpu": "1"})
    node = core.read_node("flaky")
    assert node.status.allocatable["nvidia.com/gpu"] == "1"
    kubelets.set_ready("flaky")
    kubelets.wait_schedulable("flaky")


def test_audit_log_records_requests(control_plane, admin):
    core = client.CoreV1Api(admin)
    name = f"audit-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"a": "b"})
    )
    ev = control_plane.wait_audit_event(
        verb="create", resource="configmaps", namespace="default", name=name
    )
    assert ev.user == "kubernetes-admin"
    assert "system:masters" in ev.groups
    assert ev.code == 201


def test_apiserver_restart_keeps_objects(control_plane, admin, nodes):
    core = client.CoreV1Api(admin)
    ns = new_namespace(core, "restart")
    core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="kept"), data={"k": "v"})
    )
    control_plane.restart_apiserver()
    with control_plane.api_client() as fresh:
        fresh_core = client.CoreV1Api(fresh)
        assert fresh_core.read_namespaced_config_map("kept", ns).data == {"k": "v"}
        # The scheduler, controller-manager and kubelets reconnected: a new pod still runs.
        fresh_core.create_namespaced_pod(
            ns,
            client.V1Pod(
                metadata=client.V1ObjectMeta(name="after-restart"),
                spec=client.V1PodSpec(
                    containers=[client.V1Container(name="main", image="registry.example/w:1")]
                ),
            ),
        )
        wait_for(
            "the pod created after the restart to run",
            lambda: fresh_core.read_namespaced_pod("after-restart", ns).status.phase == "Running",
            timeout=30,
        )
    assert nodes.errors == []


def test_gpu_node_shapes(control_plane, admin, kubelets):
    core = client.CoreV1Api(admin)
    kubelets.add_node(NodeSpec("ts-node", gpus=4, shared_replicas=4), wait=False)
    kubelets.add_node(
        NodeSpec("mig-node", gpus=1, gpu_product="NVIDIA A100-SXM4-80GB", mig={"1g.10gb": 7}),
        wait=False,
    )
    ts = core.read_node("ts-node")
    assert ts.status.allocatable["nvidia.com/gpu.shared"] == "16"
    assert "nvidia.com/gpu" not in ts.status.allocatable
    assert ts.metadata.labels["nvidia.com/gpu.replicas"] == "4"
    assert ts.metadata.labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    mig = core.read_node("mig-node")
    assert mig.status.allocatable["nvidia.com/mig-1g.10gb"] == "7"
    assert mig.metadata.labels["nvidia.com/mig.strategy"] == "mixed"
    assert mig.metadata.labels["nvidia.com/mig.capable"] == "true"
    assert mig.metadata.labels["nvidia.com/mig-1g.10gb.count"] == "7"
    assert mig.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    kubelets.set_resources("ts-node", {"nvidia.com/gpu.shared": None, "nvidia.com/gpu": "4"})
    ts = core.read_node("ts-node")
    assert "nvidia.com/gpu.shared" not in ts.status.allocatable
    assert "nvidia.com/gpu.shared" not in ts.status.capacity
    assert ts.status.allocatable["nvidia.com/gpu"] == "4"


def test_job_pods_complete(control_plane, admin, nodes):
    core, batch = client.CoreV1Api(admin), client.BatchV1Api(admin)
    ns = new_namespace(core, "job")
    batch.create_namespaced_job(
        ns,
        client.V1Job(
            metadata=client.V1ObjectMeta(name="once"),
            spec=client.V1JobSpec(
                completions=2,
                parallelism=2,
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(
                        annotations={SUCCEED_AFTER_ANNOTATION: "10"}  # scaled by grace_scale
                    ),
                    spec=client.V1PodSpec(
                        restart_policy="Never",
                        containers=[
                            client.V1Container(
                                name="main",
                                image="registry.example/job:1",
                                resources=client.V1ResourceRequirements(
                                    limits={"nvidia.com/gpu": "1"}
                                ),
                            )
                        ],
                    ),
                ),
            ),
        ),
    )

    def complete():
        st = batch.read_namespaced_job_status("once", ns).status
        return st.succeeded == 2 and any(
            c.type == "Complete" and c.status == "True" for c in st.conditions or []
        )

    wait_for("the Job to complete", complete, timeout=30)


def test_admission_policies_are_enforced(control_plane, admin):
    """ValidatingAdmissionPolicy and MutatingAdmissionPolicy (both GA) work with the default
    flags: a CEL policy refuses a ConfigMap, another one labels ConfigMaps on create."""
    core, adm = client.CoreV1Api(admin), client.AdmissionregistrationV1Api(admin)
    ns = new_namespace(core, "adm")
    ns_selector = {"matchLabels": {"kubernetes.io/metadata.name": ns}}
    rules = {
        "resourceRules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["configmaps"],
            }
        ]
    }
    adm.create_validating_admission_policy(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": f"{ns}-no-forbidden"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": rules,
                "validations": [
                    {
                        "expression": "!has(object.data) || !('forbidden' in object.data)",
                        "message": "no key named forbidden",
                    }
                ],
            },
        }
    )
    adm.create_validating_admission_policy_binding(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": f"{ns}-no-forbidden"},
            "spec": {
                "policyName": f"{ns}-no-forbidden",
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": ns_selector},
            },
        }
    )
    adm.create_mutating_admission_policy(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": f"{ns}-stamp"},
            "spec": {
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "matchConstraints": rules,
                "mutations": [
                    {
                        "patchType": "ApplyConfiguration",
                        "applyConfiguration": {
                            "expression": (
                                "Object{metadata: Object.metadata{labels: {'stamped': 'yes'}}}"
                            )
                        },
                    }
                ],
            },
        }
    )
    adm.create_mutating_admission_policy_binding(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": f"{ns}-stamp"},
            "spec": {
                "policyName": f"{ns}-stamp",
                "matchResources": {"namespaceSelector": ns_selector},
            },
        }
    )

    def refused():
        try:
            core.create_namespaced_config_map(
                ns, {"metadata": {"generateName": "bad-"}, "data": {"forbidden": "1"}}
            )
            return False
        except ApiException as e:
            return e.status == 422 and "no key named forbidden" in e.body

    wait_for("the ValidatingAdmissionPolicy to refuse", refused, timeout=15)

    def stamped():
        cm = core.create_namespaced_config_map(ns, {"metadata": {"generateName": "ok-"}})
        return (cm.metadata.labels or {}).get("stamped") == "yes"

    wait_for("the MutatingAdmissionPolicy to label", stamped, timeout=15)


def test_pod_ranges_are_distinct_past_256_nodes():
    """The bench registers hundreds of simulated nodes; each gets its own /24."""
    from tests.cluster.kubelets import pod_cidr

    cidrs = [pod_cidr(i) for i in range(1024)]
    assert len(set(cidrs)) == 1024
    assert pod_cidr(0) == "10.244.0.0/24" and pod_cidr(256) == "10.245.0.0/24"
    with pytest.raises(ValueError):
        pod_cidr(1024)
