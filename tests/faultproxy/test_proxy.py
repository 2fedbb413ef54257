"""The fault proxy against the real control plane: requests pass through with the caller's
identity, and each fault does what it says. The assertions about exceptions record what the
official client (kubernetes 37, urllib3 2) does with each fault; see README.md here."""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from types import SimpleNamespace

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from urllib3.exceptions import MaxRetryError, ProtocolError, ReadTimeoutError

from tests.support.wait import wait_for

pytestmark = pytest.mark.kube

NS = "faultproxy"
WRITER = f"system:serviceaccount:{NS}:writer"
CONFIGMAPS = rf"^/api/v1/namespaces/{NS}/configmaps$"


def configmap(name: str, **data) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data=data or {"k": "v"})


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def tokens(control_plane):
    """Tokens for two ServiceAccounts in NS: `writer` may do anything to ConfigMaps there,
    `nobody` has no RBAC rights at all."""
    writer = control_plane.service_account_token(NS, "writer")
    nobody = control_plane.service_account_token(NS, "nobody")
    with control_plane.api_client() as admin:
        rbac = client.RbacAuthorizationV1Api(admin)
        verbs = ["get", "list", "watch", "create", "update", "patch", "delete"]
        rule = client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=verbs)
        rbac.create_namespaced_role(
            NS, client.V1Role(metadata=client.V1ObjectMeta(name="cm-writer"), rules=[rule])
        )
        rbac.create_namespaced_role_binding(
            NS,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name="writer"),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="Role", name="cm-writer"
                ),
                subjects=[client.RbacV1Subject(kind="ServiceAccount", name="writer", namespace=NS)],
            ),
        )
    with control_plane.token_client(writer) as direct:

        def allowed():
            try:
                return client.CoreV1Api(direct).list_namespaced_config_map(NS) is not None
            except ApiException as e:
                if e.status != 403:
                    raise
                return False

        wait_for("the RoleBinding to take effect", allowed, timeout=10, interval=0.1)
    return SimpleNamespace(writer=writer, nobody=nobody)


@pytest.fixture
def core(fault_proxy, tokens):
    """CoreV1Api through the proxy as `writer`, with the client's default retries."""
    with fault_proxy.api_client(tokens.writer) as api:
        yield client.CoreV1Api(api)


@pytest.fixture
def admin_core(control_plane):
    """CoreV1Api straight to the apiserver, to see what the server really holds."""
    with control_plane.api_client() as api:
        yield client.CoreV1Api(api)


def who_am_i(api_client) -> str:
    review = client.AuthenticationV1Api(api_client).create_self_subject_review(
        client.V1SelfSubjectReview()
    )
    return review.status.user_info.username


# ---- pass-through ---------------------------------------------------------------------------


def test_identity_is_the_callers_token_or_else_the_admin_cert(fault_proxy, tokens):
    with fault_proxy.api_client(tokens.writer) as api:
        assert who_am_i(api) == WRITER
    with fault_proxy.api_client() as api:
        assert who_am_i(api) == "kubernetes-admin"
    # The kubeconfig helper (for code that takes a kubeconfig path) does the same.
    with config.new_client_from_config(str(fault_proxy.kubeconfig(tokens.writer))) as api:
        assert who_am_i(api) == WRITER
    with config.new_client_from_config(str(fault_proxy.kubeconfig())) as api:
        assert who_am_i(api) == "kubernetes-admin"
    log = fault_proxy.requests("POST", r"/selfsubjectreviews$")
    assert [e.authorization for e in log] == [True, False, True, False]
    assert all(e.status == 201 and e.forwarded and e.fault is None for e in log)


def test_list_create_patch_as_serviceaccount(fault_proxy, core, control_plane):
    name = unique("cm")
    created = core.create_namespaced_config_map(NS, configmap(name, a="1"))
    assert created.metadata.name == name
    patched = core.patch_namespaced_config_map(name, NS, {"data": {"b": "2"}})
    assert patched.data == {"a": "1", "b": "2"}
    names = [cm.metadata.name for cm in core.list_namespaced_config_map(NS).items]
    assert name in names
    # The apiserver saw the ServiceAccount, not the admin.
    ev = control_plane.wait_audit_event(user=WRITER, verb="patch", resource="configmaps", name=name)
    assert ev.code == 200
    assert [(e.method, e.status) for e in fault_proxy.requests(path=CONFIGMAPS + "|/" + name)] == [
        ("POST", 201),
        ("PATCH", 200),
        ("GET", 200),
    ]


