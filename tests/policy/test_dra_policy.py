"""A Pool chooses its partition backend (`spec.backend`, reconciler/policy/models.py); a DRA pool
refuses what NVIDIA's DRA driver v0.4.1 cannot provide, each at its file:line
(reconciler/policy/validate_dra.py)."""

from __future__ import annotations

import pytest

from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.policy.problems import InvalidDesiredState

POOL = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata:
  name: d100
spec:
  gpuModel: A100-SXM4-80GB
  backend: {backend}
  nodeSelector:
    matchLabels:
      gpupool.io/pool: d100
  capacity:
    nodes: 2
    gpusPerNode: 8
  inference:
    minGPUs: 2
    mig:
      layouts:
        - name: d-balanced
          profiles: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]
{extra}"""

SHARED = """\
    shared:
      slicesPerGPU: 4
      memoryPerSlice: 20Gi
"""
PLUGIN = """\
  devicePlugin:
    migStrategy: mixed
"""
KUEUE = """\
apiVersion: gpupool.io/v1alpha1
kind: PriorityPolicy
metadata:
  name: priorities
spec:
  classes:
    - name: prod
      value: 1000
  admission:
    controller: kueue
"""


def problems(backend: str, extra: str = "", more: dict[str, str] | None = None) -> list[str]:
    files = {"pools/d100.yaml": POOL.format(backend=backend, extra=extra), **(more or {})}
    try:
        state = load([SourceFile(n, t) for n, t in files.items()])
    except InvalidDesiredState as exc:
        return [str(p) for p in exc.problems]
    assert state.pools["d100"].spec.backend == backend
    return []


def test_the_default_backend_is_the_device_plugin() -> None:
    text = POOL.format(backend="devicePlugin", extra="").replace("  backend: devicePlugin\n", "")
    state = load([SourceFile("pools/d100.yaml", text)])
    assert state.pools["d100"].spec.backend == "devicePlugin"


def test_a_dra_pool_with_mig_loads() -> None:
    assert problems("dra") == []


@pytest.mark.parametrize(
    ("extra", "more", "where", "words"),
    [
        (SHARED, {}, "pools/d100.yaml:20:5: Pool/d100 spec.inference.shared:", "no shared slices"),
        (PLUGIN, {}, "pools/d100.yaml:20:3: Pool/d100 spec.devicePlugin:", "not served by"),
        ("", {"policies/p.yaml": KUEUE}, "pools/d100.yaml:7:3: Pool/d100 spec.backend:", "kueue"),
    ],
    ids=["shared-slices", "device-plugin-setup", "kueue-mode"],
)
def test_a_dra_pool_refuses_what_the_driver_cannot_provide(extra, more, where, words) -> None:
    found = problems("dra", extra, more)
    assert len(found) == 1, found
    assert found[0].startswith(where) and words in found[0], found[0]
    assert problems("devicePlugin", extra, more) == []


def test_an_unknown_backend_is_a_located_error() -> None:
    found = problems("cdi")
    assert len(found) == 1 and found[0].startswith("pools/d100.yaml:7:"), found


DYNAMIC = """\
  dra:
    mig: dynamic
"""


def test_dynamic_mig_loads_on_a_hopper_dra_pool() -> None:
    text = POOL.format(backend="dra", extra=DYNAMIC).replace("A100-SXM4-80GB", "H100-SXM5-80GB")
    text = text.replace("[3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]", "[3g.40gb, 3g.40gb]")
    state = load([SourceFile("pools/d100.yaml", text)])
    assert state.pools["d100"].spec.dra.mig == "dynamic"
    assert (
        load([SourceFile("pools/d100.yaml", POOL.format(backend="dra", extra=""))])
        .pools["d100"]
        .spec.dra.mig
        == "static"
    )


@pytest.mark.parametrize(
    ("backend", "model", "cut", "words"),
    [
        ("devicePlugin", "H100-SXM5-80GB", "", "use backend: dra"),
        ("dra", "A100-SXM4-80GB", "", "only with a GPU reset"),
        ("dra", "L40S-48GB", "", "has no MIG"),
        ("dra", "H100-SXM5-80GB", "mig", "no inference.mig layouts"),
    ],
    ids=["device-plugin-pool", "ampere", "no-mig", "no-layouts"],
)
def test_dynamic_mig_refuses_what_cannot_work(backend, model, cut, words) -> None:
    text = POOL.format(backend=backend, extra=DYNAMIC).replace("A100-SXM4-80GB", model)
    if cut:
        text = text.split("    mig:\n")[0] + DYNAMIC
    try:
        load([SourceFile("pools/d100.yaml", text)])
        found = []
    except InvalidDesiredState as exc:
        found = [str(p) for p in exc.problems]
    mine = [p for p in found if "spec.dra.mig" in p]
    assert len(mine) == 1 and words in mine[0], found
    assert mine[0].startswith("pools/d100.yaml:"), mine


@pytest.mark.parametrize(
    ("backend", "dra", "words"),
    [
        ("dra", "{admission: allocate}", None),
        ("dra", "{admission: allocate, guard: false}", "dra.guard: true"),
        ("devicePlugin", "{admission: allocate}", "on a DRA pool"),
        ("dra", "{admission: pin, guard: false}", None),
    ],
    ids=["guarded", "unguarded", "device-plugin-pool", "pin-unguarded"],
)
def test_admission_allocate_needs_a_guarded_dra_pool(backend, dra, words) -> None:
    """gpupool writes allocations itself only where its guard keeps every other claim off the
    devices (`spec.dra.admission`, policy/validate_dra.py)."""
    found = problems(backend, f"  dra: {dra}\n")
    mine = [p for p in found if "spec.dra.admission" in p]
    if words is None:
        assert found == []
        return
    assert len(mine) == 1 and words in mine[0], found
    assert mine[0].startswith("pools/d100.yaml:20:9:"), mine  # at the admission key
