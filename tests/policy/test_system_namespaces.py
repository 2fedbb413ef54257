"""A policy may not reach into Kubernetes' own namespaces or gpupool's: a Quota or a scaling
target naming kube-system, kube-public, kube-node-lease or gpupool-system is an error located at
that namespace (file, line, column, field), and nothing loads."""

from __future__ import annotations

import pytest

from reconciler.cli import main
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.policy.problems import InvalidDesiredState
from reconciler.policy.reference import EXAMPLES

POOL = SourceFile("pool.yaml", EXAMPLES["Pool"])
SYSTEM = ["kube-system", "kube-public", "kube-node-lease", "gpupool-system"]

QUOTA = """\
apiVersion: gpupool.io/v1alpha1
kind: Quota
metadata:
  name: platform
spec:
  namespaces:
    - team-a
    - {ns}
  maxGPUs: 8
  pools:
    - pool: a100
      whole: {{guaranteed: 1}}
"""

SCALING = """\
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata:
  name: ranker
spec:
  pool: a100
  targets:
    - {{namespace: search, name: ranker, maxReplicas: 4}}
    - namespace: {ns}
      name: coredns
      maxReplicas: 4
  scaleUp: {{queueLengthPerReplica: 16}}
  scaleDown: {{queueLengthPerReplica: 2}}
"""


def _problems(files) -> list:
    with pytest.raises(InvalidDesiredState) as err:
        load(files)
    return err.value.problems


@pytest.mark.parametrize("ns", SYSTEM)
def test_a_quota_on_a_system_namespace_is_a_located_error(ns):
    (p,) = _problems([POOL, SourceFile("q.yaml", QUOTA.format(ns=ns))])
    assert (p.file, p.line, p.column) == ("q.yaml", 8, 7)
    assert p.path == "spec.namespaces[1]" and p.document == "Quota/platform"
    assert ns in p.message and "system namespace" in p.message


@pytest.mark.parametrize("ns", SYSTEM)
def test_a_scaling_target_in_a_system_namespace_is_a_located_error(ns):
    (p,) = _problems([POOL, SourceFile("s.yaml", SCALING.format(ns=ns))])
    assert (p.file, p.line) == ("s.yaml", 9)
    assert p.path == "spec.targets[1].namespace" and p.document == "ScalingPolicy/ranker"
    assert ns in p.message and "system namespace" in p.message


def test_other_namespaces_load():
    state = load(
        [
            POOL,
            SourceFile("q.yaml", QUOTA.format(ns="kube-systemx")),
            SourceFile("s.yaml", SCALING.format(ns="team-b")),
        ]
    )
    assert "kube-systemx" in state.quotas["platform"].spec.namespaces


def test_validate_exits_1_naming_the_line(tmp_path, capsys):
    (tmp_path / "pool.yaml").write_text(POOL.text)
    (tmp_path / "q.yaml").write_text(QUOTA.format(ns="kube-system"))
    assert main(["validate", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert "q.yaml:8:7" in out.out + out.err and "kube-system" in out.out + out.err