def test_rbac_applies_through_the_proxy(fault_proxy, tokens):
    with fault_proxy.api_client(tokens.nobody) as api, pytest.raises(ApiException) as denied:
        client.CoreV1Api(api).list_namespaced_config_map(NS)
    assert denied.value.status == 403
    assert json.loads(denied.value.body)["reason"] == "Forbidden"
    (entry,) = fault_proxy.requests("GET", CONFIGMAPS)
    assert entry.forwarded and entry.fault is None and entry.status == 403


def test_keep_alive_one_connection_for_many_requests(fault_proxy, core):
    for _ in range(5):
        core.list_namespaced_config_map(NS)
    log = fault_proxy.requests("GET", CONFIGMAPS)
    assert len(log) == 5
    assert len({e.connection for e in log}) == 1


def test_watch_delivers_added_within_a_second(fault_proxy, core, admin_core):
    rv = core.list_namespaced_config_map(NS).metadata.resource_version
    events: queue.Queue = queue.Queue()
    w = watch.Watch()

    def run():
        try:
            for ev in w.stream(
                core.list_namespaced_config_map,
                NS,
                resource_version=rv,
                timeout_seconds=20,
                _request_timeout=30,
            ):
                events.put((time.monotonic(), ev))
        except Exception as e:  # reported through the queue
            events.put((time.monotonic(), e))

    def watches():
        return [e for e in fault_proxy.requests("GET", CONFIGMAPS) if "watch=" in e.query]

    t = threading.Thread(target=run, daemon=True)
    t.start()
    wait_for("the watch to reach the proxy", watches, timeout=10, interval=0.1)
    name = unique("watched")
    admin_core.create_namespaced_config_map(NS, configmap(name))
    created_at = time.monotonic()
    while True:
        at, ev = events.get(timeout=5)
        assert not isinstance(ev, Exception), ev
        if ev["object"].metadata.name == name:
            break
    w.stop()
    assert ev["type"] == "ADDED"
    assert at - created_at < 1.0
    (entry,) = watches()
    assert entry.status == 200 and entry.forwarded and entry.fault is None
    admin_core.delete_namespaced_config_map(name, NS)  # ends the stream at once; then stop
    t.join(5)


# ---- faults ---------------------------------------------------------------------------------


def test_fail_once_then_succeed(fault_proxy, core):
    rule = fault_proxy.fail(500, "GET", CONFIGMAPS, times=1)
    with pytest.raises(ApiException) as failed:
        core.list_namespaced_config_map(NS)
    assert failed.value.status == 500
    status = json.loads(failed.value.body)
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "InternalError", 500)
    core.list_namespaced_config_map(NS)  # the rule is spent
    assert rule.hits == 1
    first, second = fault_proxy.requests("GET", CONFIGMAPS)
    assert (first.fault, first.forwarded, first.status) == ("fail", False, 500)
    assert (second.fault, second.forwarded, second.status) == (None, True, 200)


def statuses(proxy, method="GET", path=CONFIGMAPS) -> list[int | None]:
    return [e.status for e in proxy.requests(method, path)]


def test_a_500_is_not_retried_and_carries_retry_after(fault_proxy, core):
    fault_proxy.fail(500, "GET", CONFIGMAPS, times=1, retry_after=0)
    with pytest.raises(ApiException) as failed:
        core.list_namespaced_config_map(NS)
    assert failed.value.status == 500
    assert failed.value.headers["Retry-After"] == "0"
    assert json.loads(failed.value.body)["details"] == {"retryAfterSeconds": 0}
    assert statuses(fault_proxy) == [500]


