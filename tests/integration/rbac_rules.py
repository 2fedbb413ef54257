"""deploy/rbac.yaml parsed, and the real audit log read, for the least-privilege tests: the
users (CONTROLLER, AGENT), what the authorizer is asked for an audited request (`Access`,
`access`), the rules bound to a ServiceAccount (`rules`), whether a rule allows a request
(`allows`, `allowed`), the rules split one per verb and resource (`narrowed`) and a user's
audit events (`audited`), and which of the controller's rules a run used
(`unused_controller_rules`). Used by tests/integration/test_rbac.py, test_kueue.py and the DRA
tests (test_dra*.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .harness import CONTROLLER_SA, DEPLOY, NS, docs
from .world import AGENT_SA

CONTROLLER = f"system:serviceaccount:{NS}:{CONTROLLER_SA}"
AGENT = f"system:serviceaccount:{NS}:{AGENT_SA}"


@dataclass(frozen=True)
class Access:
    """What the authorizer is asked for one request (its attributes, k8s RequestInfo)."""

    verb: str
    group: str
    resource: str  # "pods", "pods/eviction"
    namespace: str  # "" for cluster-scoped objects
    name: str  # "" for collections and for create (the name is not known to the authorizer)


def access(e) -> list[Access]:
    """The authorizer's attributes for an audit event; a server-side apply that created the
    object (patch answered 201) was also authorised for create."""
    if not e.resource:
        return []  # non-resource URLs (discovery), granted to every authenticated user
    res = e.resource + (f"/{e.subresource}" if e.subresource else "")
    collection = e.verb in ("list", "watch", "deletecollection") or (
        e.verb == "create" and not e.subresource
    )
    out = [
        Access(
            e.verb, e.api_group or "", res, e.namespace or "", "" if collection else e.name or ""
        )
    ]
    if e.verb == "patch" and e.code == 201:
        out.append(Access("create", e.api_group or "", res, e.namespace or "", ""))
    return out


def rules(sa: str) -> list[tuple[str, dict]]:
    """(namespace, or "" for a ClusterRole bound cluster-wide; rule) for every rule bound to
    the ServiceAccount `sa` in gpupool-system, as deploy/rbac.yaml writes them."""
    objs = docs(DEPLOY / "rbac.yaml")
    bound = set()
    for o in objs:
        if o["kind"] in ("RoleBinding", "ClusterRoleBinding") and any(
            s["kind"] == "ServiceAccount" and s["name"] == sa and s.get("namespace") == NS
            for s in o["subjects"]
        ):
            ref = o["roleRef"]
            bound.add(
                (
                    ref["kind"],
                    ref["name"],
                    o["metadata"].get("namespace", "") if o["kind"] == "RoleBinding" else "",
                )
            )
    out = []
    for o in objs:
        if o["kind"] in ("Role", "ClusterRole"):
            key = (o["kind"], o["metadata"]["name"], o["metadata"].get("namespace", ""))
            if key in bound:
                out += [(key[2], r) for r in o["rules"]]
    assert out, f"no rules bound to {sa}"
    return out


def allows(ns: str, rule: dict, a: Access) -> bool:
    if ns and a.namespace != ns:
        return False
    if not {"*", a.group} & set(rule.get("apiGroups", [])):
        return False
    if not {"*", a.resource} & set(rule.get("resources", [])):
        return False
    if not {"*", a.verb} & set(rule.get("verbs", [])):
        return False
    names = rule.get("resourceNames")
    return not names or a.name in names


def allowed(role_rules, a: Access) -> bool:
    return any(allows(ns, r, a) for ns, r in role_rules)


def narrowed(role_rules) -> list[tuple[str, str, dict]]:
    """Each rule split into one per verb and resource: (label, namespace, rule)."""
    out = []
    for ns, r in role_rules:
        for res in r["resources"]:
            for verb in r["verbs"]:
                label = f"{ns or '*'}: {verb} {r['apiGroups'][0] or 'core'}/{res}"
                if r.get("resourceNames"):
                    label += f" {r['resourceNames']}"
                out.append((label, ns, {**r, "resources": [res], "verbs": [verb]}))
    return out


def audited(kube, user: str, since: int) -> list:
    return [e for e in kube.plane.audit_events()[since:] if e.user == user]


def unused_controller_rules(kube, since: int, pick: Callable[[str], bool]) -> tuple[int, list[str]]:
    """The controller's requests audited since `since`, of which none may have been refused
    (asserted); -> how many of its rules (deploy/rbac.yaml, `narrowed`) `pick` selects by
    label, and the labels of those no request used."""
    events = audited(kube, CONTROLLER, since)
    assert not [e.uri for e in events if e.code == 403]
    seen = {a for e in events for a in access(e)}
    picked = [(label, ns, r) for label, ns, r in narrowed(rules(CONTROLLER_SA)) if pick(label)]
    unused = [label for label, ns, r in picked if not any(allows(ns, r, a) for a in seen)]
    return len(picked), unused
