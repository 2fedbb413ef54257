"""What gpupool's install makes for NVIDIA's GPU operator (deploy/gpu-operator/): the two
ConfigMaps its components need before they start, and the Helm values that point the operator at
them. Loaded as files (no cluster): they parse, the mig-parted config is valid the way mig-parted
parses it (tests/nvidia/mig_parted_spec.py), the device plugin accepts every config (no
`replicas < 2`: tests/nvidia/device_plugin.py), and every name is the one the controller uses
(`ApplyConfig`, reconciler/apply/configs.py), the RBAC allows and the integration world seeds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from reconciler.apply.configs import (
    ALL_DISABLED,
    DEFAULT_SHARING,
    MIG_CONFIG_KEY,
    MPS_MAX_REPLICAS,
    SHARING_FLAGS,
    render_sharing,
    yaml_text,
)
from reconciler.apply.handlers import ApplyConfig
from reconciler.plan.actions import SetSharing
from tests.nvidia.device_plugin import ConfigError, parse_sharing
from tests.nvidia.mig_parted_spec import SpecError, parse_spec

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
INSTALL = DEPLOY / "gpu-operator"
CFG = ApplyConfig()

# The chart's keys gpupool sets, as NVIDIA/gpu-operator deployments/gpu-operator/values.yaml
# (commit a22dbf67) has them: `mig.strategy` (single | mixed), `migManager.config.{create,
# name, default, data}` ("If name is provided, mig-manager will use this config instead of
# auto-generated one"; default "all-disabled"), `devicePlugin.config.{create, name, default,
# data}`; templates/clusterpolicy.yaml copies them into the ClusterPolicy spec.
CHART_KEYS = {
    "mig": {"strategy"},
    "migManager": {"enabled", "config"},
    "migManager.config": {"create", "name", "default", "data"},
    "devicePlugin": {"enabled", "config"},
    "devicePlugin.config": {"create", "name", "default", "data"},
}


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def config_map(file: str) -> dict:
    (cm,) = docs(INSTALL / file)
    assert cm["apiVersion"] == "v1" and cm["kind"] == "ConfigMap"
    return cm


def test_kustomization_lists_the_config_maps_in_the_operator_namespace():
    (k,) = docs(INSTALL / "kustomization.yaml")
    assert k["namespace"] == CFG.mig_config_namespace
    assert sorted(k["resources"]) == ["device-plugin-config.yaml", "mig-parted-config.yaml"]
    for r in k["resources"]:
        assert (INSTALL / r).is_file(), r
    assert "values.yaml" not in k["resources"]  # Helm's, not kustomize's


def test_mig_parted_config_is_valid_and_has_what_the_operator_labels_with():
    cm = config_map("mig-parted-config.yaml")
    assert (cm["metadata"]["name"], cm["metadata"]["namespace"]) == (
        CFG.mig_config_map,
        CFG.mig_config_namespace,
    )
    assert set(cm["data"]) == {MIG_CONFIG_KEY}  # the operator mounts config.yaml as CONFIG_FILE
    configs = parse_spec(cm["data"][MIG_CONFIG_KEY])
    assert configs == {ALL_DISABLED: [{"devices": "all", "mig-enabled": False, "mig-devices": {}}]}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("mig-configs: {a: [{devices: all, mig-enabled: false}]}\n", "missing 'version'"),
        ("version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n", "version"),
        ("version: v1\nmig-configs: {}\n", "at least one entry"),
        ("version: v1\nmig-configs: {a: []}\n", "at least one entry in 'a'"),
        ("version: v1\nmig-configs: {a: [{devices: all}]}\n", "missing required field"),
        ("version: v1\nmig-configs: {a: [{devices: some, mig-enabled: false}]}\n", "invalid"),
        ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true}]}\n", "mig-devices"),
        (
            "version: v1\nmig-configs: {a: [{devices: [0], mig-enabled: false, "
            "mig-devices: {1g.10gb: 1}}]}\n",
            "included when 'mig-enabled' is false",
        ),
        (
            "version: v1\nmig-configs: {a: [{devices: [0], mig-enabled: true, "
            "mig-devices: {3g40gb: 1}}]}\n",
            "parse",
        ),
        (
            "version: v1\nmig-configs: {a: [{devices: [0], mig-enabled: true, "
            "mig-devices: {1g.10gb: 0}}]}\n",
            "all counts",
        ),
        ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, x: 1}]}\n", "x"),
        ("version: v1\nother: 1\n", "unexpected field: other"),
    ],
)
def test_the_mig_parted_check_refuses_what_mig_parted_refuses(text: str, error: str):
    with pytest.raises(SpecError, match=error):
        parse_spec(text)


def test_the_mig_parted_check_takes_what_gpupool_and_nvidia_write():
    text = (
        "version: v1\nmig-configs:\n"
        "  all-enabled: [{devices: all, mig-enabled: true, mig-devices: {}}]\n"
        "  mixed:\n"
        "  - {devices: [0], mig-enabled: true, mig-devices: {1g.10gb+me: 1, 3g.40gb: 1}}\n"
        "  - {devices: [1, 2], mig-enabled: false}\n"
        "  - {device-filter: ['0x233010DE'], devices: all, mig-enabled: true,"
        " mig-devices: {1c.2g.20gb: 1}}\n"
    )
    assert set(parse_spec(text)) == {"all-enabled", "mixed"}


def test_device_plugin_default_shares_nothing_and_every_config_is_accepted():
    cm = config_map("device-plugin-config.yaml")
    assert (cm["metadata"]["name"], cm["metadata"]["namespace"]) == (
        CFG.sharing_config_map,
        CFG.mig_config_namespace,
    )
    assert DEFAULT_SHARING in cm["data"]
    for key, text in cm["data"].items():
        parse_sharing(text)  # raises where the plugin refuses (replicas < 2, bad version)
        doc = yaml.safe_load(text)
        for kind in ("timeSlicing", "mps"):
            for r in ((doc.get("sharing") or {}).get(kind) or {}).get("resources") or []:
                assert r.get("replicas", 0) >= 2, (key, kind, r)
    assert parse_sharing(cm["data"][DEFAULT_SHARING]) is None  # no sharing at all
    assert "sharing" not in yaml.safe_load(cm["data"][DEFAULT_SHARING])
    assert yaml.safe_load(cm["data"][DEFAULT_SHARING])["flags"]["migStrategy"] == "mixed"


def test_every_sharing_config_gpupool_renders_is_accepted_and_keeps_the_default_flags():
    """Time-slicing configs carry the install's `default` flags (migStrategy mixed), MPS configs
    `none` (the plugin refuses MPS with mixed: main.go `validateFlags`), no `devices` list
    (the plugin ignores it: every card not in MIG mode is shared) and `replicas` >= 2; no
    sharing is no config at all (the label selects `default`), never `replicas: 1`."""
    default = yaml.safe_load(config_map("device-plugin-config.yaml")["data"][DEFAULT_SHARING])
    assert default["flags"] == SHARING_FLAGS["time-slicing"] == {"migStrategy": "mixed"}
    assert SHARING_FLAGS["mps"] == {"migStrategy": "none"}
    assert CFG.sharing_default_config == DEFAULT_SHARING
    for strategy, key in (("time-slicing", "timeSlicing"), ("mps", "mps")):
        for slices in (2, 4, 7, MPS_MAX_REPLICAS):
            a = SetSharing(
                id="set-sharing:n", target="n", reason="r", cards=(), slices=slices,
                strategy=strategy, plain_cards=8,
            )  # fmt: skip
            spec = render_sharing(a)
            assert spec is not None and spec["flags"] == SHARING_FLAGS[strategy]
            (r,) = spec["sharing"][key]["resources"]
            assert "devices" not in r and r["replicas"] == slices >= 2
            got = parse_sharing(yaml_text(spec))
            assert got is not None and (got.replicas, got.rename, got.strategy) == (
                slices,
                True,
                strategy,
            )
    none = SetSharing(id="set-sharing:n", target="n", reason="r", cards=(), plain_cards=8)
    assert render_sharing(none) is None
    with pytest.raises(ConfigError):  # what "no sharing" must never be rendered as
        parse_sharing(TS_ONE)


TS_ONE = (
    "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
    "    - name: nvidia.com/gpu\n      replicas: 1\n"
)


def _keys(values: dict, prefix: str = "") -> list[tuple[str, set[str]]]:
    out = []
    for k, v in values.items():
        if isinstance(v, dict):
            path = f"{prefix}{k}"
            out.append((path, set(v)))
            out += _keys(v, path + ".")
    return out


def test_helm_values_point_the_operator_at_gpupool_configs():
    (values,) = docs(INSTALL / "values.yaml")
    assert values["mig"]["strategy"] == ""  # each node's config decides: MPS needs `none`
    mm, dp = values["migManager"]["config"], values["devicePlugin"]["config"]
    assert (mm["name"], mm["default"], mm["create"]) == (CFG.mig_config_map, ALL_DISABLED, False)
    assert (dp["name"], dp["default"], dp["create"]) == (
        CFG.sharing_config_map,
        DEFAULT_SHARING,
        False,
    )
    assert values["migManager"]["enabled"] and values["devicePlugin"]["enabled"]
    for path, keys in _keys(values):  # no key the chart does not have
        assert keys <= CHART_KEYS[path], (path, keys - CHART_KEYS[path])


def test_the_controller_and_its_rbac_use_the_same_namespace_and_names():
    dep = next(d for d in docs(DEPLOY / "controller.yaml") if d["kind"] == "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--mig-config-namespace={CFG.mig_config_namespace}" in args
    roles = [
        d
        for d in docs(DEPLOY / "rbac.yaml")
        if d["kind"] == "Role" and d["metadata"]["namespace"] == CFG.mig_config_namespace
    ]
    names = {n for r in roles for rule in r["rules"] for n in rule.get("resourceNames", [])}
    assert {CFG.mig_config_map, CFG.sharing_config_map} <= names


def test_the_integration_world_seeds_what_the_install_makes():
    from tests.integration import world

    seeded = {
        "namespace": world.OPERATOR_NS,
        "names": (world.MIG_CM, world.SHARING_CM),
        "mig": {k: yaml.safe_load(v) for k, v in world.MIG_DEFAULTS.items()},
        "sharing": {k: yaml.safe_load(v) for k, v in world.SHARING_DEFAULTS.items()},
    }
    made = {
        "namespace": CFG.mig_config_namespace,
        "names": (CFG.mig_config_map, CFG.sharing_config_map),
        "mig": {
            k: yaml.safe_load(v) for k, v in config_map("mig-parted-config.yaml")["data"].items()
        },
        "sharing": {
            k: yaml.safe_load(v) for k, v in config_map("device-plugin-config.yaml")["data"].items()
        },
    }
    assert made == seeded


def test_docs_name_the_install_files():
    readme, deploy_readme = (ROOT / "README.md").read_text(), (DEPLOY / "README.md").read_text()
    for f in ("kustomization.yaml", "mig-parted-config.yaml", "device-plugin-config.yaml"):
        assert f in deploy_readme, f
    for text in (readme, deploy_readme):
        assert "deploy/gpu-operator/values.yaml" in text
        assert "kubectl create -k deploy/gpu-operator/" in text