def test_urllib3_retries_a_get_503_with_retry_after_by_default(fault_proxy, core):
    """urllib3's default Retry honours Retry-After on 413/429/503 for idempotent methods,
    sleeping as long as it says: the caller never sees the 503."""
    fault_proxy.fail(503, "GET", CONFIGMAPS, times=1, retry_after=1)
    t0 = time.monotonic()
    core.list_namespaced_config_map(NS)
    assert time.monotonic() - t0 >= 1.0
    assert statuses(fault_proxy) == [503, 200]


def test_persistent_503_is_tried_four_times_then_raised(fault_proxy, core):
    """When the retries run out on a status, urllib3 hands back the last response (Retry.total
    reaches 0 and is_retry says no), so the caller gets ApiException, not MaxRetryError."""
    fault_proxy.fail(503, "GET", CONFIGMAPS, retry_after=0)
    with pytest.raises(ApiException) as failed:
        core.list_namespaced_config_map(NS)
    assert failed.value.status == 503
    assert statuses(fault_proxy) == [503] * 4


def test_post_503_is_not_retried(fault_proxy, core):
    fault_proxy.fail(503, "POST", CONFIGMAPS, times=1, retry_after=0)
    with pytest.raises(ApiException) as failed:
        core.create_namespaced_config_map(NS, configmap(unique("cm")))
    assert failed.value.status == 503
    assert statuses(fault_proxy, "POST") == [503]


def test_client_go_retries_retry_a_get_500_with_retry_after(fault_proxy, tokens):
    """`configuration.client_go_retries = True` (off by default) retries GET/HEAD on 429 and
    any 5xx that carries Retry-After, like client-go (up to 10 times)."""
    fault_proxy.fail(500, "GET", CONFIGMAPS, times=2, retry_after=0)
    cfg = fault_proxy.configuration(tokens.writer)
    cfg.client_go_retries = True
    with client.ApiClient(cfg) as api:
        client.CoreV1Api(api).list_namespaced_config_map(NS)
    assert statuses(fault_proxy) == [500, 500, 200]


def test_drop_response_on_create_leaves_the_object_created(fault_proxy, tokens, admin_core):
    name = unique("lost-reply")
    rule = fault_proxy.drop_response("POST", CONFIGMAPS, times=1)
    api = fault_proxy.api_client(tokens.writer, retries=0)
    with api, pytest.raises(ProtocolError) as lost:
        client.CoreV1Api(api).create_namespaced_config_map(NS, configmap(name))
    assert "Remote end closed connection without response" in str(lost.value)
    assert rule.hits == 1
    # Written but the reply was lost: the server has it.
    assert admin_core.read_namespaced_config_map(name, NS).metadata.name == name
    (entry,) = fault_proxy.requests("POST", CONFIGMAPS)
    assert (entry.fault, entry.forwarded, entry.status) == ("drop_response", True, None)


def test_create_is_never_retried_even_with_default_retries(fault_proxy, core, admin_core):
    """urllib3 retries a read error only for idempotent methods; POST and PATCH get the
    ProtocolError itself, not a MaxRetryError."""
    name = unique("post-once")
    fault_proxy.drop_response("POST", CONFIGMAPS)
    with pytest.raises(ProtocolError):
        core.create_namespaced_config_map(NS, configmap(name))
    assert len(fault_proxy.requests("POST", CONFIGMAPS)) == 1
    assert admin_core.read_namespaced_config_map(name, NS)


def test_lost_delete_reply_is_retried_into_a_404(fault_proxy, core, admin_core):
    """DELETE is idempotent to urllib3: with the client's default retries (3), a DELETE whose
    reply was lost is sent again, and the caller sees the second answer: 404 for a delete that
    succeeded."""
    name = unique("deleted")
    admin_core.create_namespaced_config_map(NS, configmap(name))
    fault_proxy.drop_response("DELETE", rf"/configmaps/{name}$", times=1)
    with pytest.raises(ApiException) as gone:
        core.delete_namespaced_config_map(name, NS)
    assert gone.value.status == 404
    log = fault_proxy.requests("DELETE")
    assert [(e.fault, e.forwarded, e.status) for e in log] == [
        ("drop_response", True, None),
        (None, True, 404),
    ]


