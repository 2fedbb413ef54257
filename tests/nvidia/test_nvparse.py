"""Every config gpupool renders for NVIDIA's node components, given to NVIDIA's own parsers
(tests/nvidia/nvparse: k8s-device-plugin v0.19.3 api/config/v1 with the config checks of its
start-up, mig-parted v0.14.4 api/spec/v1): property-generated device-plugin and mig-parted
configs, and the ones shipped in deploy/. Each test collects its configs first, seeded and
bounded, and hands them to one nvparse process."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.apply.configs import (
    ALL_DISABLED,
    MIG_CONFIG_KEY,
    MPS_MAX_REPLICAS,
    attempt_name,
    config_name,
    merged_mig_config,
    mig_stages,
    render_sharing,
    yaml_text,
)
from reconciler.plan.actions import CardChange, CardLayout, MigReconfigure, SetSharing
from reconciler.policy.catalog import default_catalog
from tests.nvidia import nvparse_run as nv
from tests.nvidia.device_plugin import parse_sharing
from tests.nvidia.mig_parted_spec import parse_spec

CATALOG = default_catalog()
MIG_MODELS = sorted(n for n, m in CATALOG.models.items() if m.mig_capable)
EXAMPLES = settings(max_examples=100, derandomize=True, deadline=None, database=None)
INSTALL = nv.ROOT / "deploy" / "gpu-operator"


def _collect(strategy, examples=EXAMPLES) -> list:
    """The values `strategy` generates (seeded, bounded), to be judged in one batch."""
    out: list = []

    @examples
    @given(strategy)
    def gather(v):
        out.append(v)

    gather()
    return out


sharings = st.builds(
    SetSharing,
    id=st.just("set-sharing:n"),
    target=st.just("n"),
    reason=st.just("r"),
    cards=st.just(()),
    slices=st.integers(2, MPS_MAX_REPLICAS),
    strategy=st.sampled_from(["time-slicing", "mps"]),
    plain_cards=st.integers(0, 16),
)


@st.composite
def layouts(draw, model_name: str) -> tuple[str, ...] | None:
    """A card's layout the catalog can place (None: MIG off)."""
    model = CATALOG.model(model_name)
    if draw(st.booleans()):
        return None
    profiles: list[str] = []
    for p in draw(st.lists(st.sampled_from(sorted(model.profiles)), min_size=1, max_size=7)):
        if CATALOG.place(model, [*profiles, p]) is not None:
            profiles.append(p)
    return tuple(profiles) or None


@st.composite
def reconfigures(draw):
    """A MigReconfigure as the planner emits one, with the node's MIG modes and model cost."""
    model = draw(st.sampled_from(MIG_MODELS))
    n = draw(st.integers(1, 8))
    cards = [CardLayout(gpu=i, profiles=draw(layouts(model))) for i in range(n)]
    changed = draw(st.sets(st.integers(0, n - 1), min_size=1))
    a = MigReconfigure(
        id="mig-reconfigure:n",
        target="n",
        reason="r",
        cards=tuple(CardChange(gpu=g, before="whole", after="MIG") for g in sorted(changed)),
        layout=tuple(cards),
    )
    mig_now = {i: draw(st.booleans()) for i in range(n)}
    return a, draw(st.sampled_from(["card", "node"])), mig_now


def test_every_rendered_device_plugin_config_is_accepted_by_the_plugin():
    """Time-slicing and MPS configs of every slice count: NVIDIA's parser and start-up checks
    accept each (MPS: not with the mixed MIG strategy), and no key is one NVIDIA lacks."""
    items = []
    for i, a in enumerate(_collect(sharings)):
        spec = render_sharing(a)
        text = yaml_text(spec)
        items.append(nv.device_plugin(f"{i}:{a.strategy}x{a.slices}:{config_name(spec)}", text))
        parse_sharing(text)  # the Python stand-in accepts it too
    assert {i["name"].split(":")[1].split("x")[0] for i in items} == {"time-slicing", "mps"}
    bad = nv.refused(items)
    assert not bad, "NVIDIA's device plugin refuses configs gpupool renders:\n" + "\n".join(bad)


