"""Write examples/observed.yaml: a realistic snapshot of the cluster the bundled pools describe.

Deterministic; rerun after changing the story below. The story (2026-12-02 14:00 UTC):
- a100: node 1 serves search on 4 MIG cards; vision trains on 4 whole cards; llm-research runs
  low-priority 8-card fine-tunes; spot jobs soak up cards; one fine-tune has sat idle for 2h.
- h100: assistant's chat-llm runs on h100-01, whose two plain cards are shared (the device
  plugin shares every card of a node not in MIG mode) and whose other six are empty MIG cards;
  its queue is long (scale-up due); llm-research runs high-priority pre-training; a new 8-card
  run is pending.
- vision-dev wants 2 more cards but vision is at its cap of 8.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.observe.builders import gpu, hours, mig_pod, node, shared_pod, snapshot, training  # noqa: E402
from reconciler.observe.model import InferenceService, QuotaObject, Request  # noqa: E402
from reconciler.observe.snapshot import dump_snapshot  # noqa: E402
from reconciler.plan.quotas import desired_priority_classes, desired_resource_quotas  # noqa: E402
from reconciler.policy.files import files_from_paths  # noqa: E402
from reconciler.policy.loader import load  # noqa: E402

NOW = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)
A100, H100 = "A100-SXM4-80GB", "H100-SXM5-80GB"
BAL = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]


def build():
    ago = lambda h: NOW - hours(h)  # noqa: E731
    nodes = [
        node(
            "a100-01",
            "a100",
            A100,
            [gpu(i, mig=BAL if i < 4 else None, model=A100) for i in range(8)],
        ),
        *[node(f"a100-0{i}", "a100", A100) for i in range(2, 8)],
        node("a100-08", "a100", A100, [gpu(i, util=0.0) for i in range(8)]),
        node(
            "h100-01",
            "h100",
            H100,
            [gpu(i, shared=8, util=70.0) for i in range(2)]
            + [gpu(i, mig=["4g.40gb", "3g.40gb"], model=H100, util=0.0) for i in range(2, 8)],
        ),
        *[node(f"h100-0{i}", "h100", H100) for i in range(2, 9)],
    ]
    # a100-07: a fine-tune whose cards have been idle for two hours
    nodes[6] = node(
        "a100-07",
        "a100",
        A100,
        [
            gpu(i, util=1.0 if i < 2 else 60.0, idle_since=ago(2) if i < 2 else None)
            for i in range(8)
        ],
    )
    w = []
    # search serving on MIG (a100-01 gpus 0-3): 3g at start 4, 2g at 0, 1g at 2 and 3
    for g in range(4):
        w.append(
            mig_pod(
                "search-serving",
                f"ranker-{g}",
                "a100-01",
                "3g.40gb",
                gpu_index=g,
                start=4,
                started=ago(30),
            )
        )
        w.append(
            mig_pod(
                "search-serving",
                f"embedder-{g}",
                "a100-01",
                "2g.20gb",
                gpu_index=g,
                start=0,
                started=ago(30),
            )
        )
    w.append(
        training(
            "vision",
            "detector-v7",
            "a100-01",
            [4, 5, 6, 7],
            cls="training-high",
            started=ago(20),
            checkpoint=ago(0.2),
        )
    )
    w.append(
        training("llm-research", "sft-llama-70b", "a100-02", 8, started=ago(6), checkpoint=ago(0.3))
    )
    w.append(
        training("llm-research", "sft-mistral", "a100-03", 8, started=ago(3), checkpoint=ago(0.1))
    )
    w.append(
        training(
            "vision",
            "segmenter",
            "a100-04",
            [0, 1, 2, 3],
            cls="training-high",
            started=ago(9),
            checkpoint=ago(0.5),
        )
    )
    for i in range(4, 8):
        w.append(
            training(
                "llm-research",
                f"spot-eval-{i}",
                "a100-04",
                [i],
                cls="spot",
                started=ago(1),
                migratable=True,
            )
        )
    w.append(
        training("llm-research", "dpo-sweep", "a100-05", 8, started=ago(12), checkpoint=ago(0.05))
    )
    w.append(
        training(
            "llm-research",
            "rl-reward",
            "a100-06",
            [0, 1, 2, 3, 4, 5],
            started=ago(2),
            checkpoint=ago(0.4),
        )
    )
    w.append(
        training(
            "llm-research", "stale-notebook", "a100-07", [0, 1], started=ago(5), checkpoint=ago(3)
        )
    )
    w.append(
        training(
            "llm-research",
            "tokenizer-bench",
            "a100-07",
            [2, 3, 4, 5, 6, 7],
            started=ago(1),
            checkpoint=ago(0.2),
        )
    )
    # h100: assistant chat on h100-01's two shared cards (8 slices each, 2 per replica)
    for r in range(6):
        w.append(
            shared_pod("assistant", f"chat-llm-{r}", "h100-01", 2, gpu_index=r % 2, started=ago(48))
        )
    for i in range(2, 6):
        w.append(
            training(
                "llm-research",
                f"pretrain-70b-{i}",
                f"h100-0{i}",
                8,
                cls="training-high",
                started=ago(70),
                checkpoint=ago(0.4),
            )
        )
    w.append(
        training("llm-research", "ablation-a", "h100-06", 8, started=ago(5), checkpoint=ago(0.7))
    )
    w.append(
        training("llm-research", "ablation-b", "h100-07", 8, started=ago(0.1), checkpoint=None)
    )
    w.append(
        training(
            "llm-research",
            "spot-sweep",
            "h100-08",
            [0, 1, 2, 3],
            cls="spot",
            started=ago(2),
            migratable=True,
        )
    )
    # pending demand
    w.append(
        training(
            "llm-research",
            "pretrain-moe",
            None,
            8,
            cls="training-high",
            pool="h100",
            created=ago(0.5),
        )
    )
    w.append(
        training(
            "vision-dev", "vit-ablation", None, 2, cls="training-low", pool="a100", created=ago(1)
        )
    )
    services = [
        InferenceService(
            namespace="assistant",
            name="chat-llm",
            replicas=6,
            ready_replicas=6,
            priority_class="serving",
            replica_request=Request(shared_slices=2),
            pool="h100",
            queue_length=96,
            pending_seconds_p99=45,
            last_scale_at=ago(1),
        ),
        InferenceService(
            namespace="search-serving",
            name="ranker",
            replicas=4,
            ready_replicas=4,
            priority_class="serving",
            replica_request=Request(mig={"3g.40gb": 1}),
            pool="a100",
            queue_length=20,
            last_scale_at=ago(3),
        ),
    ]
    desired = load(files_from_paths(["pools", "policies"]))
    quotas = [
        QuotaObject(namespace=ns, name=name, hard=hard, managed_by="gpupool")
        for (ns, name), hard in desired_resource_quotas(desired).items()
    ]
    # the assistant quota in the cluster predates the last policy change
    quotas = [
        q.model_copy(update={"hard": {**q.hard, "requests.nvidia.com/gpu.shared": "16"}})
        if q.namespace == "assistant"
        else q
        for q in quotas
    ]
    classes = list(desired_priority_classes(desired).values())
    return snapshot(
        NOW,
        nodes,
        w,
        services=services,
        quotas=quotas,
        priority_classes=classes,
        recent_preemptions=[ago(0.5), ago(0.9)],
    )


if __name__ == "__main__":
    out = Path(__file__).resolve().parents[1] / "examples" / "observed.yaml"
    text = (
        "# Observed state of the example cluster (generated by scripts/make_example_snapshot.py).\n"
        + dump_snapshot(build())
    )
    out.write_text(text)
    print(f"wrote {out}")