def test_lost_replace_reply_is_retried_into_a_409(fault_proxy, core, admin_core):
    """PUT too: the retry carries the old resourceVersion, which the first attempt has
    already moved on, so a replace that succeeded reports a Conflict."""
    name = unique("replaced")
    cm = admin_core.create_namespaced_config_map(NS, configmap(name))
    cm.data = {"k": "new"}
    fault_proxy.drop_response("PUT", rf"/configmaps/{name}$", times=1)
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_config_map(name, NS, cm)
    assert conflict.value.status == 409
    assert admin_core.read_namespaced_config_map(name, NS).data == {"k": "new"}
    assert statuses(fault_proxy, "PUT", name) == [None, 409]


def test_drop_request_get_retried_then_max_retry_error(fault_proxy, core):
    fault_proxy.drop_request("GET", CONFIGMAPS)
    with pytest.raises(MaxRetryError) as exhausted:
        core.list_namespaced_config_map(NS)
    assert isinstance(exhausted.value.reason, ProtocolError)
    log = fault_proxy.requests("GET", CONFIGMAPS)
    assert len(log) == 4  # the first try and urllib3's default three retries
    assert not any(e.forwarded for e in log)


def test_drop_request_on_create_never_reaches_the_server(fault_proxy, core, admin_core):
    name = unique("never")
    fault_proxy.drop_request("POST", CONFIGMAPS, times=1)
    with pytest.raises(ProtocolError):
        core.create_namespaced_config_map(NS, configmap(name))
    with pytest.raises(ApiException) as missing:
        admin_core.read_namespaced_config_map(name, NS)
    assert missing.value.status == 404


def test_predicate_picks_the_request(fault_proxy, core):
    victim = unique("victim")
    fault_proxy.fail(
        409,
        "POST",
        CONFIGMAPS,
        when=lambda req: req.json()["metadata"]["name"] == victim,
        reason="AlreadyExists",
    )
    core.create_namespaced_config_map(NS, configmap(unique("bystander")))
    with pytest.raises(ApiException) as conflict:
        core.create_namespaced_config_map(NS, configmap(victim))
    assert conflict.value.status == 409
    assert json.loads(conflict.value.body)["reason"] == "AlreadyExists"


def test_rule_as_context_manager_is_removed_on_exit(fault_proxy, core):
    with fault_proxy.fail(503, "GET", CONFIGMAPS):
        for _ in range(2):
            with pytest.raises(ApiException):
                core.list_namespaced_config_map(NS)
    core.list_namespaced_config_map(NS)
    assert [e.status for e in fault_proxy.requests("GET", CONFIGMAPS)] == [503, 503, 200]


def test_hang_watch_times_out_on_the_client(fault_proxy, core):
    rule = fault_proxy.hang_watch(path=CONFIGMAPS)
    core.list_namespaced_config_map(NS)  # a plain list is not a watch: passes
    t0 = time.monotonic()
    with pytest.raises(ReadTimeoutError):
        for _ in watch.Watch().stream(core.list_namespaced_config_map, NS, _request_timeout=1):
            pytest.fail("a hung watch delivered an event")
    elapsed = time.monotonic() - t0
    assert 0.9 <= elapsed < 3.0, elapsed
    assert rule.hits == 1
    hung = fault_proxy.requests("GET", CONFIGMAPS, fault="hang_watch")
    assert len(hung) == 1 and hung[0].status == 200 and not hung[0].forwarded


def test_removing_hang_watch_ends_the_stream(fault_proxy, core):
    """Without a client timeout a hung watch blocks until the rule goes; then the stream ends
    without its last chunk, which urllib3 reports as a ProtocolError."""
    rule = fault_proxy.hang_watch(path=CONFIGMAPS)
    threading.Timer(0.5, rule.remove).start()
    t0 = time.monotonic()
    with pytest.raises(ProtocolError):
        for _ in watch.Watch().stream(core.list_namespaced_config_map, NS):
            pytest.fail("a hung watch delivered an event")
    assert 0.5 <= time.monotonic() - t0 < 3