def test_every_rendered_mig_parted_config_parses_and_holds_the_labelled_entries():
    """mig-manager's config.yaml as the executor writes it (merged into the install's, with
    every stage and retry name a node label may carry) parses with mig-parted's api/spec/v1,
    and holds each name the label will select."""
    installed = yaml.safe_load((INSTALL / "mig-parted-config.yaml").read_text())["data"][
        MIG_CONFIG_KEY
    ]
    items, wanted = [], []
    for i, (a, cost, mig_now) in enumerate(_collect(reconfigures())):
        entries = {}
        for spec in mig_stages(a, cost=cost, mig_now=mig_now):
            for attempt in range(3):
                entries[attempt_name(config_name(spec), attempt)] = spec["mig-configs"]["gpupool"]
        text = merged_mig_config(installed if i % 2 else None, entries)
        assert text is not None
        items.append(nv.mig_parted(str(i), text))
        wanted.append({ALL_DISABLED, *entries})
        assert wanted[-1] <= set(parse_spec(text))  # the stand-in reads the same entries
    bad = nv.refused(items)
    assert not bad, "mig-parted refuses configs gpupool renders:\n" + "\n".join(bad)
    for v, names in zip(nv.verdicts(items), wanted, strict=True):
        assert names <= set(v["configs"]), (v["name"], names - set(v["configs"]))


def test_the_configs_shipped_in_deploy_are_accepted():
    dp = yaml.safe_load((INSTALL / "device-plugin-config.yaml").read_text())["data"]
    mp = yaml.safe_load((INSTALL / "mig-parted-config.yaml").read_text())["data"]
    items = [nv.device_plugin(f"deploy device-plugin {k}", t) for k, t in sorted(dp.items())]
    items.append(nv.mig_parted("deploy mig-parted config.yaml", mp[MIG_CONFIG_KEY]))
    assert not nv.refused(items)


MIG = "version: v1\nmig-configs:\n  a:\n  - {devices: all, %s}\n"


def test_nvidias_verdicts_on_what_it_refuses():
    """The helper reports NVIDIA's refusals and the keys NVIDIA would drop: what makes the tests
    above mean something (each message is the plugin's or mig-parted's own)."""
    mps = yaml_text(
        render_sharing(
            SetSharing(
                id="s", target="n", reason="r", cards=(), slices=4, strategy="mps", plain_cards=2
            )
        )
    )
    old_mps = mps.replace("migStrategy: none", "migStrategy: mixed")  # before issue 30
    ts = (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - {name: nvidia.com/gpu, replicas: %s}\n"
    )
    items = [
        nv.device_plugin("mps", mps),
        nv.device_plugin("old-mps", old_mps),
        nv.device_plugin("mps-env-mixed", mps, {**nv.OPERATOR_ENV, "MIG_STRATEGY": "mixed"}),
        nv.device_plugin("mps-no-root", mps, {}),
        nv.device_plugin("replicas-1", ts % 1),
        nv.device_plugin(
            "typo", ts.replace("resources", "renameByDefualt: true\n    resources") % 2
        ),
        nv.device_plugin("version", "version: v2\n"),
        nv.mig_parted(
            "bad-profile",
            MIG % "mig-enabled: true, mig-devices: {3x.40gb: 1}",
        ),
        nv.mig_parted(
            "unknown-field",
            MIG % "mig-enabled: false, migs: 1",
        ),
    ]
    got = {v["name"]: v for v in nv.verdicts(items)}
    assert got["mps"]["ok"] and got["mps"]["unknown"] == []
    assert "mig-strategy=mixed is not supported with MPS" in got["old-mps"]["error"]
    assert "mig-strategy=mixed is not supported with MPS" in got["mps-env-mixed"]["error"]
    assert "requires --mps-root" in got["mps-no-root"]["error"]
    assert "number of replicas must be >= 2" in got["replicas-1"]["error"]
    assert got["typo"]["ok"] and got["typo"]["unknown"] == ["sharing.timeSlicing.renameByDefualt"]
    assert "unknown version" in got["version"]["error"]
    assert "3x.40gb" in got["bad-profile"]["error"]
    assert "unexpected field: migs" in got["unknown-field"]["error"]


_profiles = st.sampled_from(
    ["1g.10gb", "3g.40gb", "1c.3g.40gb", "1g.10gb+me", "1g.12gb-me", "7g.80gb", "3x.40gb",
     "g.10gb", "1g.10", "", " 1g.10gb", "1g.10gb+me-x"]
)  # fmt: skip
_values = st.one_of(
    st.integers(-1, 3), st.booleans(), st.just("all"), st.just("some"), st.none(),
    st.lists(st.integers(0, 7), max_size=3),
    st.dictionaries(_profiles, st.integers(-1, 2), max_size=3),
)  # fmt: skip
_items = st.dictionaries(
    st.sampled_from(["devices", "mig-enabled", "mig-devices", "device-filter", "migs"]),
    _values,
    max_size=4,
)


