"""Exact admission under DynamicMIG, the executor's selector (reconciler/apply/handlers/
dra_admit.py): a planned dynamic MIG partition has no uuid before the driver makes it, so the
claim's request may take its class's profile on the planned cards only (their `parentUUID`);
both selector forms are gpupool's, so a claim written again drops the earlier one."""

from __future__ import annotations

from reconciler.apply.handlers.dra_admit import _not_gpupools, uuid_selector


def test_dynamic_partitions_are_pinned_by_their_parent_card() -> None:
    got = uuid_selector(("GPU-b/3g.40gb", "GPU-a/3g.40gb", "GPU-a/3g.40gb"))
    assert got == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
        " && device.attributes['gpu.nvidia.com'].parentUUID in ['GPU-a', 'GPU-b']"
    )
    assert uuid_selector(("GPU-a",)).endswith(".uuid in ['GPU-a']")


def test_both_forms_are_recognised_as_gpupool_s() -> None:
    mine = [{"cel": {"expression": uuid_selector(s)}} for s in (("GPU-a",), ("GPU-a/1g.10gb",))]
    theirs = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].brand == 'Nvidia'"}}
    assert _not_gpupools([*mine, theirs]) == [theirs]