def test_delay_slows_the_answer(fault_proxy, core):
    fault_proxy.delay(0.6, "GET", CONFIGMAPS, times=1)
    t0 = time.monotonic()
    core.list_namespaced_config_map(NS)
    slow = time.monotonic() - t0
    t0 = time.monotonic()
    core.list_namespaced_config_map(NS)
    fast = time.monotonic() - t0
    assert slow >= 0.6 and fast < 0.5, (slow, fast)


def test_request_timeout_is_per_attempt_and_gets_are_retried(fault_proxy, core):
    """`_request_timeout` bounds one attempt, not the call: a GET that times out is retried
    (urllib3 default: three times), each attempt with the full timeout again."""
    fault_proxy.delay(1.0, "GET", CONFIGMAPS)
    t0 = time.monotonic()
    with pytest.raises(MaxRetryError) as exhausted:
        core.list_namespaced_config_map(NS, _request_timeout=0.3)
    elapsed = time.monotonic() - t0
    assert isinstance(exhausted.value.reason, ReadTimeoutError)
    assert len(fault_proxy.requests("GET", CONFIGMAPS)) == 4
    assert 1.1 <= elapsed < 3.0, elapsed


def test_timed_out_create_is_still_applied(fault_proxy, core, admin_core):
    """A POST that times out on the client is not retried, and the server may apply it
    anyway: here the reply is held back after the apiserver has created the object."""
    name = unique("late")
    fault_proxy.delay(1.0, "POST", CONFIGMAPS, times=1, after_upstream=True)
    with pytest.raises(ReadTimeoutError):
        core.create_namespaced_config_map(NS, configmap(name), _request_timeout=0.3)
    assert admin_core.read_namespaced_config_map(name, NS)
    assert len(fault_proxy.requests("POST", CONFIGMAPS)) == 1


def test_stop_ends_hung_watches_and_frees_the_port(control_plane, tokens):
    from tests.faultproxy.proxy import FaultProxy

    pki = control_plane.cert_dir
    proxy = FaultProxy(control_plane.server, pki / "ca.crt").start()
    rule = proxy.hang_watch()
    errors: queue.Queue = queue.Queue()

    def run():
        with proxy.api_client(tokens.writer) as api:
            try:
                for _ in watch.Watch().stream(client.CoreV1Api(api).list_namespaced_config_map, NS):
                    pass
            except Exception as e:
                errors.put(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert rule.wait(5)
    proxy.stop()
    t.join(5)
    assert not t.is_alive()
    assert isinstance(errors.get_nowait(), ProtocolError)


def test_reset_connections_cuts_a_live_watch(fault_proxy, core):
    """The apiserver going away mid-watch, as the client sees it: the stream ends without its
    last chunk (ProtocolError), and the Watch helper does not reconnect by itself."""
    errors: queue.Queue = queue.Queue()

    def run():
        try:
            for _ in watch.Watch().stream(core.list_namespaced_config_map, NS, timeout_seconds=30):
                pass
            errors.put(None)
        except Exception as e:
            errors.put(e)

    threading.Thread(target=run, daemon=True).start()
    wait_for(
        "the watch to be streaming",
        lambda: [e for e in fault_proxy.requests("GET", CONFIGMAPS) if e.status == 200],
        timeout=10,
        interval=0.1,
    )
    fault_proxy.reset_connections()
    assert isinstance(errors.get(timeout=5), ProtocolError)
    assert len(fault_proxy.requests("GET", CONFIGMAPS)) == 1


def test_upstream_down_means_no_answer(control_plane, tokens):
    """When the apiserver cannot be reached the proxy closes the client's connection without
    an answer (a real client would get "connection refused", which urllib3 also retries)."""
    from tests.cluster.controlplane import free_port
    from tests.faultproxy.proxy import FaultProxy

    nowhere = f"https://127.0.0.1:{free_port()}"
    with FaultProxy(nowhere, control_plane.cert_dir / "ca.crt") as proxy:
        with proxy.api_client(tokens.writer) as api, pytest.raises(MaxRetryError):
            client.CoreV1Api(api).list_namespaced_config_map(NS)
        log = proxy.requests()
    assert len(log) == 4
    assert all(not e.forwarded and e.status is None and "Refused" in e.error for e in log)