@st.composite
def mig_files(draw) -> str:
    """mig-parted files near and far from valid: fields missing, extra, of the wrong type."""
    doc: dict = {}
    if draw(st.integers(0, 9)):
        doc["version"] = draw(st.sampled_from(["v1", "v1", "v1", "v2", 1]))
    if draw(st.integers(0, 9)):
        names = draw(st.lists(st.sampled_from(["a", "b", "all-disabled"]), max_size=2))
        doc["mig-configs"] = {n: draw(st.lists(_items, max_size=2)) for n in names}
    if not draw(st.integers(0, 9)):
        doc["extra"] = 1
    return yaml_text(doc)


def test_the_mig_parted_stand_in_agrees_with_mig_parted():
    """tests/nvidia/mig_parted_spec.py (what the mig-manager stand-in reads its file with)
    accepts exactly the files mig-parted's api/spec/v1 accepts."""
    from tests.nvidia.mig_parted_spec import SpecError

    texts = _collect(mig_files(), settings(EXAMPLES, max_examples=300))
    items = [nv.mig_parted(str(i), t) for i, t in enumerate(texts)]
    disagree, verdicts = [], nv.verdicts(items)
    oks = sum(v["ok"] for v in verdicts)
    assert 10 <= oks <= len(texts) - 10, f"{oks} of {len(texts)} accepted: a weak corpus"
    for text, v in zip(texts, verdicts, strict=True):
        try:
            parse_spec(text)
            ours = None
        except SpecError as e:
            ours = str(e)
        if (ours is None) != v["ok"]:
            disagree.append(f"stand-in: {ours or 'ok'}; mig-parted: {v.get('error', 'ok')}\n{text}")
    assert not disagree, f"{len(disagree)} of {len(texts)} disagree:\n" + "\n".join(disagree[:5])


_resources = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "gpu", "bad name!"]),
        "replicas": st.one_of(st.integers(-1, 60), st.just("4")),
    },
    optional={
        "devices": st.sampled_from(["all", "some", [0, 1], 2, 0]),
        "rename": st.sampled_from(["x", "nvidia.com/y", "Bad_Name"]),
    },
)
_sections = st.fixed_dictionaries(
    {},
    optional={
        "renameByDefault": st.booleans(),
        "resources": st.lists(_resources, max_size=2),
        "failRequestsGreaterThanOne": st.booleans(),
    },
)
_plugin_configs = st.fixed_dictionaries(
    {"version": st.sampled_from(["v1", "v1", "v2"])},
    optional={
        "flags": st.fixed_dictionaries(
            {}, optional={"migStrategy": st.sampled_from(["none", "single", "mixed", "bogus"])}
        ),
        "sharing": st.fixed_dictionaries({}, optional={"timeSlicing": _sections, "mps": _sections}),
    },
)
_envs = st.sampled_from(
    [nv.OPERATOR_ENV, {}, {**nv.OPERATOR_ENV, "MIG_STRATEGY": "mixed"}, {"MIG_STRATEGY": "single"}]
)


def test_the_device_plugin_stand_in_agrees_with_the_plugin():
    """tests/nvidia/device_plugin.py's parser (what the device-plugin stand-in starts with)
    accepts exactly the configs NVIDIA's parser and start-up checks accept, in the environments
    the GPU operator may give the plugin."""
    from tests.nvidia.device_plugin import ConfigError

    cases = _collect(st.tuples(_plugin_configs, _envs), settings(EXAMPLES, max_examples=300))
    items = [nv.device_plugin(str(i), yaml_text(d), env) for i, (d, env) in enumerate(cases)]
    verdicts = nv.verdicts(items)
    oks = sum(v["ok"] for v in verdicts)
    assert 10 <= oks <= len(cases) - 10, f"{oks} of {len(cases)} accepted: a weak corpus"
    disagree = []
    for item, v in zip(items, verdicts, strict=True):
        try:
            parse_sharing(item["text"], item["env"])
            ours = None
        except ConfigError as e:
            ours = str(e)
        if (ours is None) != v["ok"]:
            disagree.append(f"stand-in: {ours or 'ok'}; plugin: {v.get('error', 'ok')}\n{item}")
    assert not disagree, f"{len(disagree)} of {len(cases)} disagree:\n" + "\n".join(disagree[:5])
