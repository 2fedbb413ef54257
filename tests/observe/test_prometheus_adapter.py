"""The Prometheus adapter against a stub transport: each kind of answer and failure becomes the
reading it should (samples, or an error that says what went wrong), and nothing raises."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from reconciler.observe.prometheus import NO_URL, parse_answer, read, read_all


def answer(data: dict, status: str = "success") -> bytes:
    return json.dumps({"status": status, "data": data}).encode()


def vector(*samples: tuple[dict, str]) -> bytes:
    return answer(
        {
            "resultType": "vector",
            "result": [{"metric": m, "value": [1700000000.5, v]} for m, v in samples],
        }
    )


class Stub:
    """A transport that records what it was asked and answers (status, body) or raises."""

    def __init__(self, status: int = 200, body: bytes = b"", raises: Exception | None = None):
        self.status, self.body, self.raises = status, body, raises
        self.calls: list[tuple[str, float]] = []

    def __call__(self, url: str, timeout: float) -> tuple[int, bytes]:
        self.calls.append((url, timeout))
        if self.raises is not None:
            raise self.raises
        return self.status, self.body


def test_the_request_is_an_instant_query_with_the_timeout():
    stub = Stub(body=vector(({}, "3")))
    q = 'sum(vllm:num_requests_waiting{namespace="serve",pod=~"llm-.*"})'
    r = read("http://prom:9090/", "scaling/x", q, timeout=2.5, transport=stub)
    assert r.ok and r.samples[0].value == 3.0
    url, timeout = stub.calls[0]
    assert timeout == 2.5
    parsed = urllib.parse.urlsplit(url)
    assert (parsed.netloc, parsed.path) == ("prom:9090", "/api/v1/query")
    assert urllib.parse.parse_qs(parsed.query) == {"query": [q], "timeout": ["2.5s"]}


def test_a_vector_keeps_every_series_with_its_labels():
    samples, error = parse_answer(
        200,
        vector(
            ({"UUID": "GPU-a", "gpu": "0", "Hostname": "node-a"}, "0"),
            ({"UUID": "GPU-b", "gpu": "1", "Hostname": "node-a"}, "87.5"),
        ),
    )
    assert error == ""
    assert [(s.labels["UUID"], s.value) for s in samples] == [("GPU-a", 0.0), ("GPU-b", 87.5)]


def test_a_scalar_is_one_sample_without_labels():
    samples, error = parse_answer(200, answer({"resultType": "scalar", "result": [1.0, "42"]}))
    assert error == "" and [(s.labels, s.value) for s in samples] == [({}, 42.0)]


ERRORS = [
    # (name, status, body, the error starts with, and contains)
    ("empty vector", 200, vector(), "empty result", "no series"),
    ("NaN", 200, vector(({"pod": "a"}, "NaN")), "non-finite value", 'NaN for {pod="a"}'),
    ("+Inf", 200, vector(({}, "+Inf")), "non-finite value", "+Inf"),
    ("NaN scalar", 200, answer({"resultType": "scalar", "result": [1, "NaN"]}), "non-finite", ""),
    (
        "matrix",
        200,
        answer({"resultType": "matrix", "result": []}),
        "wrong result type",
        "matrix",
    ),
    ("string", 200, answer({"resultType": "string", "result": [1, "x"]}), "wrong result", ""),
    (
        "bad query",
        400,
        json.dumps(
            {"status": "error", "errorType": "bad_data", "error": "1:5: parse error: unexpected"}
        ).encode(),
        "Prometheus error (bad_data, HTTP 400)",
        "parse error",
    ),
    (
        "query timeout",
        503,
        json.dumps(
            {"status": "error", "errorType": "timeout", "error": "query timed out"}
        ).encode(),
        "Prometheus error (timeout, HTTP 503)",
        "timed out",
    ),
    ("proxy 502", 502, b"<html>Bad Gateway</html>", "HTTP error 502", "Bad Gateway"),
    ("not JSON", 200, b"hello", "bad response", ""),
    ("no data", 200, json.dumps({"status": "success"}).encode(), "bad response", ""),
    ("value not a string", 200, answer({"resultType": "scalar", "result": [1, 3]}), "bad resp", ""),
    ("vector item without value", 200, answer({"resultType": "vector", "result": [{}]}), "bad", ""),
]


@pytest.mark.parametrize(("name", "status", "body", "starts", "contains"), ERRORS)
def test_each_failure_is_an_error_reading(name, status, body, starts, contains):
    r = read("http://prom", "id", "q", timeout=1, transport=Stub(status, body))
    assert not r.ok and r.samples == []
    assert r.error.startswith(starts), r.error
    assert contains in r.error, r.error


def test_a_timeout_and_a_refused_connection_are_error_readings():
    slow = Stub(raises=TimeoutError("timed out"))
    r = read("http://prom", "id", "q", timeout=0.5, transport=slow)
    assert r.error == "timeout: no answer from Prometheus within 0.5s"
    refused = Stub(raises=ConnectionRefusedError(111))
    r = read("http://prom", "id", "q", timeout=1, transport=refused)
    assert r.error.startswith("unreachable:")


def test_without_a_url_every_reading_says_so_and_nothing_is_sent():
    stub = Stub(body=vector(({}, "1")))
    out = read_all(None, [("a", "q1"), ("b", "q2")], timeout=1, transport=stub)
    assert [(r.id, r.query, r.error) for r in out] == [("a", "q1", NO_URL), ("b", "q2", NO_URL)]
    assert stub.calls == []
