"""The world the controller's integration tests run in: a real control plane (tests/cluster:
kube-apiserver, kube-scheduler, kube-controller-manager v1.37.2, RBAC and admission on), gpupool
installed from deploy/ (CRDs, namespace, RBAC, the agent's and the controller's admission
policies, the admission gate), simulated kubelets,
and per GPU node the NVIDIA stand-ins of tests/nvidia (its GPUs, mig-manager, device plugin).

The controller under test runs as the `gpupool-controller` ServiceAccount with exactly the rules
of deploy/rbac.yaml (a token from the TokenRequest API), so a missing rule is a 403 from the real
authorizer in every test, and a write beyond what deploy/controller-admission.yaml lets it make
(another manager's PriorityClass, a node's foreign labels, a system namespace) is a 403 from
the real admission chain; the node agent publishes as `gpupool-agent` with a token bound to a pod
on its node, which the ValidatingAdmissionPolicy of deploy/agent-admission.yaml checks.

One control plane serves the whole session; each test gets a fresh `World` and leaves nothing
behind (its nodes, namespaces, PriorityClasses, node states, the controller's Lease, status and
the GPU operator's ConfigMaps are deleted at teardown).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from reconciler.conventions import (
    GROUP,
    NODE_STATE_PLURAL,
    POOL_LABEL,
    PRODUCT_LABEL,
    VERSION,
)
from reconciler.loop.agent import run_once
from reconciler.policy.catalog import default_catalog
from tests.cluster.kubelets import NodeSpec
from tests.nvidia.device_plugin import DevicePlugin
from tests.nvidia.gpunode import SimulatedGpuNode
from tests.nvidia.mig_manager import MigManager
from tests.nvidia.mounted import MountedConfigMap
from tests.nvidia.podresources_server import PodResourcesServer, gpu_resource

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NS, OPERATOR_NS = "gpupool-system", "gpu-operator"
CONTROLLER_SA, AGENT_SA = "gpupool-controller", "gpupool-agent"
MIG_CM, SHARING_CM = "gpupool-mig-parted-config", "gpupool-device-plugin-config"
MERGE = "application/merge-patch+json"

# What the GPU operator install leaves in its namespace before gpupool writes anything:
# mig-manager's ConfigMap with `all-disabled` (it cannot start without it) and the device
# plugin's configs with the default one (../shared/notes/nvidia-stack.md).
MIG_DEFAULTS = {
    "config.yaml": (
        "version: v1\nmig-configs:\n  all-disabled:\n  - devices: all\n    mig-enabled: false\n"
    )
}
SHARING_DEFAULTS = {"default": "version: v1\nflags:\n  migStrategy: mixed\n"}


@dataclass
class Clock:
    """An injected clock: tests pass grace periods and timeouts without sleeping."""

    now: datetime = field(default_factory=lambda: datetime.now(UTC).replace(microsecond=0))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def create_or_keep(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except client.ApiException as exc:
        if exc.status != 409:
            raise


def install(api_client) -> None:
    """gpupool as deploy/ installs it, plus the GPU operator's namespace (once a session)."""
    ext = client.ApiextensionsV1Api(api_client)
    for crd in docs(DEPLOY / "crds.yaml"):
        create_or_keep(lambda crd=crd: ext.create_custom_resource_definition(crd))
    for crd in docs(DEPLOY / "crds.yaml"):
        deadline = time.monotonic() + 30
        while not any(
            c.type == "Established" and c.status == "True"
            for c in ext.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions
            or []
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {crd['metadata']['name']} not established")
            time.sleep(0.1)
    core = client.CoreV1Api(api_client)
    for ns in (NS, OPERATOR_NS):
        create_or_keep(lambda ns=ns: core.create_namespace({"metadata": {"name": ns}}))
    for path in (
        "rbac.yaml",
        "agent-admission.yaml",
        "controller-admission.yaml",
        "admission-gate.yaml",
    ):
        for d in docs(DEPLOY / path):
            _create(api_client, d)


def _create(api_client, d: dict) -> None:
    from kubernetes import utils

    with contextlib.suppress(utils.FailToCreateError):
        utils.create_from_dict(api_client, d)


class GpuNodeSim:
    """One GPU node: its GPUs (fake NVML), the kubelet's device manager, mig-manager, the
    device plugin and gpupool's node agent, all driven by `step()`."""

    def __init__(self, world: World, name: str, gpus: SimulatedGpuNode):
        self.world, self.name, self.gpus = world, name, gpus
        api = world.api_client
        self.mig_manager = MigManager(
            api,
            gpus,
            MountedConfigMap(api, OPERATOR_NS, MIG_CM, world.clock),
            publish=self.restart_gpu_clients,
        )
        self.device_plugin = DevicePlugin(
            api,
            gpus,
            MountedConfigMap(api, OPERATOR_NS, SHARING_CM, world.clock),
            set_resources=self.advertise,
        )
        self._agent: client.ApiClient | None = None
        self._kubelet: PodResourcesServer | None = None
        self.agent_running = False

    def advertise(self, resources: dict[str, str]) -> None:
        """The kubelet posts what the device plugin advertises; GPU resources it no longer
        advertises are removed from the Node."""
        node = self.world.core.read_node(self.name)
        gone = {
            k: None
            for k in (node.status.allocatable or {})
            if k.startswith("nvidia.com/") and k not in resources
        }
        self.world.kubelets.set_resources(self.name, {**gone, **resources})

    def restart_gpu_clients(self) -> None:
        """mig-manager restarts the device plugin and the other GPU clients after a change."""
        if self.device_plugin.applied is not None:
            self.device_plugin.restart()  # advertises what it now does
        else:
            self.advertise(self.gpus.advertised())
        self.publish()

    def agent_client(self) -> client.ApiClient:
        if self._agent is None:
            self._agent = self.world.agent_client(self.name)
        return self._agent

    def pod_resources_socket(self) -> str:
        """The kubelet's PodResources socket on this node: a gRPC server speaking the real
        `v1.PodResourcesLister` List (tests/nvidia/podresources_server.py) that answers from the
        device manager (gpunode.pod_resources), started on first use, stopped at teardown."""
        if self._kubelet is None:
            self._kubelet = PodResourcesServer(self.gpus.pod_resources, self._resource_of)
            if not self.world.transient_pod_resources:  # else publish() stops it
                self.world.cleanup(self._kubelet.stop)
        return self._kubelet.socket

    def _resource_of(self, dev_id: str) -> str:
        inv = self.gpus.inventory()
        return next((r for r, ids in inv.items() if dev_id in ids), gpu_resource(dev_id))

    def publish(self) -> None:
        """gpupool's real node agent over this node's NVML and its kubelet's PodResources
        socket, as `gpupool-agent`: it publishes the GPUs and which pod holds which of them."""
        self.agent_running = True
        try:
            run_once(
                self.agent_client(),
                self.name,
                nvml=self.gpus.nvml,
                pod_resources_socket=self.pod_resources_socket(),
            )
        finally:
            if self.world.transient_pod_resources:
                self.close_pod_resources()

    def close_pod_resources(self) -> None:
        """Stop this node's PodResources server (the next use starts another)."""
        server, self._kubelet = self._kubelet, None
        if server is not None:
            server.stop()

    def annotate_pods(self) -> None:
        """After the kubelet admitted or removed pods: the node agent, where this node runs
        one, publishes who holds which card (status.pods: what the controller reads)."""
        if self.agent_running:
            self.publish()

    def observe(self) -> None:
        """The kubelet keeps syncing the mounted ConfigMaps whether or not the components
        look: record what the API server holds now (at the test clock's time)."""
        self.mig_manager.mounted.view()
        self.device_plugin.mounted.view()

    def step(self) -> None:
        self.device_plugin.step()
        self.mig_manager.step()
        self.annotate_pods()


@dataclass
class World:
    plane: Any  # tests.cluster.controlplane.ControlPlane
    kubelets: Any  # tests.cluster.kubelets.SimulatedKubelets
    api_client: client.ApiClient
    clock: Clock = field(default_factory=Clock)
    namespace: str = NS
    operator_namespace: str = OPERATOR_NS
    nodes: dict[str, GpuNodeSim] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    _cleanups: list[Callable[[], object]] = field(default_factory=list)
    transient_pod_resources = False
    """True: a node's PodResources server runs only while its agent publishes. A gRPC server's
    threads wake five times a second each (to look for signals): a thousand idle ones, one a
    node, made thousands of threads and a load average over 100 on 2 cores (the benchmarks'
    worlds, bench/cluster_setup.py, set it)."""

    # -- API objects ---------------------------------------------------------------------
    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api_client)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api_client)

    @property
    def policy(self) -> client.PolicyV1Api:
        return client.PolicyV1Api(self.api_client)

    @property
    def scheduling(self) -> client.SchedulingV1Api:
        return client.SchedulingV1Api(self.api_client)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    @property
    def coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self.api_client)

    def cleanup(self, fn: Callable[[], object]) -> None:
        self._cleanups.append(fn)

    # -- identities ------------------------------------------------------------------------
    def controller_client(self) -> client.ApiClient:
        """The controller's ServiceAccount: exactly deploy/rbac.yaml's rules."""
        return self.plane.service_account_client(NS, CONTROLLER_SA, create=False)

    def agent_client(self, node: str) -> client.ApiClient:
        """The agent's ServiceAccount with a token bound to a pod on `node` (as a DaemonSet
        pod's projected token is), so the token carries the node's name."""
        pod = f"gpupool-agent-{node}"
        create_or_keep(
            lambda: self.core.create_namespaced_pod(
                NS,
                {
                    "metadata": {"name": pod, "labels": {"app.kubernetes.io/component": "agent"}},
                    "spec": {
                        "nodeName": node,
                        "serviceAccountName": AGENT_SA,
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "agent", "image": "registry.example/gpupool:test"}],
                    },
                },
            )
        )
        uid = self.core.read_namespaced_pod(pod, NS).metadata.uid
        tr = self.core.create_namespaced_service_account_token(
            AGENT_SA,
            NS,
            {
                "spec": {
                    "audiences": [],
                    "expirationSeconds": 3600,
                    "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid},
                }
            },
        )
        return self.plane.token_client(tr.status.token)

    # -- nodes ---------------------------------------------------------------------------
    def add_gpu_node(
        self,
        name: str,
        *,
        pool: str,
        model: str,
        count: int = 8,
        mig: dict[int, list[str]] | None = None,
        labels: dict | None = None,
        publish: bool = True,
    ) -> GpuNodeSim:
        cat = default_catalog()
        placed = {i: cat.place(cat.model(model), list(p)) or [] for i, p in (mig or {}).items()}
        gpus = SimulatedGpuNode(name, model, count, mig=placed)
        product = cat.model(model).product_labels[0]
        self.kubelets.add_node(
            NodeSpec(
                name=name,
                gpus=count,
                gpu_product=product,
                labels={POOL_LABEL: pool, PRODUCT_LABEL: product, **(labels or {})},
            )
        )
        self.kubelets.device_managers[name] = gpus
        sim = GpuNodeSim(self, name, gpus)
        self.nodes[name] = sim
        sim.advertise(gpus.advertised())
        if publish:
            sim.publish()
        return sim

    # -- namespaces and pods -------------------------------------------------------------
    def new_namespace(self, prefix: str = "test") -> str:
        """A fresh namespace for this test's workloads (deleted at teardown)."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.ensure_namespace(name)
        return name

    def ensure_namespace(self, name: str, wait: float = 120.0) -> None:
        """Create `name`, first waiting out an earlier test's deletion of it (a namespace being
        terminated refuses new objects with 403 NamespaceTerminating)."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                ns = self.core.read_namespace(name)
            except client.ApiException as e:
                if e.status != 404:
                    raise
                break
            if (ns.status.phase if ns.status else "") != "Terminating":
                break
            time.sleep(0.5)
        create_or_keep(lambda: self.core.create_namespace({"metadata": {"name": name}}))
        if name not in self.namespaces:
            self.namespaces.append(name)

    def settle(self, timeout: float = 30.0) -> None:  # 10 s was too short on 2 busy cores
        """Let the scheduler and the kubelets catch up: every pod bound to a node has been
        admitted (Running/Failed), every unbound pod has been looked at by the scheduler, no pod
        is waiting out its deletion; then the node stand-ins publish who holds which device."""
        deadline = time.monotonic() + timeout
        while True:
            busy = []
            for ns in self.namespaces:
                for p in self.core.list_namespaced_pod(ns).items:
                    conds = {c.type for c in p.status.conditions or []}
                    if (
                        p.metadata.deletion_timestamp
                        or (p.spec.node_name and p.status.phase == "Pending")
                        or (not p.spec.node_name and "PodScheduled" not in conds)
                    ):
                        busy.append(f"{ns}/{p.metadata.name}")
            if not busy:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"pods did not settle: {busy}")
            time.sleep(0.1)
        for sim in self.nodes.values():
            sim.annotate_pods()
            sim.observe()

    def step_nodes(self) -> None:
        for sim in self.nodes.values():
            sim.step()

    # -- teardown ------------------------------------------------------------------------
    def teardown(self) -> None:
        for fn in reversed(self._cleanups):
            with contextlib.suppress(Exception):
                fn()
        core = self.core
        for ns in self.namespaces:
            # controllers first (orphaning their pods), or a ReplicaSet brings its pods back
            # after the kubelets are gone and the namespace waits for the pod GC (about 50 s)
            with contextlib.suppress(client.ApiException):
                self.apps.delete_collection_namespaced_deployment(ns, propagation_policy="Orphan")
                self.apps.delete_collection_namespaced_replica_set(ns, propagation_policy="Orphan")
            with contextlib.suppress(client.ApiException):
                self.batch.delete_collection_namespaced_job(ns, propagation_policy="Orphan")
            with contextlib.suppress(client.ApiException):
                core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
                core.delete_namespace(ns)
        with contextlib.suppress(client.ApiException):
            core.delete_collection_namespaced_pod(NS, grace_period_seconds=0)
        for name in list(self.nodes):
            self.kubelets.remove_node(name)
            with contextlib.suppress(client.ApiException):
                self.custom.delete_cluster_custom_object(GROUP, VERSION, NODE_STATE_PLURAL, name)
        for pc in self.scheduling.list_priority_class().items:
            if not pc.metadata.name.startswith("system-"):
                with contextlib.suppress(client.ApiException):
                    self.scheduling.delete_priority_class(pc.metadata.name)
        with contextlib.suppress(client.ApiException):
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, NS, "reconcilerstatuses", "gpupool"
            )
        with contextlib.suppress(client.ApiException):
            self.coordination.delete_namespaced_lease("gpupool-controller", NS)
        for cm in (MIG_CM, SHARING_CM):
            with contextlib.suppress(client.ApiException):
                core.delete_namespaced_config_map(cm, OPERATOR_NS)
        for ns in (NS, "default"):  # node Events live in default
            with contextlib.suppress(client.ApiException):
                core.delete_collection_namespaced_event(ns)
        deadline = time.monotonic() + 60
        for ns in self.namespaces:
            while time.monotonic() < deadline:
                try:
                    core.read_namespace(ns)
                except client.ApiException as exc:
                    if exc.status == 404:
                        break
                time.sleep(0.2)


@pytest.fixture(scope="session")
def installed(control_plane):
    with control_plane.api_client() as api:
        install(api)
    return control_plane


@pytest.fixture
def kube(installed, kubelets) -> Iterator[World]:
    api = installed.api_client()
    world = World(installed, kubelets, api)
    core = world.core
    for cm, data in ((MIG_CM, MIG_DEFAULTS), (SHARING_CM, SHARING_DEFAULTS)):
        create_or_keep(
            lambda cm=cm, data=data: core.create_namespaced_config_map(
                OPERATOR_NS, {"metadata": {"name": cm}, "data": data}
            )
        )
    try:
        yield world
    finally:
        world.teardown()
        api.close()
