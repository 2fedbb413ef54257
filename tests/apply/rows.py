"""The handler tables: for each action handler, rows of a starting state, an action and what
must come of it (status, message, writes, the state after); `TABLES` by handler, `ROWS` by id.
The rows' shape and how one runs are table.py's.

test_handlers.py runs every row against the in-memory cluster, test_handlers_api.py the rows
named in its `API_ROWS` against an API server, and test_executor.py builds its plans from the
actions and seeds here.
"""

from __future__ import annotations

import json
from datetime import timedelta

from reconciler import conventions as C
from reconciler.apply.configs import (
    ALL_DISABLED,
    SHARING_FLAGS,
    attempt_name,
    config_name,
    render_mig_parted,
    render_sharing,
    yaml_load,
    yaml_text,
)
from reconciler.apply.handlers import STALE_CHECKPOINT_SECONDS, parse_time
from reconciler.apply.port import ApiError, PodCondition
from reconciler.plan.actions import (
    Admit,
    ApplyDraObject,
    ApplyKueueObject,
    ApplyPriorityClass,
    ApplyQuota,
    CardChange,
    CardLayout,
    CardSlices,
    Checkpoint,
    Cordon,
    Hold,
    LabelNode,
    MigReconfigure,
    Move,
    PartitionChange,
    PodAdmission,
    Preempt,
    PruneKueueObject,
    PrunePriorityClass,
    PruneQuota,
    Reclaim,
    Resume,
    Scale,
    SetScaleEnvelope,
    SetSharing,
    TaintDevice,
    Uncordon,
)
from tests.apply.rows_dra import DRA_ROWS
from tests.apply.rows_dra_own import DRA_OWN_ROWS
from tests.apply.table import (
    NODE,
    NOW,
    NS,
    AutoscalerSeed,
    ConfigMap,
    Job,
    Kueue,
    Node,
    NodeState,
    Owner,
    Pod,
    PriorityClass,
    Probe,
    Quota,
    ReplicaSet,
    Row,
    Workload,
    ago,
    gpu_status,
    memory_config,
)
from tests.nvidia.device_plugin import parse_sharing

# ---------------------------------------------------------------------- actions
CORDON = Cordon(
    id=f"cordon:{NODE}", target=NODE, reason="stop new pods while gpu0 is repartitioned"
)
UNCORDON = Uncordon(
    id=f"uncordon:{NODE}",
    target=NODE,
    reason="repartitioned",
    depends_on=(f"mig-reconfigure:{NODE}",),
)
LABEL = LabelNode(
    id=f"label-node:{NODE}", target=NODE, reason="matches Pool/a100", labels={C.POOL_LABEL: "a100"}
)
UNLABEL = LabelNode(
    id=f"label-node:{NODE}", target=NODE, reason="in no pool", labels={C.POOL_LABEL: None}
)
MIG = MigReconfigure(
    id=f"mig-reconfigure:{NODE}",
    target=NODE,
    reason="gpu0: whole -> 2x 3g.40gb",
    depends_on=(CORDON.id,),
    cards=(CardChange(gpu=0, before="whole", after="3g.40gb x2"),),
    layout=(CardLayout(gpu=0, profiles=("3g.40gb", "3g.40gb")), CardLayout(gpu=1, profiles=None)),
)
MIG_NAME = config_name(render_mig_parted(MIG))
MIG_ENTRY = render_mig_parted(MIG)["mig-configs"]["gpupool"]
MIG_LAYOUT = MigReconfigure(
    id=f"mig-reconfigure:{NODE}",
    target=NODE,
    reason="gpu0: 7x 1g.10gb -> 2x 3g.40gb",
    depends_on=(CORDON.id,),
    cards=(CardChange(gpu=0, before="MIG[1g.10gb x7]", after="MIG[3g.40gb, 3g.40gb]"),),
    layout=(CardLayout(gpu=0, profiles=("3g.40gb", "3g.40gb")), CardLayout(gpu=1, profiles=None)),
)
"""A layout change within MIG mode: only its own card must be idle, on any model."""
MIG_BESIDE_MIG = MigReconfigure(
    id=f"mig-reconfigure:{NODE}",
    target=NODE,
    reason="gpu0: whole -> 2x 3g.40gb",
    depends_on=(CORDON.id,),
    cards=(CardChange(gpu=0, before="whole", after="MIG[3g.40gb, 3g.40gb]"),),
    layout=(
        CardLayout(gpu=0, profiles=("3g.40gb", "3g.40gb")),
        CardLayout(gpu=1, profiles=("7g.80gb",)),
    ),
)
"""A mode change on a node with another card in MIG mode: on Hopper first a config of the
changed card only (mig-parted clears every listed MIG card on a mode change), then the node's."""
PART_NAME = config_name(render_mig_parted(MIG_BESIDE_MIG, {0}))
FULL_NAME = config_name(render_mig_parted(MIG_BESIDE_MIG))
RETRIES = 2  # ApplyConfig.mig_retries
H100_LABELS = {C.PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"}
A100_LABELS = {C.PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}


def family(name: str) -> list[str]:
    """A config's label values: the first attempt's and its retries' (declared together)."""
    return [attempt_name(name, k) for k in range(RETRIES + 1)]


SHARING = SetSharing(
    id=f"set-sharing:{NODE}",
    target=NODE,
    reason="gpu1: whole -> 4 slices (every card of the node not in MIG mode)",
    depends_on=(CORDON.id,),
    cards=(CardChange(gpu=1, before="whole", after="shared x4"),),
    shared_slices=(CardSlices(gpu=1, slices=4),),
    slices=4,
    plain_cards=1,
)
"""gpu0 is in MIG mode (its instances are separate resources), gpu1 is the node's only plain
card: the plugin advertises 4 `nvidia.com/gpu.shared` and no `nvidia.com/gpu`."""
SHARING_NAME = config_name(render_sharing(SHARING))
UNSHARE = SHARING.model_copy(
    update={
        "reason": "gpu1: 4 slices -> whole",
        "cards": (CardChange(gpu=1, before="shared x4", after="whole"),),
        "shared_slices": (),
        "slices": None,
    }
)
MPS = SHARING.model_copy(
    update={
        "reason": "gpu0, gpu1: whole -> 4 MPS clients",
        "cards": (
            CardChange(gpu=0, before="whole", after="mps x4"),
            CardChange(gpu=1, before="whole", after="mps x4"),
        ),
        "shared_slices": (),
        "strategy": "mps",
        "plain_cards": 2,
    }
)
MPS_NAME = config_name(render_sharing(MPS))
GRACE = 300
CHECKPOINT = Checkpoint(
    id=f"checkpoint:{NS}/job",
    target=f"{NS}/job",
    reason="before preemption",
    grace_period_seconds=GRACE,
    checkpointable=True,
)
PREEMPT = Preempt(
    id=f"preempt:{NS}/job",
    target=f"{NS}/job",
    reason="make room for team-b",
    depends_on=(CHECKPOINT.id,),
    node=NODE,
    gpus=(0,),
)
PREEMPT_NOW = Preempt(
    id=f"preempt:{NS}/job", target=f"{NS}/job", reason="not checkpointable", node=NODE, gpus=(0,)
)
RECLAIM = Reclaim(
    id=f"reclaim:{NS}/job", target=f"{NS}/job", reason="idle for 2h", node=NODE, gpus=(0,)
)
MOVE = Move(
    id=f"move:{NS}/job",
    target=f"{NS}/job",
    reason="defragment gpu-1",
    depends_on=(CHECKPOINT.id,),
    node=NODE,
    gpus=(0,),
    to_node="gpu-2",
    to_gpus=(2, 3),
)
# a Job's gang is stopped by suspending the Job (the planner names it in `suspend_job`)
PREEMPT_JOB = PREEMPT.model_copy(update={"suspend_job": "train"})
PREEMPT_JOB_NOW = PREEMPT_NOW.model_copy(update={"suspend_job": "train"})
RECLAIM_JOB = RECLAIM.model_copy(update={"suspend_job": "train"})
RESUME = Resume(
    id=f"resume:{NS}/train",
    target=f"{NS}/train",
    reason="resume Job team-a/train, suspended to stop its gang: it fits on gpu-1 now",
)
SCALE = Scale(
    id=f"scale:{NS}/serve",
    target=f"{NS}/serve",
    reason="queue 40 > 10",
    workload_kind="Deployment",
    from_replicas=2,
    to_replicas=3,
    policy="queue",
)
SCALE_STS = Scale(
    id=f"scale:{NS}/db",
    target=f"{NS}/db",
    reason="idle",
    workload_kind="StatefulSet",
    from_replicas=3,
    to_replicas=1,
    policy="idle",
)
QUOTA = ApplyQuota(
    id=f"quota:{NS}/gpu-quota",
    target=f"{NS}/gpu-quota",
    reason="team-a gets 8 GPUs",
    verb="create",
    hard={"requests.nvidia.com/gpu": "8"},
)
QUOTA_NO_NS = QUOTA.model_copy(
    update={"id": "quota:gpupool-absent/gpu-quota", "target": "gpupool-absent/gpu-quota"}
)
PC = ApplyPriorityClass(
    id="priority-class:gpupool-training",
    target="gpupool-training",
    reason="policy",
    value=1000,
    preemption_policy="PreemptLowerPriority",
)

PC_DEFAULT = PC.model_copy(update={"global_default": True})
PRUNE_QUOTA = PruneQuota(
    id=f"prune-quota:{NS}/gpu-quota", target=f"{NS}/gpu-quota", reason="its Quota is gone"
)
PRUNE_PC = PrunePriorityClass(
    id="prune-priority-class:gpupool-training", target="gpupool-training", reason="gone"
)

GRACE_BY_ID = {CHECKPOINT.id: float(GRACE)}

# ---------------------------------------------------------------------- states
OURS = {C.CORDONED_FOR_ANN: "repartition"}
CORDONED = Node(cordoned=True, annotations=OURS)


def mig_node(
    state: str | None,
    *,
    since: float = 60,
    label: str = MIG_NAME,
    mark: str | None = None,
    extra: dict | None = None,
) -> Node:
    """Cordoned by us, labelled `label` `since` seconds ago, in mig-manager state `state`;
    `mark`: the config whose family was seen written long ago."""
    labels = {C.MIG_CONFIG_LABEL: label, **({C.MIG_STATE_LABEL: state} if state else {})}
    marks = {C.MIG_CONFIG_WRITTEN_ANN: f"{mark}@{ago(3600)}"} if mark else {}
    return Node(
        cordoned=True,
        labels={**labels, **(extra or {})},
        annotations={**OURS, C.RECONFIGURE_SINCE_ANN: ago(since), **marks},
    )


AGENT_NEW = NodeState(NODE, (gpu_status(0, mig=["3g.40gb", "3g.40gb"]), gpu_status(1)))
AGENT_OLD = NodeState(NODE, (gpu_status(0), gpu_status(1)))
OTHER_ENTRY = [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
OTHER_CONFIG = yaml_text(
    {
        "version": "v1",
        "mig-configs": {
            ALL_DISABLED: [{"devices": "all", "mig-enabled": False}],
            "gpupool-000000000000": OTHER_ENTRY,
        },
    }
)


def parted(*entries: tuple[str, list]) -> str:
    """mig-manager's config.yaml with `all-disabled` and `entries`."""
    return yaml_text(
        {
            "version": "v1",
            "mig-configs": {
                ALL_DISABLED: [{"devices": "all", "mig-enabled": False}],
                **dict(entries),
            },
        }
    )


WITH_ENTRY = parted(*((n, MIG_ENTRY) for n in family(MIG_NAME)))
"""The config and its retry names, as the step writes them."""
ONLY_BASE = parted((MIG_NAME, MIG_ENTRY))
"""The config without its retry names (written by an older gpupool, or edited since)."""
BESIDE_CM_TEXT = parted(
    *(
        (n, render_mig_parted(MIG_BESIDE_MIG, {0})["mig-configs"]["gpupool"])
        for n in family(PART_NAME)
    ),
    *((n, render_mig_parted(MIG_BESIDE_MIG)["mig-configs"]["gpupool"]) for n in family(FULL_NAME)),
)
MIG_CM = memory_config().mig_config_map
SHARING_CM = memory_config().sharing_config_map


def job(**kw) -> Pod:
    return Pod("job", **kw)


# ---------------------------------------------------------------------- checks
def cordoned_by_us(p: Probe) -> None:
    n = p.node()
    assert n.unschedulable and n.annotations[C.CORDONED_FOR_ANN] == "repartition"


def schedulable(p: Probe) -> None:
    n = p.node()
    assert not n.unschedulable and C.CORDONED_FOR_ANN not in n.annotations


def pool_labelled(p: Probe) -> None:
    assert p.node().labels[C.POOL_LABEL] == "a100"
    assert p.node().labels["keep"] == "me"


def pool_label_gone(p: Probe) -> None:
    assert C.POOL_LABEL not in p.node().labels
    assert p.node().labels["keep"] == "me"


def mig_config_written(*entries: str):
    """mig-manager's config.yaml holds `all-disabled`, the new entry with its retry names and
    `entries`."""

    def check(p: Probe) -> None:
        configs = p.mig_configs()
        assert sorted(configs) == sorted({ALL_DISABLED, *family(MIG_NAME), *entries})
        assert all(configs[n] == MIG_ENTRY for n in family(MIG_NAME))
        assert configs[ALL_DISABLED] == [{"devices": "all", "mig-enabled": False}]
        if "gpupool-000000000000" in entries:
            assert configs["gpupool-000000000000"] == OTHER_ENTRY

    return check


def config_marked(*entries: str):
    """The config is written and its propagation clock starts now; the label waits."""

    def check(p: Probe) -> None:
        mig_config_written(*entries)(p)
        n = p.node()
        assert n.annotations[C.MIG_CONFIG_WRITTEN_ANN] == f"{MIG_NAME}@{NOW.isoformat()}"
        assert n.labels.get(C.MIG_CONFIG_LABEL) != MIG_NAME

    return check


def labelled(value: str, partition: dict | None = None):
    """The label names `value`, the old state is gone, the reconfiguration's clock restarted."""

    def check(p: Probe) -> None:
        n = p.node()
        assert n.unschedulable
        assert n.labels[C.MIG_CONFIG_LABEL] == value
        assert C.MIG_STATE_LABEL not in n.labels  # mig-manager writes it afresh
        assert n.annotations[C.RECONFIGURE_SINCE_ANN] == NOW.isoformat()
        assert json.loads(n.annotations[C.PARTITION_ANN]) == (
            partition or {"0": {"from": "whole", "to": "3g.40gb x2"}}
        )

    return check


def remarked_not_relabelled(p: Probe) -> None:
    """The retry's entries were missing: written, the propagation clock restarted, and the
    failed label left as it is until the mounted copies can show them."""
    mig_config_written()(p)
    n = p.node()
    assert n.annotations[C.MIG_CONFIG_WRITTEN_ANN] == f"{MIG_NAME}@{NOW.isoformat()}"
    assert (n.labels[C.MIG_CONFIG_LABEL], n.labels[C.MIG_STATE_LABEL]) == (MIG_NAME, "failed")


def since_now(p: Probe) -> None:
    assert p.node().annotations[C.RECONFIGURE_SINCE_ANN] == NOW.isoformat()


def still_cordoned_failed(p: Probe) -> None:
    n = p.node()
    assert n.unschedulable and n.labels[C.MIG_STATE_LABEL] == "failed"


def mig_labelled(p: Probe) -> None:
    mig_config_written()(p)
    labelled(MIG_NAME)(p)


def retry_labelled(attempt: int):
    def check(p: Probe) -> None:
        mig_config_written()(p)
        labelled(attempt_name(MIG_NAME, attempt))(p)

    return check


SHARED_4 = {C.SHARED_RESOURCE: "4"}
"""gpu1 shared 4 ways, as the kubelet posts it (gpu0's MIG instances left out)."""
WHOLE_1 = {C.GPU_RESOURCE: "1"}
DEFAULT_CONFIG = memory_config().sharing_default_config
SHARING_PROPAGATING = f"config {SHARING_NAME} written; the device plugin's config-manager"
SHARING_LABELLED = f"{C.DEVICE_PLUGIN_CONFIG_LABEL}={SHARING_NAME}; waiting for allocatable"


def sharing_node(
    *,
    label: str | None = None,
    since: float | None = None,
    mark: tuple[str, float] | None = None,
    allocatable: dict[str, str] | None = None,
    cordoned: bool = True,
) -> Node:
    """Cordoned by us; the device plugin's label `label` set `since` seconds ago; config
    `mark[0]` seen written `mark[1]` seconds ago; what the kubelet shows in allocatable."""
    ann = dict(OURS) if cordoned else {}
    if since is not None:
        ann[C.RECONFIGURE_SINCE_ANN] = ago(since)
    if mark is not None:
        ann[C.SHARING_CONFIG_WRITTEN_ANN] = f"{mark[0]}@{ago(mark[1])}"
    return Node(
        cordoned=cordoned,
        labels={C.DEVICE_PLUGIN_CONFIG_LABEL: label} if label else {},
        annotations=ann,
        allocatable=dict(allocatable or {}),
    )


SHARING_CM_WITH_KEY = ConfigMap(SHARING_CM, {SHARING_NAME: yaml_text(render_sharing(SHARING))})
MIG_ON_GPU0 = NodeState(NODE, (gpu_status(0, mig=["3g.40gb", "3g.40gb"]), gpu_status(1)))


def sharing_config_is(action: SetSharing, name: str, section: str):
    """The plugin's ConfigMap holds `name`: `replicas` >= 2 for `nvidia.com/gpu` under
    `sharing.<section>`, renamed, no `devices` list, the install's flags."""

    def check(p: Probe) -> None:
        data = p.config_map(SHARING_CM)
        assert data is not None and data[name] == yaml_text(render_sharing(action))
        doc = yaml_load(data[name])
        assert doc["version"] == "v1" and doc["flags"] == SHARING_FLAGS[action.strategy]
        assert list(doc["sharing"]) == [section]
        assert doc["sharing"][section] == {
            "renameByDefault": True,
            "resources": [{"name": C.GPU_RESOURCE, "replicas": action.slices}],
        }
        parse_sharing(data[name])  # the device plugin's own check

    return check


def sharing_marked(p: Probe) -> None:
    """The config is written, its propagation clock starts now; the label waits."""
    sharing_config_is(SHARING, SHARING_NAME, "timeSlicing")(p)
    n = p.node()
    assert n.annotations[C.SHARING_CONFIG_WRITTEN_ANN] == f"{SHARING_NAME}@{NOW.isoformat()}"
    assert C.DEVICE_PLUGIN_CONFIG_LABEL not in n.labels


def sharing_kept_other(p: Probe) -> None:
    sharing_marked(p)
    assert p.config_map(SHARING_CM)["other"] == "keep"


def sharing_labelled(value: str, partition: dict):
    """The label names `value`, the step's clock starts now; nothing optimistic is recorded."""

    def check(p: Probe) -> None:
        n = p.node()
        assert n.unschedulable and n.labels[C.DEVICE_PLUGIN_CONFIG_LABEL] == value
        assert n.annotations[C.RECONFIGURE_SINCE_ANN] == NOW.isoformat()
        assert json.loads(n.annotations[C.PARTITION_ANN]) == partition
        assert "gpupool.io/shared-slices" not in n.annotations  # no optimistic record

    return check


def unshared_by_default(p: Probe) -> None:
    """Back to the install's `default`: no config written, no propagation wait."""
    sharing_labelled(DEFAULT_CONFIG, {"1": {"from": "shared x4", "to": "whole"}})(p)
    assert p.config_map(SHARING_CM) is None
    assert C.SHARING_CONFIG_WRITTEN_ANN not in p.node().annotations


def checkpoint_asked_now(p: Probe) -> None:
    pod = p.pod("job")
    assert pod is not None and pod.annotations[C.CHECKPOINT_REQUESTED_ANN] == NOW.isoformat()


def evicted(p: Probe) -> None:
    assert p.evicted("job")


def not_evicted(p: Probe) -> None:
    pod = p.pod("job")
    assert pod is not None and not pod.deleting


def moved(p: Probe) -> None:
    assert p.evicted("job")
    pod = p.pod("job")
    assert pod is None or pod.annotations[C.MOVE_TO_ANN] == "gpu-2"


RESERVED_NOW = f"gpu-2:2,3@{NOW.isoformat()}"
"""MOVE's reservation on its Job, written at NOW."""
RESERVED_MSG = "the next pod of Job train is reserved on gpu-2"
JOB_GONE_MSG = "its Job train is gone: no pod replaces it"
TRAIN = Job("train")
OWNED_BY_TRAIN = (Owner("Job", "train"),)


def jobs_pod(**kw) -> Pod:
    """The pod `job`, created by the Job `train`."""
    return Pod("job", owners=OWNED_BY_TRAIN, **kw)


def job_reserved(value: str | None):
    def check(p: Probe) -> None:
        ann = p.job_annotations("train")
        assert ann is not None and ann.get(C.NEXT_POD_RESERVED_ANN) == value, ann

    return check


def moved_and_job_reserved(value: str = RESERVED_NOW):
    def check(p: Probe) -> None:
        moved(p)
        job_reserved(value)(p)

    return check


def held_and_job_reserved(p: Probe) -> None:
    not_evicted(p)
    job_reserved(RESERVED_NOW)(p)


SUSPENDED_MSG = "suspended Job train: the Job controller stops its pods"
SUSPENDED_BY_US = {C.SUSPENDED_BY_ANN: ago(30)}
"""The mark gpupool leaves on a Job it suspended (30 s before NOW)."""


def job_suspended(at: str | None, suspended: bool = True):
    """The Job `train` is (not) suspended, with gpupool's mark `at` (None: no mark)."""

    def check(p: Probe) -> None:
        ann = p.job_annotations("train")
        assert ann is not None, "Job train is gone"
        assert (p.job_suspended("train"), ann.get(C.SUSPENDED_BY_ANN)) == (suspended, at), ann

    return check


def _fail(msg: str) -> None:
    raise AssertionError(msg)


def suspended_not_evicted(at: str | None = NOW.isoformat()):
    """The Job is suspended (the Job controller stops the pod, not gpupool: it is not evicted)."""

    def check(p: Probe) -> None:
        not_evicted(p)
        job_suspended(at)(p)

    return check


def scaled(kind, name: str, replicas: int):
    def check(p: Probe) -> None:
        w = p.workload(kind, name)
        assert w["replicas"] == replicas
        assert w["annotations"][C.LAST_SCALE_ANN] == NOW.isoformat()
        assert w["annotations"]["keep"] == "me"

    return check


def quota_applied(p: Probe) -> None:
    q = p.quota("gpu-quota")
    assert q is not None
    assert q["labels"][C.MANAGED_BY_LABEL] == C.MANAGED_BY
    assert q["hard"] == {"requests.nvidia.com/gpu": "8"}


def priority_class_is(value: int, policy: str = "PreemptLowerPriority", default: bool = False):
    def check(p: Probe) -> None:
        pc = p.priority_class(PC.target)
        assert pc is not None and (pc.value, pc.preemption_policy) == (value, policy)
        assert pc.global_default == default

    return check


# ---------------------------------------------------------------------- rows
CORDON_ROWS = [
    Row(
        "cordon/fresh", CORDON, (Node(),), "done", "cordoned", ("patch_node",), check=cordoned_by_us
    ),
    Row("cordon/already-cordoned", CORDON, (Node(cordoned=True),), "done", "already cordoned"),
    Row(
        "cordon/already-ours", CORDON, (CORDONED,), "done", "already cordoned", check=cordoned_by_us
    ),
    Row("cordon/no-node", CORDON, (), "error", "404"),
]

UNCORDON_ROWS = [
    Row(
        "uncordon/ours",
        UNCORDON,
        (CORDONED,),
        "done",
        "uncordoned",
        ("patch_node",),
        check=schedulable,
    ),
    Row(
        "uncordon/someone-elses",
        UNCORDON,
        (Node(cordoned=True, annotations={"sre": "disk"}),),
        "done",
        "cordoned by someone else: left alone",
    ),
    Row(
        "uncordon/mig-pending",
        UNCORDON,
        (mig_node("pending"),),
        "waiting",
        f"still applying {MIG_NAME}",
    ),
    Row(
        "uncordon/mig-success",
        UNCORDON,
        (mig_node("success"),),
        "done",
        "uncordoned",
        ("patch_node",),
        check=schedulable,
    ),
    Row(
        "uncordon/pending-config-not-ours",
        UNCORDON,
        (mig_node("pending", label=ALL_DISABLED),),
        "done",
        "uncordoned",
        ("patch_node",),
        check=schedulable,
    ),
    Row("uncordon/not-cordoned", UNCORDON, (Node(),), "done", "already schedulable"),
    Row("uncordon/no-node", UNCORDON, (), "error", "404"),
]

LABEL_ROWS = [
    Row(
        "label-node/present",
        LABEL,
        (Node(labels={C.POOL_LABEL: "a100"}),),
        "done",
        "labels present",
    ),
    Row(
        "label-node/missing",
        LABEL,
        (Node(labels={"keep": "me"}),),
        "done",
        "labelled",
        ("patch_node",),
        check=pool_labelled,
    ),
    Row(
        "label-node/other-pool",
        LABEL,
        (Node(labels={C.POOL_LABEL: "h100", "keep": "me"}),),
        "done",
        "labelled",
        ("patch_node",),
        check=pool_labelled,
    ),
    Row(
        "label-node/remove-stale",
        UNLABEL,
        (Node(labels={C.POOL_LABEL: "retired", "keep": "me"}),),
        "done",
        "labelled",
        ("patch_node",),
        check=pool_label_gone,
    ),
    Row("label-node/already-gone", UNLABEL, (Node(labels={"keep": "me"}),), "done", "present"),
]

BUSY = "GPUs still in use by team-a/job"
WRITES_CONFIG = ("write_config_map", "patch_node")  # the entry, then the node's propagation mark
PROPAGATING = (
    f"config {MIG_NAME} written; mig-manager reads a mounted copy: "
    f"{int(memory_config().config_propagation_seconds)}s before {C.MIG_CONFIG_LABEL} may name it"
)
LABELLED = f"{C.MIG_CONFIG_LABEL}={MIG_NAME}"
UNFLAGGED = True
"""What `changed` says after writing the config and the propagation mark: it wrote (see
test_a_step_that_wrote_says_so)."""
WITH_ENTRY_CM = ConfigMap(MIG_CM, {"config.yaml": WITH_ENTRY})
ON_GPU1 = {C.GPUS_ANN: "1"}
AGENT = C.AGENT_FIELD_MANAGER
"""The only field manager whose `gpupool.io/gpus` is believed (reconciler/observe/trust.py)."""
BESIDE_CM = ConfigMap(MIG_CM, {"config.yaml": BESIDE_CM_TEXT})
BESIDE_PARTITION = {"0": {"from": "whole", "to": "MIG[3g.40gb, 3g.40gb]"}}


def both_stages_written(p: Probe) -> None:
    """Both configs and their retry names are written at once; the mark names the first."""
    configs = p.mig_configs()
    part = render_mig_parted(MIG_BESIDE_MIG, {0})["mig-configs"]["gpupool"]
    full = render_mig_parted(MIG_BESIDE_MIG)["mig-configs"]["gpupool"]
    assert part == [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}
    ]  # the busy MIG card is not listed
    assert sorted(configs) == sorted({ALL_DISABLED, *family(PART_NAME), *family(FULL_NAME)})
    assert all(configs[n] == part for n in family(PART_NAME))
    assert all(configs[n] == full for n in family(FULL_NAME))
    n = p.node()
    assert n.annotations[C.MIG_CONFIG_WRITTEN_ANN] == f"{PART_NAME}@{NOW.isoformat()}"
    assert C.MIG_CONFIG_LABEL not in n.labels


def marked(seconds_ago: float, name: str = MIG_NAME, **kw) -> Node:
    """Cordoned by us; config `name` seen written `seconds_ago`."""
    return Node(
        cordoned=True,
        annotations={**OURS, C.MIG_CONFIG_WRITTEN_ANN: f"{name}@{ago(seconds_ago)}"},
        **kw,
    )


def config_step(
    id_: str, seed: tuple, writes: tuple[str, ...] = WRITES_CONFIG, *others: str, **kw
) -> Row:
    """A row where the step writes what the config and its propagation mark lack, and waits."""
    return Row(
        id_,
        MIG,
        seed,
        "waiting",
        PROPAGATING,
        writes,
        changed=UNFLAGGED,
        check=config_marked(*others),
        **kw,
    )


MIG_ROWS = [
    Row("mig/not-cordoned", MIG, (Node(),), "blocked", "node is not cordoned"),
    config_step("mig/cordoned-by-someone-else", (Node(cordoned=True),)),
    Row(
        "mig/busy-by-annotation",
        MIG,
        (CORDONED, job(annotations={C.GPUS_ANN: "0"}, annotated_by=AGENT)),
        "waiting",
        BUSY,
    ),
    Row(
        "mig/busy-mig-instance",
        MIG,
        (CORDONED, job(annotations={C.GPUS_ANN: "1,0:4"}, annotated_by=AGENT)),
        "waiting",
        BUSY,
    ),
    Row("mig/gpu-pod-without-annotation", MIG, (CORDONED, job()), "waiting", BUSY),
    # a tenant's unreadable annotation: the pod may hold any card (issue 16: not a traceback)
    Row(
        "mig/gpu-pod-with-unreadable-annotation",
        MIG,
        (CORDONED, job(annotations={C.GPUS_ANN: "all"})),
        "waiting",
        BUSY,
    ),
    Row("mig/pending-gpu-pod-counts", MIG, (CORDONED, job(phase="Pending")), "waiting", BUSY),
    Row(
        "mig/terminating-gpu-pod-counts",
        MIG,
        (CORDONED, job(annotations={C.GPUS_ANN: "0"}, annotated_by=AGENT, deleting=True)),
        "waiting",
        BUSY,
    ),
    Row("mig/busy-after-propagation", MIG, (marked(600), WITH_ENTRY_CM, job()), "waiting", BUSY),
    Row(
        "mig/unknown-model-pod-on-other-gpu",
        MIG,
        (CORDONED, job(annotations={C.GPUS_ANN: "1"}, annotated_by=AGENT)),
        "waiting",
        f"{BUSY} (a MIG mode change on an unknown GPU model resets every GPU of the node)",
    ),
    Row(
        "mig/ampere-mode-change-pod-on-other-gpu",
        MIG,
        (
            Node(cordoned=True, annotations=OURS, labels=A100_LABELS),
            job(annotations=ON_GPU1, annotated_by=AGENT),
        ),
        "waiting",
        f"{BUSY} (a MIG mode change on A100-SXM4-80GB resets every GPU of the node)",
    ),
    Row(
        "mig/ampere-mode-change-model-from-agent",
        MIG,
        (
            CORDONED,
            NodeState(NODE, (gpu_status(0), gpu_status(1))),
            job(annotations=ON_GPU1, annotated_by=AGENT),
        ),
        "waiting",
        "on A100-SXM4-80GB resets every GPU",
    ),
    config_step(
        "mig/hopper-mode-change-pod-on-other-gpu",
        (
            Node(cordoned=True, annotations=OURS, labels=H100_LABELS),
            job(annotations=ON_GPU1, annotated_by=AGENT),
        ),
    ),
    # the same pod, its annotation written by someone else (a tenant; gpupool's controller,
    # which never writes it): not believed, so the pod may hold card 0 too
    *(
        Row(
            f"mig/hopper-mode-change-annotation-by-{who}",
            MIG,
            (
                Node(cordoned=True, annotations=OURS, labels=H100_LABELS),
                job(annotations=ON_GPU1, annotated_by=by),
            ),
            "waiting",
            BUSY,
        )
        for who, by in (
            ("the-client", None),
            ("a-tenant", "kubectl-annotate"),
            ("gpupool", "gpupool"),
        )
    ),
    Row(
        "mig/ampere-layout-change-pod-on-other-gpu",
        MIG_LAYOUT,
        (
            Node(cordoned=True, annotations=OURS, labels=A100_LABELS),
            NodeState(NODE, (gpu_status(0, mig=["1g.10gb"] * 7), gpu_status(1))),
            job(annotations=ON_GPU1, annotated_by=AGENT),
        ),
        "waiting",
        f"config {config_name(render_mig_parted(MIG_LAYOUT))} written",
        WRITES_CONFIG,
        changed=UNFLAGGED,
    ),
    Row(
        "mig/ampere-layout-change-own-gpu-busy",
        MIG_LAYOUT,
        (
            Node(cordoned=True, annotations=OURS, labels=A100_LABELS),
            job(annotations={C.GPUS_ANN: "0:0"}, annotated_by=AGENT),
        ),
        "waiting",
        BUSY,
    ),
    config_step("mig/finished-gpu-pod", (CORDONED, job(phase="Succeeded"))),
    config_step("mig/cpu-pod", (CORDONED, job(gpus=False))),
    config_step("mig/pod-on-other-node", (CORDONED, job(node="gpu-2"))),
    config_step(
        "mig/free",
        (
            Node(
                cordoned=True,
                annotations=OURS,
                labels={C.MIG_CONFIG_LABEL: "gpupool-0123456789ab", C.MIG_STATE_LABEL: "success"},
            ),
        ),
    ),
    config_step(
        "mig/keeps-other-entries",
        (CORDONED, ConfigMap(MIG_CM, {"config.yaml": OTHER_CONFIG, "other": "x"})),
        WRITES_CONFIG,
        "gpupool-000000000000",
    ),
    config_step("mig/entry-already-there", (CORDONED, WITH_ENTRY_CM), ("patch_node",)),
    Row("mig/propagating", MIG, (marked(60), WITH_ENTRY_CM), "waiting", "90s before"),
    Row(
        "mig/propagation-restarted-when-rewritten",
        MIG,
        (marked(140), ConfigMap(MIG_CM, {"config.yaml": ONLY_BASE})),
        "waiting",
        PROPAGATING,
        WRITES_CONFIG,
        changed=UNFLAGGED,
        check=config_marked(),
    ),
    config_step(
        "mig/mark-of-another-config",
        (marked(999, name="gpupool-000000000000"), WITH_ENTRY_CM),
        ("patch_node",),
    ),
    config_step(
        "mig/unreadable-mark",
        (marked(999, name=f"{MIG_NAME}@never"), WITH_ENTRY_CM),
        ("patch_node",),
    ),
    Row(
        "mig/propagated",
        MIG,
        (marked(151), WITH_ENTRY_CM),
        "waiting",
        LABELLED,
        ("patch_node",),
        check=mig_labelled,
    ),
    Row(
        "mig/propagated-clears-old-state",
        MIG,
        (
            marked(151, labels={C.MIG_CONFIG_LABEL: ALL_DISABLED, C.MIG_STATE_LABEL: "success"}),
            WITH_ENTRY_CM,
        ),
        "waiting",
        LABELLED,
        ("patch_node",),
        check=mig_labelled,
    ),
    config_step("mig/entry-gone-after-propagation", (marked(600),)),
    Row(
        "mig/state-unset", MIG, (mig_node(None), AGENT_OLD), "waiting", f"{C.MIG_STATE_LABEL}=unset"
    ),
    Row(
        "mig/pending",
        MIG,
        (mig_node("pending"), AGENT_OLD),
        "waiting",
        f"{C.MIG_STATE_LABEL}=pending",
    ),
    Row(
        "mig/busy-but-label-set",
        MIG,
        (mig_node("pending"), job(annotations={C.GPUS_ANN: "0"}, annotated_by=AGENT)),
        "waiting",
        f"{C.MIG_STATE_LABEL}=pending",
    ),
    Row(
        "mig/agent-shows-layout",
        MIG,
        (mig_node("success"), AGENT_NEW),
        "done",
        f"mig-manager applied {MIG_NAME}",
    ),
    Row("mig/no-agent-state", MIG, (mig_node("success"),), "done", "mig-manager applied"),
    Row(
        "mig/agent-shows-old-layout",
        MIG,
        (mig_node("success"), AGENT_OLD),
        "waiting",
        "waiting for the node agent to publish the new layout",
    ),
    Row(
        "mig/failed",
        MIG,
        (mig_node("failed"), AGENT_OLD),
        "waiting",
        f"mig-manager reports failed for {MIG_NAME}; retry 1 of 2: {MIG_NAME}-r1 in 90s",
    ),
    Row(
        "mig/failed-retried-with-a-new-value",
        MIG,
        (mig_node("failed", since=151, mark=MIG_NAME), WITH_ENTRY_CM, AGENT_OLD),
        "waiting",
        f"retry 1 of 2: {C.MIG_CONFIG_LABEL}={MIG_NAME}-r1",
        ("patch_node",),
        check=retry_labelled(1),
    ),
    Row(
        "mig/failed-retry-waits-for-the-cards",
        MIG,
        (mig_node("failed", since=151, mark=MIG_NAME), WITH_ENTRY_CM, job()),
        "waiting",
        f"retry 1 of 2: {BUSY}",
    ),
    Row(
        "mig/failed-retry-writes-its-entry-and-waits",
        MIG,
        (
            mig_node("failed", since=151, mark=MIG_NAME),
            ConfigMap(MIG_CM, {"config.yaml": ONLY_BASE}),
        ),
        "waiting",
        f"retry 1 of 2: config {MIG_NAME}-r1 written; mig-manager reads a mounted copy: 150s",
        WRITES_CONFIG,
        changed=UNFLAGGED,
        check=remarked_not_relabelled,
    ),
    Row(
        "mig/retry-failed-again",
        MIG,
        (
            mig_node("failed", since=151, mark=MIG_NAME, label=attempt_name(MIG_NAME, 1)),
            WITH_ENTRY_CM,
        ),
        "waiting",
        f"reports failed for {MIG_NAME}-r1; retry 2 of 2: {C.MIG_CONFIG_LABEL}={MIG_NAME}-r2",
        ("patch_node",),
        check=retry_labelled(2),
    ),
    Row(
        "mig/retries-exhausted",
        MIG,
        (
            mig_node("failed", since=151, mark=MIG_NAME, label=attempt_name(MIG_NAME, 2)),
            WITH_ENTRY_CM,
        ),
        "failed",
        f"mig-manager reports failed for {MIG_NAME}-r2, attempt 3 of 3 ({MIG_NAME}, "
        f"{MIG_NAME}-r1, {MIG_NAME}-r2)",
        check=still_cordoned_failed,
    ),
    Row(
        "mig/retry-applied",
        MIG,
        (mig_node("success", label=attempt_name(MIG_NAME, 1)), AGENT_NEW),
        "done",
        f"mig-manager applied {MIG_NAME}-r1",
    ),
    Row(
        "mig/retry-pending",
        MIG,
        (mig_node("pending", label=attempt_name(MIG_NAME, 2)), AGENT_OLD),
        "waiting",
        f"{C.MIG_STATE_LABEL}=pending",
    ),
    config_step(
        "mig/failed-label-of-another-config",
        (mig_node("failed", label="gpupool-000000000000-r2"),),
    ),
    Row(
        "mig/failed-without-its-start-time",
        MIG,
        (
            Node(
                cordoned=True,
                annotations=OURS,
                labels={C.MIG_CONFIG_LABEL: MIG_NAME, C.MIG_STATE_LABEL: "failed"},
            ),
        ),
        "waiting",
        f"retry 1 of 2: {MIG_NAME}-r1 in 150s",
        ("patch_node",),
        check=since_now,
    ),
    Row(
        "mig/unset-too-long",
        MIG,
        (mig_node(None, since=901), AGENT_OLD),
        "failed",
        "stuck for over 900s; is nvidia-mig-manager running",
    ),
    Row(
        "mig/pending-within-timeout",
        MIG,
        (mig_node("pending", since=899), AGENT_OLD),
        "waiting",
        "=pending",
    ),
    Row(
        "mig/stuck-pending",
        MIG,
        (mig_node("pending", since=901), AGENT_OLD),
        "waiting",
        f"left {MIG_NAME} pending for over 900s; retry 1 of 2: config {MIG_NAME}-r1 written",
        WRITES_CONFIG,
        changed=UNFLAGGED,
    ),
    Row(
        "mig/stuck-pending-retried",
        MIG,
        (mig_node("pending", since=901, mark=MIG_NAME), WITH_ENTRY_CM, AGENT_OLD),
        "waiting",
        f"left {MIG_NAME} pending for over 900s; retry 1 of 2: {C.MIG_CONFIG_LABEL}={MIG_NAME}-r1",
        ("patch_node",),
        check=retry_labelled(1),
    ),
    Row(
        "mig/stuck-unpublished",
        MIG,
        (mig_node("success", since=3600), AGENT_OLD),
        "failed",
        "publish the new layout: stuck for over 900s",
    ),
    Row(
        "mig/config-conflict",
        MIG,
        (CORDONED,),
        "error",
        "409",
        fail={"write_config_map": ApiError(409, "Conflict", "the object has been modified")},
    ),
    Row("mig/no-node", MIG, (), "error", "404"),
    # a mode change beside another MIG card on Hopper: the changed card's config, then the node's
    Row(
        "mig/hopper-beside-mig-writes-both-stages",
        MIG_BESIDE_MIG,
        (Node(cordoned=True, annotations=OURS, labels=H100_LABELS),),
        "waiting",
        f"config {PART_NAME} written",
        WRITES_CONFIG,
        changed=UNFLAGGED,
        check=both_stages_written,
    ),
    Row(
        "mig/hopper-beside-mig-busy-mig-card",
        MIG_BESIDE_MIG,
        (
            Node(cordoned=True, annotations=OURS, labels=H100_LABELS),
            job(annotations={C.GPUS_ANN: "1:0"}, annotated_by=AGENT),
        ),
        "waiting",
        f"config {PART_NAME} written",
        WRITES_CONFIG,
        changed=UNFLAGGED,
    ),
    Row(
        "mig/hopper-beside-mig-changed-card-first",
        MIG_BESIDE_MIG,
        (
            Node(
                cordoned=True,
                labels=H100_LABELS,
                annotations={**OURS, C.MIG_CONFIG_WRITTEN_ANN: f"{PART_NAME}@{ago(151)}"},
            ),
            BESIDE_CM,
        ),
        "waiting",
        f"{C.MIG_CONFIG_LABEL}={PART_NAME}",
        ("patch_node",),
        check=labelled(PART_NAME, BESIDE_PARTITION),
    ),
    Row(
        "mig/hopper-beside-mig-then-the-whole-node",
        MIG_BESIDE_MIG,
        (
            mig_node("success", label=PART_NAME, mark=PART_NAME, extra=H100_LABELS),
            BESIDE_CM,
        ),
        "waiting",
        f"mig-manager applied {PART_NAME} to the changed cards; next the whole node: "
        f"{C.MIG_CONFIG_LABEL}={FULL_NAME}",
        ("patch_node",),
        check=labelled(FULL_NAME, BESIDE_PARTITION),
    ),
    Row(
        "mig/hopper-beside-mig-done",
        MIG_BESIDE_MIG,
        (
            mig_node("success", label=FULL_NAME, mark=PART_NAME, extra=H100_LABELS),
            NodeState(
                NODE,
                (
                    gpu_status(0, mig=["3g.40gb", "3g.40gb"], model="H100-SXM5-80GB"),
                    gpu_status(1, mig=["7g.80gb"], model="H100-SXM5-80GB"),
                ),
            ),
        ),
        "done",
        f"mig-manager applied {FULL_NAME}",
    ),
    Row(
        "mig/ampere-beside-mig-one-config",
        MIG_BESIDE_MIG,
        (Node(cordoned=True, annotations=OURS, labels=A100_LABELS),),
        "waiting",
        f"config {FULL_NAME} written",
        WRITES_CONFIG,
        changed=UNFLAGGED,
    ),
]

SHARED_PARTITION = {"1": {"from": "whole", "to": "shared x4"}}
SHARING_ROWS = [
    Row("set-sharing/not-cordoned", SHARING, (Node(),), "blocked", "node is not cordoned"),
    Row(
        "set-sharing/busy",
        SHARING,
        (CORDONED, job(annotations={C.GPUS_ANN: "1/2"}, annotated_by=AGENT)),
        "waiting",
        BUSY,
    ),
    Row(
        "set-sharing/other-gpu-busy",
        SHARING,
        (CORDONED, MIG_ON_GPU0, job(annotations={C.GPUS_ANN: "0:0"}, annotated_by=AGENT)),
        "waiting",
        SHARING_PROPAGATING,
        WRITES_CONFIG,
        check=sharing_marked,
    ),
    Row(
        "set-sharing/free",
        SHARING,
        (CORDONED,),
        "waiting",
        SHARING_PROPAGATING,
        WRITES_CONFIG,
        check=sharing_marked,
    ),
    Row(
        "set-sharing/keeps-other-keys",
        SHARING,
        (CORDONED, ConfigMap(SHARING_CM, {"other": "keep"})),
        "waiting",
        SHARING_PROPAGATING,
        WRITES_CONFIG,
        check=sharing_kept_other,
    ),
    Row(
        # written by an earlier run whose mark was lost: the wait starts again from now
        "set-sharing/key-already-there",
        SHARING,
        (CORDONED, SHARING_CM_WITH_KEY),
        "waiting",
        SHARING_PROPAGATING,
        ("patch_node",),
        check=sharing_marked,
    ),
    Row(
        "set-sharing/propagating",
        SHARING,
        (sharing_node(mark=(SHARING_NAME, 60)), SHARING_CM_WITH_KEY),
        "waiting",
        f"90s before {C.DEVICE_PLUGIN_CONFIG_LABEL} may name it",
    ),
    Row(
        "set-sharing/propagation-restarted-when-rewritten",
        SHARING,
        (
            sharing_node(mark=(SHARING_NAME, 151)),
            ConfigMap(SHARING_CM, {SHARING_NAME: "version: v1\n"}),
        ),
        "waiting",
        SHARING_PROPAGATING,
        WRITES_CONFIG,
        check=sharing_marked,
    ),
    Row(
        "set-sharing/mark-of-another-config",
        SHARING,
        (sharing_node(mark=("gpupool-000000000000", 999)), SHARING_CM_WITH_KEY),
        "waiting",
        SHARING_PROPAGATING,
        ("patch_node",),
        check=sharing_marked,
    ),
    Row(
        "set-sharing/propagated",
        SHARING,
        (sharing_node(mark=(SHARING_NAME, 151), allocatable=WHOLE_1), SHARING_CM_WITH_KEY),
        "waiting",
        SHARING_LABELLED,
        ("patch_node",),
        check=sharing_labelled(SHARING_NAME, SHARED_PARTITION),
    ),
    Row(
        "set-sharing/propagated-but-busy-again",
        SHARING,
        (
            sharing_node(mark=(SHARING_NAME, 151)),
            SHARING_CM_WITH_KEY,
            job(annotations={C.GPUS_ANN: "1/2"}, annotated_by=AGENT),
        ),
        "waiting",
        BUSY,
    ),
    Row(
        "set-sharing/waiting-for-allocatable",
        SHARING,
        (sharing_node(label=SHARING_NAME, since=60, allocatable=WHOLE_1),),
        "waiting",
        f"{SHARING_LABELLED} to show {C.GPU_RESOURCE}=0, {C.SHARED_RESOURCE}=4 "
        f"(now {C.GPU_RESOURCE}=1, {C.SHARED_RESOURCE}=0)",
    ),
    Row(
        "set-sharing/allocatable-shows-both-names",
        SHARING,
        (
            sharing_node(
                label=SHARING_NAME, since=60, allocatable={**WHOLE_1, C.SHARED_RESOURCE: "4"}
            ),
        ),
        "waiting",
        f"(now {C.GPU_RESOURCE}=1, {C.SHARED_RESOURCE}=4)",
    ),
    Row(
        "set-sharing/since-lost",
        SHARING,
        (sharing_node(label=SHARING_NAME, allocatable=WHOLE_1),),
        "waiting",
        SHARING_LABELLED,
        ("patch_node",),
        check=since_now,
    ),
    Row(
        "set-sharing/done-when-allocatable-shows-it",
        SHARING,
        (sharing_node(label=SHARING_NAME, since=60, allocatable=SHARED_4),),
        "done",
        f"{C.DEVICE_PLUGIN_CONFIG_LABEL}={SHARING_NAME}; allocatable shows",
    ),
    Row(
        "set-sharing/repeat",
        SHARING,
        (
            sharing_node(
                label=SHARING_NAME,
                allocatable={**SHARED_4, C.GPU_RESOURCE: "0", C.mig_resource("3g.40gb"): "2"},
                cordoned=False,
            ),
        ),
        "done",
        f"{C.DEVICE_PLUGIN_CONFIG_LABEL}={SHARING_NAME}",
    ),
    Row(
        "set-sharing/timeout",
        SHARING,
        (sharing_node(label=SHARING_NAME, since=601, allocatable=WHOLE_1),),
        "failed",
        "stuck for over 600s",
    ),
    Row(
        "set-sharing/unshare-selects-default",
        UNSHARE,
        (sharing_node(label=SHARING_NAME, allocatable=SHARED_4),),
        "waiting",
        f"{C.DEVICE_PLUGIN_CONFIG_LABEL}={DEFAULT_CONFIG}; waiting for allocatable",
        ("patch_node",),
        check=unshared_by_default,
    ),
    Row(
        "set-sharing/unshare-busy-annotation-by-a-tenant",
        UNSHARE,
        (
            sharing_node(label=SHARING_NAME, allocatable=SHARED_4),
            job(annotations={C.GPUS_ANN: "3"}, annotated_by="kubectl-annotate"),
        ),
        "waiting",
        BUSY,
    ),
    Row(
        "set-sharing/unshare-busy",
        UNSHARE,
        (
            sharing_node(label=SHARING_NAME, allocatable=SHARED_4),
            job(annotations=ON_GPU1, annotated_by=AGENT),
        ),
        "waiting",
        BUSY,
    ),
    Row(
        "set-sharing/unshare-waits-for-allocatable",
        UNSHARE,
        (sharing_node(label=DEFAULT_CONFIG, since=30, allocatable=SHARED_4),),
        "waiting",
        f"(now {C.GPU_RESOURCE}=0, {C.SHARED_RESOURCE}=4)",
    ),
    Row(
        "set-sharing/unshare-done",
        UNSHARE,
        (sharing_node(label=DEFAULT_CONFIG, since=30, allocatable=WHOLE_1),),
        "done",
        f"{C.DEVICE_PLUGIN_CONFIG_LABEL}={DEFAULT_CONFIG}",
    ),
    Row(
        # no label: the config-manager selects the default config already
        "set-sharing/unshare-no-label-done",
        UNSHARE,
        (sharing_node(allocatable=WHOLE_1, cordoned=False),),
        "done",
        "allocatable shows",
    ),
    Row(
        "set-sharing/unshare-timeout",
        UNSHARE,
        (sharing_node(label=DEFAULT_CONFIG, since=601, allocatable=SHARED_4),),
        "failed",
        "stuck for over 600s",
    ),
    Row(
        "set-sharing/mps-rendered",
        MPS,
        (CORDONED,),
        "waiting",
        f"config {MPS_NAME} written",
        WRITES_CONFIG,
        check=sharing_config_is(MPS, MPS_NAME, "mps"),
    ),
    Row(
        "set-sharing/mps-beside-mig-refused",
        MPS.model_copy(update={"plain_cards": 1}),
        (CORDONED, MIG_ON_GPU0),
        "failed",
        "refuses MPS on a node with MIG devices (GPU 0 in MIG mode)",
    ),
    Row(
        "set-sharing/mps-too-many-clients",
        MPS.model_copy(update={"slices": 64}),
        (CORDONED,),
        "failed",
        "at most 48 clients per card",
    ),
]

CHECKPOINT_ROWS = [
    Row("checkpoint/pod-gone", CHECKPOINT, (), "done", "pod is gone"),
    Row(
        "checkpoint/fresh",
        CHECKPOINT,
        (job(),),
        "done",
        "checkpoint requested",
        ("annotate_pod",),
        check=checkpoint_asked_now,
    ),
    Row(
        "checkpoint/recent-request",
        CHECKPOINT,
        (job(annotations={C.CHECKPOINT_REQUESTED_ANN: ago(60)}),),
        "done",
        f"requested at {ago(60)}",
    ),
    Row(
        "checkpoint/request-at-the-limit",
        CHECKPOINT,
        (job(annotations={C.CHECKPOINT_REQUESTED_ANN: ago(GRACE + STALE_CHECKPOINT_SECONDS)}),),
        "done",
        "requested at",
    ),
    Row(
        "checkpoint/stale-request",
        CHECKPOINT,
        (job(annotations={C.CHECKPOINT_REQUESTED_ANN: ago(GRACE + STALE_CHECKPOINT_SECONDS + 1)}),),
        "done",
        "checkpoint requested",
        ("annotate_pod",),
        check=checkpoint_asked_now,
    ),
    Row(
        "checkpoint/unreadable-request",
        CHECKPOINT,
        (job(annotations={C.CHECKPOINT_REQUESTED_ANN: "yesterday"}),),
        "done",
        "checkpoint requested",
        ("annotate_pod",),
        check=checkpoint_asked_now,
    ),
    Row(
        "checkpoint/terminating-pod",
        CHECKPOINT,
        (job(deleting=True),),
        "done",
        "checkpoint requested",
        ("annotate_pod",),
        check=checkpoint_asked_now,
    ),
]


def asked(seconds: float, **extra: str) -> dict[str, str]:
    return {C.CHECKPOINT_REQUESTED_ANN: ago(seconds), **extra}


EVICT_ROWS = [
    Row(
        "evict/grace-left",
        PREEMPT,
        (job(annotations=asked(100)),),
        "waiting",
        "checkpoint grace period: 200s left",
        grace=GRACE_BY_ID,
        check=not_evicted,
    ),
    Row(
        "evict/not-yet-asked",
        PREEMPT,
        (job(),),
        "waiting",
        "checkpoint grace period: 300s left",
        grace=GRACE_BY_ID,
    ),
    Row(
        "evict/grace-over",
        PREEMPT,
        (job(annotations=asked(GRACE + 1)),),
        "done",
        "evicted",
        ("evict_pod",),
        grace=GRACE_BY_ID,
        check=evicted,
    ),
    Row(
        "evict/checkpoint-done",
        PREEMPT,
        (job(annotations=asked(10, **{C.CHECKPOINT_DONE_ANN: "true"})),),
        "done",
        "evicted",
        ("evict_pod",),
        grace=GRACE_BY_ID,
        check=evicted,
    ),
    Row(
        "evict/no-checkpoint",
        PREEMPT_NOW,
        (job(),),
        "done",
        "evicted",
        ("evict_pod",),
        check=evicted,
    ),
    Row(
        "evict/unscheduled-pod",
        PREEMPT_NOW,
        (job(node=None),),
        "done",
        "evicted",
        ("evict_pod",),
        check=evicted,
    ),
    Row(
        "evict/pdb",
        PREEMPT_NOW,
        (job(pdb=True),),
        "blocked",
        "a PodDisruptionBudget does not allow it now",
        check=not_evicted,
    ),
    Row(
        "evict/pdb-after-grace",
        PREEMPT,
        (job(annotations=asked(GRACE + 1), pdb=True),),
        "blocked",
        "PodDisruptionBudget",
        grace=GRACE_BY_ID,
        check=not_evicted,
    ),
    Row("evict/pod-gone", PREEMPT_NOW, (), "done", "pod is gone"),
    Row(
        "evict/gone-at-eviction",
        PREEMPT_NOW,
        (job(),),
        "done",
        "pod is gone",
        fail={"evict_pod": ApiError(404, "Not Found", 'pods "job" not found')},
    ),
    Row("evict/terminating", PREEMPT_NOW, (job(deleting=True),), "done", "pod is terminating"),
    Row(
        "evict/server-error",
        PREEMPT_NOW,
        (job(),),
        "error",
        "500",
        fail={"evict_pod": ApiError(500, "Internal Server Error")},
    ),
    Row("reclaim/evicts", RECLAIM, (job(),), "done", "evicted", ("evict_pod",), check=evicted),
    Row(
        "reclaim/pdb",
        RECLAIM,
        (job(pdb=True),),
        "blocked",
        "PodDisruptionBudget",
        check=not_evicted,
    ),
    Row(
        "move/annotates-then-evicts",
        MOVE,
        (job(annotations=asked(GRACE + 1)),),
        "done",
        "evicted",
        ("annotate_pod", "evict_pod"),
        grace=GRACE_BY_ID,
        check=moved,
    ),
    Row(
        "move/already-annotated",
        MOVE,
        (job(annotations=asked(GRACE + 1, **{C.MOVE_TO_ANN: "gpu-2"})),),
        "done",
        "evicted",
        ("evict_pod",),
        grace=GRACE_BY_ID,
        check=moved,
    ),
    Row(
        "move/grace-left",
        MOVE,
        (job(annotations=asked(10)),),
        "waiting",
        "290s left",
        grace=GRACE_BY_ID,
        check=not_evicted,
    ),
    Row(
        "move/pdb",
        MOVE,
        (job(annotations=asked(GRACE + 1), pdb=True),),
        "blocked",
        "PodDisruptionBudget",
        ("annotate_pod",),
        grace=GRACE_BY_ID,
        changed=False,
        check=not_evicted,
    ),
    # moves that land: the pod's Job is told, before the eviction, where its next pod goes
    Row(
        "move/reserves-the-jobs-next-pod",
        MOVE,
        (TRAIN, jobs_pod(annotations=asked(GRACE + 1))),
        "done",
        f"evicted; {RESERVED_MSG}",
        ("annotate_pod", "annotate_job", "evict_pod"),
        grace=GRACE_BY_ID,
        check=moved_and_job_reserved(),
    ),
    Row(
        # retried after a PodDisruptionBudget refused: the reservation is kept as it is
        "move/job-already-reserved",
        MOVE,
        (
            Job("train", annotations={C.NEXT_POD_RESERVED_ANN: f"gpu-2:2,3@{ago(60)}"}),
            jobs_pod(annotations=asked(GRACE + 1, **{C.MOVE_TO_ANN: "gpu-2"})),
        ),
        "done",
        RESERVED_MSG,
        ("evict_pod",),
        grace=GRACE_BY_ID,
        check=moved_and_job_reserved(f"gpu-2:2,3@{ago(60)}"),
    ),
    Row(
        "move/job-reserved-for-other-cards",
        MOVE,
        (
            Job("train", annotations={C.NEXT_POD_RESERVED_ANN: f"gpu-2:0,1@{ago(60)}"}),
            jobs_pod(annotations=asked(GRACE + 1, **{C.MOVE_TO_ANN: "gpu-2"})),
        ),
        "done",
        RESERVED_MSG,
        ("annotate_job", "evict_pod"),
        grace=GRACE_BY_ID,
        check=moved_and_job_reserved(),
    ),
    Row(
        # honoured only for pods created within the TTL of its time: renewed past half of it,
        # so the pod this eviction makes room for has at least the other half
        "move/job-reservation-renewed-past-half-its-ttl",
        MOVE,
        (
            Job(
                "train",
                annotations={
                    C.NEXT_POD_RESERVED_ANN: "gpu-2:2,3@"
                    + ago(C.NEXT_POD_RESERVATION_TTL_SECONDS / 2 + 1)
                },
            ),
            jobs_pod(annotations=asked(GRACE + 1, **{C.MOVE_TO_ANN: "gpu-2"})),
        ),
        "done",
        RESERVED_MSG,
        ("annotate_job", "evict_pod"),
        grace=GRACE_BY_ID,
        check=moved_and_job_reserved(),
    ),
    Row(
        "move/job-reservation-unreadable",
        MOVE,
        (
            Job("train", annotations={C.NEXT_POD_RESERVED_ANN: "gpu-2:2,3@yesterday"}),
            jobs_pod(annotations=asked(GRACE + 1, **{C.MOVE_TO_ANN: "gpu-2"})),
        ),
        "done",
        RESERVED_MSG,
        ("annotate_job", "evict_pod"),
        grace=GRACE_BY_ID,
        check=moved_and_job_reserved(),
    ),
    Row(
        # a pod outlives its deleted Job until the garbage collector gets to it (on a server the
        # collector races the row: in memory only)
        "move/job-gone",
        MOVE,
        (jobs_pod(annotations=asked(GRACE + 1)),),
        "done",
        f"evicted ({JOB_GONE_MSG})",
        ("annotate_pod", "evict_pod"),
        grace=GRACE_BY_ID,
        check=moved,
    ),
    Row(
        "move/job-deleted-before-the-patch",
        MOVE,
        (TRAIN, jobs_pod(annotations=asked(GRACE + 1))),
        "done",
        JOB_GONE_MSG,
        ("annotate_pod", "evict_pod"),
        grace=GRACE_BY_ID,
        fail={"annotate_job": ApiError(404, "Not Found", 'jobs.batch "train" not found')},
        check=moved,
    ),
    Row(
        "move/job-server-error",
        MOVE,
        (TRAIN, jobs_pod(annotations=asked(GRACE + 1))),
        "error",
        "500",
        ("annotate_pod",),
        grace=GRACE_BY_ID,
        fail={"annotate_job": ApiError(500, "Internal Server Error")},
        check=not_evicted,
    ),
    Row(
        # a ReplicaSet's replacement is admitted like any new pod: nothing reserved, no Job read
        "move/replicaset-pod-not-reserved",
        MOVE,
        (
            ReplicaSet("serve-7d9f"),
            Pod(
                "job",
                owners=(Owner("ReplicaSet", "serve-7d9f", controller=False),),
                annotations=asked(GRACE + 1),
            ),
        ),
        "done",
        "evicted",
        ("annotate_pod", "evict_pod"),
        grace=GRACE_BY_ID,
        check=moved,
    ),
    Row(
        "move/job-grace-left",
        MOVE,
        (TRAIN, jobs_pod(annotations=asked(10))),
        "waiting",
        "290s left",
        grace=GRACE_BY_ID,
        check=lambda p: (not_evicted(p), job_reserved(None)(p)),
    ),
    Row(
        # the reservation stays for the retry, which leaves it as it is
        "move/job-pdb",
        MOVE,
        (TRAIN, jobs_pod(annotations=asked(GRACE + 1), pdb=True)),
        "blocked",
        "PodDisruptionBudget",
        ("annotate_pod", "annotate_job"),
        grace=GRACE_BY_ID,
        changed=False,
        check=held_and_job_reserved,
    ),
    Row(
        # preemption and reclaim free the cards for someone else: nothing is reserved
        "preempt/jobs-pod-not-reserved",
        PREEMPT_NOW,
        (TRAIN, jobs_pod()),
        "done",
        "evicted",
        ("evict_pod",),
        check=lambda p: (evicted(p), job_reserved(None)(p)),
    ),
    # a Job's gang is stopped by suspending the Job: the Job controller deletes its pods (not
    # counted against backoffLimit) and creates none until gpupool resumes it. The rows' Jobs
    # are managed by no one on a server, so the pod stays: test_handlers_api.py shows the real
    # Job controller stopping it.
    Row(
        "suspend/suspends-the-job",
        PREEMPT_JOB_NOW,
        (TRAIN, jobs_pod()),
        "done",
        SUSPENDED_MSG,
        ("set_job_suspend",),
        budget=1,
        check=suspended_not_evicted(),
    ),
    Row(
        # a recovery (its gang lost a member) writes the Job's recovery count with the
        # suspension, in the same patch
        "suspend/recovery-writes-its-count",
        RECLAIM_JOB.model_copy(update={"lost": True, "recoveries": 2, "depends_on": ()}),
        (TRAIN, jobs_pod()),
        "done",
        SUSPENDED_MSG,
        ("set_job_suspend",),
        budget=1,
        check=lambda p: (
            suspended_not_evicted()(p),
            p.job_annotations("train")[C.RECOVERIES_ANN] == "2" or _fail("no recoveries count"),
        ),
    ),
    Row(
        "suspend/after-the-grace-period",
        PREEMPT_JOB,
        (TRAIN, jobs_pod(annotations=asked(GRACE + 1))),
        "done",
        SUSPENDED_MSG,
        ("set_job_suspend",),
        grace=GRACE_BY_ID,
        budget=1,
        check=suspended_not_evicted(),
    ),
    Row(
        "suspend/grace-left",
        PREEMPT_JOB,
        (TRAIN, jobs_pod(annotations=asked(100))),
        "waiting",
        "checkpoint grace period: 200s left",
        grace=GRACE_BY_ID,
        budget=0,
        check=lambda p: (not_evicted(p), job_suspended(None, suspended=False)(p)),
    ),
    Row(
        "suspend/reclaim",
        RECLAIM_JOB,
        (TRAIN, jobs_pod()),
        "done",
        SUSPENDED_MSG,
        ("set_job_suspend",),
        budget=1,
        check=suspended_not_evicted(),
    ),
    Row(
        # the Job controller deletes a suspended Job's pods without the Eviction API: no
        # PodDisruptionBudget is consulted
        "suspend/no-pdb-consulted",
        PREEMPT_JOB_NOW,
        (TRAIN, jobs_pod(pdb=True)),
        "done",
        SUSPENDED_MSG,
        ("set_job_suspend",),
        budget=1,
        check=suspended_not_evicted(),
    ),
    Row(
        # another pod of the same gang came first (or the Job controller has not stopped this
        # one yet): each pod stopped is one entry of the budget, nothing is written again
        "suspend/already-suspended-by-gpupool",
        PREEMPT_JOB_NOW,
        (Job("train", annotations=SUSPENDED_BY_US, suspended=True), jobs_pod()),
        "done",
        f"Job train already suspended by gpupool at {ago(30)}",
        budget=1,
        check=suspended_not_evicted(ago(30)),
    ),
    Row(
        "suspend/suspended-by-someone-else",
        PREEMPT_JOB_NOW,
        (Job("train", suspended=True), jobs_pod()),
        "done",
        "already suspended by someone else",
        budget=1,
        check=lambda p: (not_evicted(p), job_suspended(None)(p)),
    ),
    Row(
        # the Job was deleted (its pods outlive it until the garbage collector comes): evicted
        "suspend/job-gone",
        PREEMPT_JOB_NOW,
        (job(),),
        "done",
        "evicted (its Job train is gone: the pod is evicted instead)",
        ("evict_pod",),
        budget=1,
        check=evicted,
    ),
    Row(
        "suspend/job-deleted-before-the-patch",
        PREEMPT_JOB_NOW,
        (TRAIN, jobs_pod()),
        "done",
        "evicted (its Job train is gone",
        ("evict_pod",),
        fail={"set_job_suspend": ApiError(404, "Not Found", 'jobs.batch "train" not found')},
        budget=1,
        check=evicted,
    ),
    Row(
        "suspend/job-gone-pdb",
        PREEMPT_JOB_NOW,
        (job(pdb=True),),
        "blocked",
        "PodDisruptionBudget",
        budget=1,
        check=not_evicted,
    ),
    Row("suspend/pod-gone", PREEMPT_JOB_NOW, (TRAIN,), "done", "pod is gone", budget=0),
    Row(
        "suspend/pod-terminating",
        PREEMPT_JOB_NOW,
        (TRAIN, jobs_pod(deleting=True)),
        "done",
        "pod is terminating",
        budget=0,
        check=job_suspended(None, suspended=False),
    ),
    Row(
        "suspend/server-error",
        PREEMPT_JOB_NOW,
        (TRAIN, jobs_pod()),
        "error",
        "500",
        fail={"set_job_suspend": ApiError(500, "Internal Server Error")},
        budget=1,
        check=lambda p: (not_evicted(p), job_suspended(None, suspended=False)(p)),
    ),
    Row(
        # a move must land where the plan meant: its pod is evicted (the planner never gives a
        # move `suspend_job`; were it given, it is ignored)
        "suspend/move-evicts",
        MOVE.model_copy(update={"suspend_job": "train"}),
        (TRAIN, jobs_pod(annotations=asked(GRACE + 1))),
        "done",
        f"evicted; {RESERVED_MSG}",
        ("annotate_pod", "annotate_job", "evict_pod"),
        grace=GRACE_BY_ID,
        budget=1,
        check=lambda p: (moved_and_job_reserved()(p), job_suspended(None, suspended=False)(p)),
    ),
]


def resumed_keeping_others(p: Probe) -> None:
    job_suspended(None, suspended=False)(p)
    ann = p.job_annotations("train")
    assert ann is not None and ann.get("keep") == "k", ann


RESUMED_MSG = f"resumed Job train (suspended at {ago(600)}): the Job controller creates its pods"

RESUME_ROWS = [
    Row(
        "resume/ours",
        RESUME,
        (Job("train", annotations={C.SUSPENDED_BY_ANN: ago(600), "keep": "k"}, suspended=True),),
        "done",
        RESUMED_MSG,
        ("set_job_suspend",),
        check=resumed_keeping_others,
    ),
    Row(
        "resume/someone-elses",
        RESUME,
        (Job("train", suspended=True),),
        "skipped",
        "suspended by someone else",
        check=job_suspended(None),
    ),
    Row(
        "resume/not-suspended",
        RESUME,
        (TRAIN,),
        "done",
        "Job is not suspended: nothing to resume",
        check=job_suspended(None, suspended=False),
    ),
    Row("resume/job-gone", RESUME, (), "done", "Job is gone"),
    Row(
        "resume/job-deleted-before-the-patch",
        RESUME,
        (Job("train", annotations=SUSPENDED_BY_US, suspended=True),),
        "done",
        "Job is gone",
        fail={"set_job_suspend": ApiError(404, "Not Found", 'jobs.batch "train" not found')},
    ),
    Row(
        "resume/server-error",
        RESUME,
        (Job("train", annotations=SUSPENDED_BY_US, suspended=True),),
        "error",
        "500",
        fail={"set_job_suspend": ApiError(500, "Internal Server Error")},
        check=job_suspended(ago(30)),
    ),
]

SCALE_ROWS = [
    Row("scale/at-target", SCALE, (Workload("serve", 3),), "done", "already 3 replicas"),
    Row(
        "scale/changed-since-plan",
        SCALE,
        (Workload("serve", 4),),
        "skipped",
        "replicas changed to 4 since the plan",
    ),
    Row(
        "scale/up",
        SCALE,
        (Workload("serve", 2, annotations={"keep": "me"}),),
        "done",
        "2 -> 3 replicas",
        ("scale_workload",),
        check=scaled("Deployment", "serve", 3),
    ),
    Row(
        "scale/statefulset-down",
        SCALE_STS,
        (
            Workload(
                "db", 3, kind="StatefulSet", annotations={"keep": "me", C.LAST_SCALE_ANN: ago(7200)}
            ),
        ),
        "done",
        "3 -> 1 replicas",
        ("scale_workload",),
        check=scaled("StatefulSet", "db", 1),
    ),
    Row("scale/kind-differs", SCALE, (Workload("serve", 2, kind="StatefulSet"),), "error", "404"),
    Row("scale/missing", SCALE, (), "error", "404"),
    Row(
        "scale/conflict",
        SCALE,
        (Workload("serve", 2),),
        "error",
        "409",
        fail={"scale_workload": ApiError(409, "Conflict", "the object has been modified")},
    ),
]

# ---------------------------------------------------------------------- autoscaler envelopes
HPA, SO = "HorizontalPodAutoscaler", "ScaledObject"
ENVELOPE = SetScaleEnvelope(
    id=f"scale-envelope:{NS}/serve",
    target=f"{NS}/serve",
    reason="queue 40/replica > 10",
    autoscaler_kind=HPA,
    workload_kind="Deployment",
    workload="serve",
    from_min=1,
    to_min=2,
    from_max=4,
    to_max=6,
    policy="queue",
)
ENVELOPE_SO = ENVELOPE.model_copy(update={"autoscaler_kind": SO, "from_min": 0})


def envelope_is(kind: str, lo: int, hi: int, stamped: bool = True):
    def check(p: Probe) -> None:
        a = p.ops.read_autoscaler(kind, NS, "serve")  # type: ignore[arg-type]
        assert a is not None and (a.min_replicas, a.max_replicas) == (lo, hi)
        if stamped:  # the cooldown's clock, on the autoscaler (never on the workload)
            mem = p.ops.autoscalers[(kind, NS, "serve")]  # type: ignore[attr-defined]
            assert mem.body["annotations"][C.LAST_SCALE_ANN] == NOW.isoformat()

    return check


ENVELOPE_ROWS = [
    Row(
        "scale-envelope/hpa",
        ENVELOPE,
        (AutoscalerSeed(HPA, "serve", 1, 4), Workload("serve", 3)),
        "done",
        "min/max 1/4 -> 2/6",
        ("set_autoscaler_bounds",),
        check=envelope_is(HPA, 2, 6),
    ),
    Row(
        "scale-envelope/scaledobject",
        ENVELOPE_SO,
        (AutoscalerSeed(SO, "serve", 0, 4),),
        "done",
        "min/max 0/4 -> 2/6",
        ("set_autoscaler_bounds",),
        check=envelope_is(SO, 2, 6),
    ),
    Row(
        "scale-envelope/already-set",
        ENVELOPE,
        (AutoscalerSeed(HPA, "serve", 2, 6),),
        "done",
        "already min 2, max 6",
        check=envelope_is(HPA, 2, 6, stamped=False),
    ),
    Row(
        "scale-envelope/changed-since-plan",
        ENVELOPE,
        (AutoscalerSeed(HPA, "serve", 1, 5),),
        "skipped",
        "min/max changed to 1/5 since the plan",
        check=envelope_is(HPA, 1, 5, stamped=False),
    ),
    Row(
        "scale-envelope/gone",
        ENVELOPE,
        (Workload("serve", 3),),
        "skipped",
        "HorizontalPodAutoscaler serve is gone",
    ),
    Row(
        "scale-envelope/other-target",
        ENVELOPE,
        (AutoscalerSeed(HPA, "serve", 1, 4, target=("StatefulSet", "serve")),),
        "skipped",
        "now scales StatefulSet serve",
        check=envelope_is(HPA, 1, 4, stamped=False),
    ),
    Row(
        "scale-envelope/keda-made-hpa",
        ENVELOPE,
        (AutoscalerSeed(HPA, "serve", 1, 4, owner="ScaledObject/serve"),),
        "skipped",
        "is managed by ScaledObject/serve (KEDA)",
        check=envelope_is(HPA, 1, 4, stamped=False),
    ),
    Row(
        "scale-envelope/conflict",
        ENVELOPE,
        (AutoscalerSeed(HPA, "serve", 1, 4),),
        "error",
        "409",
        fail={"set_autoscaler_bounds": ApiError(409, "Conflict", "the object has been modified")},
    ),
]

# ---------------------------------------------------------------------- admission
GATE = C.ADMISSION_GATE
OTHER_GATE = "kueue.x-k8s.io/admission"
ADMIT = Admit(
    id=f"admit:{NS}/train",
    target=f"{NS}/train",
    reason="team-a's gang train fits on node-a and node-b",
    namespace=NS,
    pods=(
        PodAdmission(name="p-0", node="node-a", gpus=(0, 1)),
        PodAdmission(name="p-1", node="node-b", gpus=(2, 3)),
    ),
)
ADMIT_AFTER = ADMIT.model_copy(update={"after": (f"{NS}/victim",)})
ADMIT_ONE = ADMIT.model_copy(update={"pods": ADMIT.pods[:1]})
ADMITTED_MSG = "admitted 2 pod(s): p-0 -> node-a, p-1 -> node-b"
RESERVED = {"p-0": "node-a:0,1", "p-1": "node-b:2,3"}
PLACED = {"p-0": ("node-a", "0,1"), "p-1": ("node-b", "2,3")}
OWN_TERM = {
    "matchExpressions": [
        {"key": C.PRODUCT_LABEL, "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}
    ]
}


def pin(node: str) -> dict:
    return {"key": "metadata.name", "operator": "In", "values": [node]}


def gated(name: str, *gates: str, **kw) -> Pod:
    """A pending pod gpupool's admission policy gated (and `gates` of other systems)."""
    return Pod(name, node=None, gates=(GATE, *gates), **kw)


def admitted(name: str, node: str, gpus: str) -> Pod:
    """A pod this step admitted in an earlier run: no gate, pinned, annotated."""
    return Pod(
        name,
        node=None,
        annotations={
            C.RESERVED_ANN: f"{node}:{gpus}",
            C.ADMITTED_ANN: node,
            C.INTENDED_GPUS_ANN: gpus,
        },
        affinity=({"matchFields": [pin(node)]},),
    )


RESERVED_GANG = tuple(gated(n, annotations={C.RESERVED_ANN: r}) for n, r in RESERVED.items())


def reserved_only(*names: str):
    def check(p: Probe) -> None:
        for name in names:
            pod = p.pod(name)
            assert pod is not None and GATE in pod.gates, name
            assert pod.annotations[C.RESERVED_ANN] == RESERVED[name]
            assert C.ADMITTED_ANN not in pod.annotations and p.pod_terms(name) == []

    return check


def gang_admitted(p: Probe) -> None:
    for name, (node, gpus) in PLACED.items():
        pod = p.pod(name)
        assert pod is not None and pod.gates == (), (name, pod)
        assert pod.annotations[C.ADMITTED_ANN] == node
        assert pod.annotations[C.INTENDED_GPUS_ANN] == gpus
        assert pod.annotations[C.RESERVED_ANN] == f"{node}:{gpus}"
        assert p.pod_terms(name) == [{"matchFields": [pin(node)]}]


def nothing_written(name: str):
    def check(p: Probe) -> None:
        pod = p.pod(name)
        assert pod is not None and pod.gates == (GATE,) and pod.annotations == {}

    return check


def untouched_ungated(p: Probe) -> None:
    """p-0 reserved, still gated; p-1 (ungated by someone else) as it was."""
    reserved_only("p-0")(p)
    pod = p.pod("p-1")
    assert pod is not None and pod.gates == () and p.pod_terms("p-1") == []
    assert not {C.RESERVED_ANN, C.ADMITTED_ANN} & set(pod.annotations)


def kept_other_gate(p: Probe) -> None:
    reserved_only("p-0")(p)
    pod = p.pod("p-1")
    assert pod is not None and pod.gates == (GATE, OTHER_GATE) and p.pod_terms("p-1") == []


def hold_over(p: Probe) -> None:
    """A pod a Hold had said waits: once admitted, its condition says so."""
    pod = p.pod("p-0")
    assert pod is not None and pod.gates == ()
    cond = pod.condition(C.ADMITTED_CONDITION)
    assert cond is not None
    assert (cond.status, cond.reason, cond.message) == ("True", "Admitted", "admitted to node-a")


def own_affinity_kept(p: Probe) -> None:
    pod = p.pod("p-0")
    assert pod is not None and pod.gates == ()
    assert p.pod_terms("p-0") == [{**OWN_TERM, "matchFields": [pin("node-a")]}]


ADMIT_ROWS = [
    Row(
        "admit/fresh-gang",
        ADMIT,
        (gated("p-0"), gated("p-1")),
        "done",
        ADMITTED_MSG,
        ("annotate_pod", "annotate_pod", "admit_pod", "admit_pod"),
        check=gang_admitted,
    ),
    Row(
        "admit/reserved-already",
        ADMIT,
        RESERVED_GANG,
        "done",
        ADMITTED_MSG,
        ("admit_pod", "admit_pod"),
        check=gang_admitted,
    ),
    Row(
        "admit/after-pod-running",
        ADMIT_AFTER,
        (gated("p-0"), gated("p-1"), Pod("victim")),
        "waiting",
        f"waits for {NS}/victim (not evicted yet) to be gone",
        ("annotate_pod", "annotate_pod"),
        check=reserved_only("p-0", "p-1"),
    ),
    Row(
        "admit/after-pod-terminating",
        ADMIT_AFTER,
        (*RESERVED_GANG, Pod("victim", deleting=True)),
        "waiting",
        f"waits for {NS}/victim (terminating) to be gone: kube-scheduler still counts its cards",
        check=reserved_only("p-0", "p-1"),
    ),
    Row(
        "admit/after-pod-gone",
        ADMIT_AFTER,
        RESERVED_GANG,
        "done",
        ADMITTED_MSG,
        ("admit_pod", "admit_pod"),
        check=gang_admitted,
    ),
    Row(
        # a StatefulSet recreates its evicted pod under the same name: unbound, it holds no card
        "admit/after-pod-recreated-unbound",
        ADMIT_AFTER,
        (*RESERVED_GANG, Pod("victim", node=None)),
        "done",
        ADMITTED_MSG,
        ("admit_pod", "admit_pod"),
        check=gang_admitted,
    ),
    Row(
        # kube-scheduler counts no finished pod (its informer lists none)
        "admit/after-pod-finished",
        ADMIT_AFTER,
        (*RESERVED_GANG, Pod("victim", phase="Succeeded", deleting=True)),
        "done",
        ADMITTED_MSG,
        ("admit_pod", "admit_pod"),
        check=gang_admitted,
    ),
    Row(
        "admit/pod-gone",
        ADMIT,
        (gated("p-0"),),
        "skipped",
        f"pod {NS}/p-1 is gone; the gang is planned again next cycle",
        check=nothing_written("p-0"),
    ),
    Row(
        "admit/pod-terminating",
        ADMIT,
        (gated("p-0"), gated("p-1", deleting=True)),
        "skipped",
        f"pod {NS}/p-1 is terminating",
    ),
    Row(
        "admit/ungated-by-someone-else",
        ADMIT,
        (gated("p-0"), Pod("p-1", node=None)),
        "skipped",
        "p-1 was ungated by someone else: left alone, nothing admitted",
        ("annotate_pod",),
        check=untouched_ungated,
    ),
    Row(
        "admit/admitted-elsewhere-before",
        ADMIT,
        (gated("p-0"), admitted("p-1", "node-c", "0,1")),
        "skipped",
        "p-1 was admitted to node-c before: left alone",
        ("annotate_pod",),
        check=reserved_only("p-0"),
    ),
    Row(
        "admit/another-admission-system",
        ADMIT,
        (gated("p-0"), gated("p-1", OTHER_GATE)),
        "skipped",
        f"p-1 is held by another admission system ({OTHER_GATE})",
        ("annotate_pod", "annotate_pod"),
        check=kept_other_gate,
    ),
    Row(
        "admit/already-admitted",
        ADMIT,
        (admitted("p-0", "node-a", "0,1"), admitted("p-1", "node-b", "2,3")),
        "done",
        f"already {ADMITTED_MSG}",
        check=gang_admitted,
    ),
    Row(
        "admit/half-admitted",
        ADMIT,
        (admitted("p-0", "node-a", "0,1"), RESERVED_GANG[1]),
        "done",
        ADMITTED_MSG,
        ("admit_pod",),
        check=gang_admitted,
    ),
    Row(
        "admit/keeps-the-pods-own-affinity",
        ADMIT_ONE,
        (gated("p-0", affinity=(OWN_TERM,)),),
        "done",
        "admitted 1 pod(s): p-0 -> node-a",
        ("admit_pod",),  # one pod admitted at once: no reservation needed
        check=own_affinity_kept,
    ),
    Row(
        "admit/clears-the-hold",
        ADMIT_ONE,
        (
            gated(
                "p-0", conditions=(PodCondition(C.ADMITTED_CONDITION, "False", "W", "w", ago(9)),)
            ),
        ),
        "done",
        "admitted 1 pod(s): p-0 -> node-a",
        ("admit_pod", "set_pod_condition"),
        check=hold_over,
    ),
    Row(
        "admit/refused",
        ADMIT,
        RESERVED_GANG,
        "failed",
        f'pod {NS}/p-0: the API server refused the admission: Pod "p-0": spec: Forbidden',
        fail={"admit_pod": ApiError(422, "Unprocessable Entity", 'Pod "p-0": spec: Forbidden')},
    ),
    Row(
        "admit/gone-at-the-patch",
        ADMIT,
        RESERVED_GANG,
        "skipped",
        f"pod {NS}/p-0 is gone",
        fail={"admit_pod": ApiError(404, "Not Found", 'pods "p-0" not found')},
    ),
    Row(
        "admit/conflict",
        ADMIT,
        RESERVED_GANG,
        "error",
        "409",
        fail={"admit_pod": ApiError(409, "Conflict", "the object has been modified")},
    ),
]

HOLD = Hold(
    id=f"hold:{NS}/p-0",
    target=f"{NS}/p-0",
    reason="team-a is at its cap",
    code="held-cap",
    message="team team-a would use 10 GPUs, over its cap of 8",
)


def held_cond(message: str = HOLD.message, *, since: float = 600, status: str = "False"):
    return PodCondition(C.ADMITTED_CONDITION, status, "HeldCap", message, ago(since))


def held(since: float):
    """The condition says HOLD's message; its status last changed `since` seconds ago."""

    def check(p: Probe) -> None:
        pod = p.pod("p-0")
        assert pod is not None
        cond = pod.condition(C.ADMITTED_CONDITION)
        assert cond is not None
        assert (cond.status, cond.reason, cond.message) == ("False", "HeldCap", HOLD.message)
        assert parse_time(cond.last_transition_time) == NOW - timedelta(seconds=since)

    return check


def no_held_condition(p: Probe) -> None:
    pod = p.pod("p-0")
    assert pod is not None and pod.condition(C.ADMITTED_CONDITION) is None


HOLD_ROWS = [
    Row(
        "hold/set",
        HOLD,
        (gated("p-0"),),
        "done",
        "held: team team-a",
        ("set_pod_condition",),
        check=held(0),
    ),
    Row(
        "hold/same-message",
        HOLD,
        (gated("p-0", conditions=(held_cond(),)),),
        "done",
        "already held",
        check=held(600),
    ),
    Row(
        "hold/new-message-keeps-the-transition-time",
        HOLD,
        (gated("p-0", conditions=(held_cond("team team-a would use 9 GPUs"),)),),
        "done",
        "held: team team-a would use 10 GPUs",
        ("set_pod_condition",),
        check=held(600),
    ),
    Row(
        "hold/from-true",
        HOLD,
        (gated("p-0", conditions=(held_cond("admitted", status="True"),)),),
        "done",
        "held:",
        ("set_pod_condition",),
        check=held(0),
    ),
    Row(
        "hold/admitted-meanwhile",
        HOLD,
        (admitted("p-0", "node-a", "0,1"),),
        "done",
        "admitted meanwhile",
        check=no_held_condition,
    ),
    Row("hold/pod-gone", HOLD, (), "done", "pod is gone"),
    Row(
        "hold/gone-at-the-patch",
        HOLD,
        (gated("p-0"),),
        "done",
        "pod is gone",
        fail={"set_pod_condition": ApiError(404, "Not Found", 'pods "p-0" not found')},
    ),
]

QUOTA_ROWS = [
    Row(
        "quota/namespace-missing",
        QUOTA_NO_NS,
        (),
        "blocked",
        "namespace gpupool-absent does not exist",
    ),
    Row("quota/create", QUOTA, (), "done", "applied", ("server_side_apply",), check=quota_applied),
    Row(
        "quota/forbidden",
        QUOTA,
        (),
        "error",
        "403",
        fail={"server_side_apply": ApiError(403, "Forbidden")},
    ),
]

PRIORITY_CLASS_ROWS = [
    Row(
        "priority-class/create",
        PC,
        (),
        "done",
        "applied",
        ("server_side_apply",),
        check=priority_class_is(1000),
    ),
    Row(
        "priority-class/same",
        PC,
        (PriorityClass(PC.target, 1000),),
        "done",
        "applied",
        ("server_side_apply",),
        check=priority_class_is(1000),
    ),
    Row(
        "priority-class/value-changed",
        PC,
        (PriorityClass(PC.target, 500),),
        "done",
        "applied",
        ("delete_priority_class", "server_side_apply"),
        check=priority_class_is(1000),
    ),
    Row(
        "priority-class/policy-changed",
        PC,
        (PriorityClass(PC.target, 1000, "Never"),),
        "done",
        "applied",
        ("delete_priority_class", "server_side_apply"),
        check=priority_class_is(1000),
    ),
    Row(
        # a class of that name someone else made: never changed, never deleted (issue 16)
        "priority-class/foreign",
        PC,
        (PriorityClass(PC.target, 500, managed_by=""),),
        "skipped",
        "is not gpupool's (no app.kubernetes.io/managed-by label)",
        (),
        check=priority_class_is(500),
    ),
    Row(
        "priority-class/another-manager",
        PC,
        (PriorityClass(PC.target, 1000, managed_by="helm"),),
        "skipped",
        "is not gpupool's (managed by helm)",
        (),
        check=priority_class_is(1000),
    ),
    Row(
        "priority-class/global-default",
        PC_DEFAULT,
        (),
        "done",
        "applied",
        ("server_side_apply",),
        check=priority_class_is(1000, default=True),
    ),
    Row(
        # the API server admits one globalDefault class (Priority admission): 403
        "priority-class/global-default-taken",
        PC_DEFAULT,
        (PriorityClass("gpupool-site-default", 5, global_default=True),),
        "error",
        "403",
    ),
]


def quota_gone(p: Probe) -> None:
    assert p.quota("gpu-quota") is None


def quota_kept(p: Probe) -> None:
    assert p.quota("gpu-quota") is not None


def priority_class_gone(p: Probe) -> None:
    assert p.priority_class(PC.target) is None


PRUNE_ROWS = [
    Row(
        "prune-quota/ours",
        PRUNE_QUOTA,
        (Quota("gpu-quota"),),
        "done",
        "deleted",
        ("delete_resource_quota",),
        check=quota_gone,
    ),
    Row("prune-quota/gone", PRUNE_QUOTA, (), "done", "already gone", (), check=quota_gone),
    Row(
        # never delete what gpupool did not make, even if the plan asks
        "prune-quota/foreign",
        PRUNE_QUOTA,
        (Quota("gpu-quota", managed_by=""),),
        "skipped",
        "is not gpupool's (no app.kubernetes.io/managed-by label)",
        (),
        check=quota_kept,
    ),
    Row(
        "prune-quota/another-manager",
        PRUNE_QUOTA,
        (Quota("gpu-quota", managed_by="helm"),),
        "skipped",
        "is not gpupool's (managed by helm)",
        (),
        check=quota_kept,
    ),
    Row(
        "prune-quota/gone-at-the-delete",
        PRUNE_QUOTA,
        (Quota("gpu-quota"),),
        "done",
        "already gone",
        fail={"delete_resource_quota": ApiError(404, "Not Found")},
    ),
    Row(
        "prune-quota/forbidden",
        PRUNE_QUOTA,
        (Quota("gpu-quota"),),
        "error",
        "403",
        fail={"delete_resource_quota": ApiError(403, "Forbidden")},
    ),
    Row(
        "prune-priority-class/ours",
        PRUNE_PC,
        (PriorityClass(PC.target, 1000),),
        "done",
        "deleted",
        ("delete_priority_class",),
        check=priority_class_gone,
    ),
    Row(
        "prune-priority-class/gone",
        PRUNE_PC,
        (),
        "done",
        "already gone",
        (),
        check=priority_class_gone,
    ),
    Row(
        "prune-priority-class/foreign",
        PRUNE_PC,
        (PriorityClass(PC.target, 500, managed_by=""),),
        "skipped",
        "is not gpupool's (no app.kubernetes.io/managed-by label)",
        (),
        check=priority_class_is(500),
    ),
    Row(
        "prune-priority-class/gone-at-the-delete",
        PRUNE_PC,
        (PriorityClass(PC.target, 1000),),
        "done",
        "already gone",
        fail={"delete_priority_class": ApiError(404, "Not Found")},
    ),
]

# ---------------------------------------------------------------------- Kueue objects (issue 14)
CQ_SPEC = {
    "cohortName": "gpupool",
    "resourceGroups": [
        {
            "coveredResources": ["nvidia.com/gpu"],
            "flavors": [
                {
                    "name": "gpupool-a100",
                    "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}],
                }
            ],
        }
    ],
}
APPLY_CQ = ApplyKueueObject(
    id="kueue:ClusterQueue:gpupool-team-a",
    target="gpupool-team-a",
    reason="the Quota team-a",
    object_kind="ClusterQueue",
    name="gpupool-team-a",
    verb="create",
    spec=CQ_SPEC,
)
APPLY_LQ = ApplyKueueObject(
    id=f"kueue:LocalQueue:{NS}/gpupool",
    target=f"{NS}/gpupool",
    reason="team namespace",
    object_kind="LocalQueue",
    namespace=NS,
    name="gpupool",
    verb="create",
    spec={"clusterQueue": "gpupool-team-a"},
)
PRUNE_CQ = PruneKueueObject(
    id="prune-kueue:ClusterQueue:gpupool-team-a",
    target="gpupool-team-a",
    reason="its Quota is gone",
    object_kind="ClusterQueue",
    name="gpupool-team-a",
)
OLD_CQ_SPEC = {
    "cohortName": "gpupool",
    "queueingStrategy": "BestEffortFIFO",
    "resourceGroups": [
        {
            "coveredResources": ["nvidia.com/gpu"],
            "flavors": [
                {
                    "name": "gpupool-a100",
                    "resources": [
                        {"name": "nvidia.com/gpu", "nominalQuota": 2, "borrowingLimit": 6}
                    ],
                }
            ],
        }
    ],
}


def kueue_is(kind: str, name: str, spec: dict | None, ns: str = "", labelled: bool = True):
    def check(p: Probe) -> None:
        obj = p.cluster.kueue.get((kind, ns, name))  # type: ignore[attr-defined]
        if spec is None:
            assert obj is None
            return
        assert obj is not None and obj["spec"] == spec
        labels = obj["metadata"].get("labels") or {}
        assert (labels.get(C.MANAGED_BY_LABEL) == C.MANAGED_BY) == labelled

    return check


KUEUE_ROWS = [
    Row(
        "kueue/create",
        APPLY_CQ,
        (),
        "done",
        "created",
        ("create_kueue_object",),
        check=kueue_is("ClusterQueue", "gpupool-team-a", CQ_SPEC),
    ),
    Row(
        # a merge patch replaces the list whole: the borrowingLimit the policy dropped goes,
        # a default the CRD filled in (queueingStrategy) stays
        "kueue/update-ours",
        APPLY_CQ,
        (Kueue("ClusterQueue", "gpupool-team-a", spec=OLD_CQ_SPEC),),
        "done",
        "updated",
        ("patch_kueue_object",),
        check=kueue_is(
            "ClusterQueue", "gpupool-team-a", {**CQ_SPEC, "queueingStrategy": "BestEffortFIFO"}
        ),
    ),
    Row(
        "kueue/foreign",
        APPLY_CQ,
        (Kueue("ClusterQueue", "gpupool-team-a", spec=OLD_CQ_SPEC, managed_by=""),),
        "skipped",
        "is not gpupool's (no app.kubernetes.io/managed-by label)",
        (),
        check=kueue_is("ClusterQueue", "gpupool-team-a", OLD_CQ_SPEC, labelled=False),
    ),
    Row(
        "kueue/another-manager",
        APPLY_CQ,
        (Kueue("ClusterQueue", "gpupool-team-a", spec=OLD_CQ_SPEC, managed_by="helm"),),
        "skipped",
        "is not gpupool's (managed by helm)",
        (),
    ),
    Row(
        "kueue/local-queue",
        APPLY_LQ,
        (),
        "done",
        "created",
        ("create_kueue_object",),
        check=kueue_is("LocalQueue", "gpupool", {"clusterQueue": "gpupool-team-a"}, ns=NS),
    ),
    Row(
        "kueue/local-queue-namespace-missing",
        APPLY_LQ.model_copy(update={"namespace": "nowhere", "target": "nowhere/gpupool"}),
        (),
        "blocked",
        "namespace nowhere does not exist",
    ),
    Row(
        # made meanwhile, or still terminating behind Kueue's resource-in-use finalizer
        "kueue/create-conflict",
        APPLY_CQ,
        (),
        "blocked",
        "exists already",
        fail={"create_kueue_object": ApiError(409, "Conflict", "already exists")},
    ),
    Row(
        "prune-kueue/ours",
        PRUNE_CQ,
        (Kueue("ClusterQueue", "gpupool-team-a", spec=CQ_SPEC),),
        "done",
        "deleted",
        ("delete_kueue_object",),
        check=kueue_is("ClusterQueue", "gpupool-team-a", None),
    ),
    Row("prune-kueue/gone", PRUNE_CQ, (), "done", "already gone", ()),
    Row(
        "prune-kueue/foreign",
        PRUNE_CQ,
        (Kueue("ClusterQueue", "gpupool-team-a", spec=CQ_SPEC, managed_by=""),),
        "skipped",
        "is not gpupool's (no app.kubernetes.io/managed-by label)",
        (),
        check=kueue_is("ClusterQueue", "gpupool-team-a", CQ_SPEC, labelled=False),
    ),
    Row(
        "prune-kueue/gone-at-the-delete",
        PRUNE_CQ,
        (Kueue("ClusterQueue", "gpupool-team-a", spec=CQ_SPEC),),
        "done",
        "already gone",
        fail={"delete_kueue_object": ApiError(404, "Not Found")},
    ),
]

# A partition backend other than the device plugin's registers its handler by name
# (tests/plan/test_partition_seam.py shows one); without one, the change fails and says so.
PARTITION_CHANGE = PartitionChange(
    id=f"partition-change:{NODE}",
    target=NODE,
    reason="gpu0: whole -> shared x4 (pending inference)",
    cards=(CardChange(gpu=0, before="whole", after="shared x4"),),
    backend="unregistered-backend",
    settings={"gpu0": "shared x4"},
)
PARTITION_CHANGE_ROWS = [
    Row(
        "partition-change/unregistered-backend",
        PARTITION_CHANGE,
        (Node(),),
        "failed",
        "no handler is registered for partition backend 'unregistered-backend'",
    ),
]

TABLES = {
    "cordon": CORDON_ROWS,
    "uncordon": UNCORDON_ROWS,
    "label-node": LABEL_ROWS,
    "mig-reconfigure": MIG_ROWS,
    "set-sharing": SHARING_ROWS,
    "partition-change": PARTITION_CHANGE_ROWS,
    "checkpoint": CHECKPOINT_ROWS,
    "evict": EVICT_ROWS,
    "resume": RESUME_ROWS,
    "scale": SCALE_ROWS,
    "scale-envelope": ENVELOPE_ROWS,
    "admit": ADMIT_ROWS,
    "hold": HOLD_ROWS,
    "quota": QUOTA_ROWS,
    "priority-class": PRIORITY_CLASS_ROWS,
    "prune": PRUNE_ROWS,
    "kueue": KUEUE_ROWS,
    "dra": DRA_ROWS,
    "dra-own": DRA_OWN_ROWS,
}
ROWS = {r.id: r for rows in TABLES.values() for r in rows}
assert len(ROWS) == sum(map(len, TABLES.values())), "row ids must be unique"

# ---------------------------------------------------------------------- across the tables
SERVER_SIDE_APPLY = (
    ApplyQuota,
    ApplyPriorityClass,
    ApplyKueueObject,  # a merge patch every time: the planner emits it only on a difference
    ApplyDraObject,  # the same
    TaintDevice,  # the same
)  # an apply every time, by design (idempotent on the server)
