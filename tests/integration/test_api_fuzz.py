"""The API fuzzed from its own OpenAPI schema: hostile bodies, queries and content types
sent over real HTTP to every resource and subresource the server serves. Whatever arrives,
the answer is never a 5xx, and every error is a `Status` whose code is the HTTP status.

Bodies are drawn from each kind's schema (`ephemera.api.schema`): every field either of its
declared type or of a wrong one (null, numbers past int64, deep nesting, bad quantities,
odd unicode), plus bodies that are not objects at all, bodies past the size cap (413) and
deep nesting. The budget is `EPHEMERA_FUZZ_EXAMPLES` examples per test (default 25). What
the fuzzing found is pinned down by deterministic tests at the end (bodies nested too deep,
an unknown field named with a control character)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import threading
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import urllib3
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ephemera.api import schema
from ephemera.api.listoptions import query_flag
from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.apiserver.resources import RESOURCES, Resource
from ephemera.apiserver.strategy import STRUCT_FIELDS
from ephemera.store import open_store

EXAMPLES = int(os.environ.get("EPHEMERA_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, suppress_health_check=list(HealthCheck),
                derandomize=False, database=None)
MAX_BODY = 64 * 1024  # a small cap so over-size bodies are cheap to send
NAMESPACE = "fuzz"
HOSTILE_NAMESPACE = "fuzz-hostile"  # test_hostile_queries' own, which its DELETEs may empty

class Server:
    """The apiserver app on a sqlite store, served over plain HTTP from its own thread."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="fuzz-apiserver", daemon=True)
        self.http = urllib3.PoolManager(retries=False, timeout=10.0)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        self.ready.set()
        self.loop.run_forever()

    async def _start(self) -> None:
        self.store = open_store("sqlite", data_dir=self.data_dir)
        app = create_app(self.store, ApiserverConfig(max_body_bytes=MAX_BODY))
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        await self.runner.cleanup()
        await self.store.close()

    def start(self) -> None:
        self.thread.start()
        assert self.ready.wait(20), "the apiserver did not start"

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(20)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(20)

    def request(self, method: str, path: str, body: bytes | None = None,
                content_type: str = "application/json") -> tuple[int, bytes]:
        headers = {"Content-Type": content_type} if body is not None else {}
        response = self.http.request(method, f"http://127.0.0.1:{self.port}{path}", body=body,
                                     headers=headers)
        return response.status, response.data

    def request_with_query(self, method: str, path: str, query: dict[str, str]
                           ) -> tuple[int, bytes]:
        return self.request(method, f"{path}?{urlencode(query)}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    served = Server(tmp_path_factory.mktemp("fuzz") / "data")
    served.start()
    for name in (NAMESPACE, HOSTILE_NAMESPACE):
        status, body = served.request("POST", "/api/v1/namespaces", json.dumps(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}).encode())
        assert status == 201, body
    try:
        yield served
    finally:
        served.stop()


def assert_status_answer(status: int, body: bytes, what: str) -> None:
    """Never a server error; every error a Status carrying the HTTP code."""
    assert status < 500, f"{what}: {status} {body[:500]!r}"
    if status >= 400:
        answer = json.loads(body)
        assert answer["kind"] == "Status", f"{what}: {answer}"
        assert answer["code"] == status, f"{what}: {answer}"
        assert answer["status"] == "Failure"
        assert isinstance(answer["message"], str) and answer["message"]


# --- strategies derived from the schema ---------------------------------------------------

BAD_QUANTITIES = st.sampled_from(["", "1.5.5", "-", "1e400", "9" * 40, "1Qi", "0x10", "+-1",
                                  " 1", "1 ", "NaN", "Infinity", "1e-30", "1E", ".", "1..0"])
SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40), st.text(alphabet=st.characters(min_codepoint=0x80), max_size=10),
    BAD_QUANTITIES,
)
ANY_JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)


def right_typed(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    kind = node.get("type")
    if node.get("format") == "int-or-string" or "x-kubernetes-int-or-string" in node:
        return st.one_of(st.integers(-5, 10**6), BAD_QUANTITIES,
                         st.sampled_from(["1", "100m", "64Mi", "1Gi", "1.5"]))
    if kind == "string":
        return st.one_of(st.text(max_size=30), st.sampled_from(["", "a", "Always", "Memory",
                                                                 "c", "v", "ro", "/x"]))
    if kind == "integer":
        return st.integers(min_value=-(2**64), max_value=2**64)
    if kind == "number":
        return st.floats(allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    return ANY_JSON


@cache
def for_definition(name: str, depth: int) -> st.SearchStrategy[Any]:
    return for_node(schema.definition(name), depth)


def for_node(node: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
    ref = node.get("$ref")
    if isinstance(ref, str):
        return st.deferred(lambda: for_definition(ref.rsplit("/", 1)[-1], depth))
    if depth <= 0:
        return st.one_of(right_typed(node), SCALARS)
    kind = node.get("type")
    if kind == "object" and "properties" in node:
        fields = {key: for_node(sub, depth - 1) for key, sub in node["properties"].items()}
        shaped = st.fixed_dictionaries({}, optional=fields)
        return st.one_of(shaped, shaped, SCALARS)
    if kind == "array":
        items = node.get("items", {})
        return st.one_of(st.lists(for_node(items, depth - 1), max_size=3), SCALARS)
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        values = for_node(node["additionalProperties"], depth - 1)
        return st.one_of(st.dictionaries(st.text(max_size=12), values, max_size=3), SCALARS)
    return st.one_of(right_typed(node), right_typed(node), SCALARS)


WRITABLE = [r for r in RESOURCES if "create" in r.verbs]
RESOURCES_BY_PLURAL = {r.plural: r for r in RESOURCES}
UPDATABLE = [r for r in WRITABLE if "update" in r.verbs]
NAMES = st.one_of(st.just("x"), st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
                  st.text(max_size=300))


def collection_path(resource: Resource, namespace: str = NAMESPACE) -> str:
    base = "/api/v1" if not resource.group else f"/apis/{resource.group}/{resource.version}"
    if resource.namespaced:
        return f"{base}/namespaces/{namespace}/{resource.plural}"
    return f"{base}/{resource.plural}"


@st.composite
def hostile_object(draw: st.DrawFn, resource: Resource) -> dict[str, Any]:
    """An object of the resource's kind whose fields are drawn from its schema."""
    body = draw(for_definition(resource.definition, 4).filter(lambda b: isinstance(b, dict)))
    body = dict(body)
    body["apiVersion"] = draw(st.sampled_from([resource.api_version, resource.api_version,
                                               "v2", ""]))
    body["kind"] = draw(st.sampled_from([resource.kind, resource.kind, "Other"]))
    metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    body["metadata"] = {**metadata, "name": draw(NAMES)}
    return body


def encoded(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("resource", WRITABLE, ids=lambda r: r.plural)
def test_create_with_bodies_drawn_from_the_schema(server: Server, resource: Resource) -> None:
    @FUZZ
    @given(body=hostile_object(resource))
    def check(body: dict[str, Any]) -> None:
        status, answer = server.request("POST", collection_path(resource), encoded(body))
        assert_status_answer(status, answer, f"POST {resource.plural}")

    check()


@pytest.mark.parametrize("resource", UPDATABLE, ids=lambda r: r.plural)
def test_update_and_patch_of_a_real_object(server: Server, resource: Resource) -> None:
    """PUT of schema-drawn bodies, and patches of every type, onto an object that exists."""
    if resource.plural == "namespaces":
        name = NAMESPACE
        path = f"/api/v1/namespaces/{name}"
    else:
        name = "target"
        path = f"{collection_path(resource)}/{name}"
        server.request("POST", collection_path(resource), encoded(seed_object(resource, name)))
    patch_types = ["application/merge-patch+json", "application/strategic-merge-patch+json",
                   "application/json-patch+json", "application/apply-patch+yaml"]

    @FUZZ
    @given(body=hostile_object(resource), patch=ANY_JSON, patch_type=st.sampled_from(
        patch_types), sub=st.sampled_from(["", *resource.subresources]))
    def check(body: dict[str, Any], patch: Any, patch_type: str, sub: str) -> None:
        if sub in ("log", "exec", "attach", "proxy", "allocated", "binding", "finalize"):
            sub = ""  # node-bound or POST-only; covered elsewhere
        target = f"{path}/{sub}" if sub else path
        body["metadata"]["name"] = name
        status, answer = server.request("PUT", target, encoded(body))
        assert_status_answer(status, answer, f"PUT {target}")
        status, answer = server.request("PATCH", target + "?fieldManager=fuzz", encoded(patch),
                                        content_type=patch_type)
        assert_status_answer(status, answer, f"PATCH {patch_type} {target}")

    check()


def seed_object(resource: Resource, name: str) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": resource.api_version, "kind": resource.kind,
                            "metadata": {"name": name}}
    if resource.kind == "Pod":
        body["spec"] = {"containers": [{"name": "c", "image": "busybox"}]}
    if resource.kind == "Event":
        body["involvedObject"] = {"kind": "Pod", "name": "p", "namespace": NAMESPACE}
    return body


def _template(restart: str = "Always") -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "fuzz"}}, "spec": {
        "restartPolicy": restart, "containers": [{"name": "c", "image": "busybox"}]}}


@cache
def _csr_request() -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    subject = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "fuzz")])
    request = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(
        ec.generate_private_key(ec.SECP256R1()), hashes.SHA256())
    return base64.b64encode(request.public_bytes(serialization.Encoding.PEM)).decode()


# What a valid object of each kind needs besides its metadata (its name, for the kinds whose
# name is made of its spec), so that a PUT or patch meets an object that exists.
VALID_FIELDS: dict[str, Any] = {
    "Service": lambda: {"spec": {"ports": [{"port": 80}]}},
    "RoleBinding": lambda: {"roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                        "kind": "ClusterRole", "name": "view"}},
    "ClusterRoleBinding": lambda: {"roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                               "kind": "ClusterRole", "name": "view"}},
    "CertificateSigningRequest": lambda: {"spec": {
        "request": _csr_request(), "signerName": "example.com/fuzz",
        "usages": ["digital signature"]}},
    "EndpointSlice": lambda: {"addressType": "IPv4"},
    "ReplicationController": lambda: {"spec": {"selector": {"app": "fuzz"},
                                               "template": _template()}},
    "Deployment": lambda: {"spec": {"selector": {"matchLabels": {"app": "fuzz"}},
                                    "template": _template()}},
    "ReplicaSet": lambda: {"spec": {"selector": {"matchLabels": {"app": "fuzz"}},
                                    "template": _template()}},
    "StatefulSet": lambda: {"spec": {"selector": {"matchLabels": {"app": "fuzz"}},
                                     "template": _template()}},
    "DaemonSet": lambda: {"spec": {"selector": {"matchLabels": {"app": "fuzz"}},
                                   "template": _template()}},
    "ControllerRevision": lambda: {"data": {}, "revision": 1},
    "Job": lambda: {"spec": {"template": _template("Never")}},
    "CronJob": lambda: {"spec": {"schedule": "* * * * *", "jobTemplate": {
        "spec": {"template": _template("Never")}}}},
    "Ingress": lambda: {"spec": {"defaultBackend": {"service": {"name": "s", "port": {
        "number": 80}}}}},
    "CSIStorageCapacity": lambda: {"storageClassName": "sc"},
    "CustomResourceDefinition": lambda: {
        "metadata": {"name": "targets.fuzz.example.com"}, "spec": {
            "group": "fuzz.example.com", "scope": "Namespaced",
            "names": {"plural": "targets", "kind": "Target"},
            "versions": [{"name": "v1", "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": {"type": "object"}}}]}},
    "APIService": lambda: {"metadata": {"name": "v1.fuzz.example.com"}, "spec": {
        "group": "fuzz.example.com", "version": "v1", "groupPriorityMinimum": 100,
        "versionPriority": 10}},
}


def valid_object(resource: Resource) -> dict[str, Any]:
    """A valid object of the resource's kind: `seed_object` with what its kind requires."""
    body = seed_object(resource, "target")
    fields = VALID_FIELDS.get(resource.kind)
    return {**body, **fields()} if fields else body


RAW_BODIES = st.one_of(
    st.binary(max_size=200),
    ANY_JSON.map(encoded),
    st.integers(1, 20000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 20000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.sampled_from([b"\xff\xfe", b"{", b"null", b"{}", b"[]", b'"x"', b"k8s\x00\x0a\x02v1",
                     b"k8s\x00" + bytes(range(256)), b"---\n- a\n---\n- b\n",
                     b"a: !!python/object/apply:os.system ['true']"]),
)
CONTENT_TYPES = st.sampled_from([
    "application/json", "application/yaml", "application/vnd.kubernetes.protobuf",
    "text/plain", "application/merge-patch+json", "application/json-patch+json",
    "application/strategic-merge-patch+json", "application/apply-patch+yaml", "x/y; q=1",
])  # (a header with control characters is refused by the HTTP parser, as Go's is)


@FUZZ
@given(resource=st.sampled_from(WRITABLE), method=st.sampled_from(["POST", "PUT", "PATCH"]),
       body=RAW_BODIES, content_type=CONTENT_TYPES)
def test_raw_bodies_and_content_types(server: Server, resource: Resource, method: str,
                                      body: bytes, content_type: str) -> None:
    path = collection_path(resource) + ("" if method == "POST" else "/x")
    status, answer = server.request(method, path, body, content_type=content_type)
    assert_status_answer(status, answer, f"{method} {path} {content_type}")


QUERY_VALUES = st.one_of(st.text(max_size=20), st.sampled_from(
    ["-1", "0", "1e9", "99999999999999999999", "abc", "true", "", "a=b,c", "!x", "x in (",
     "metadata.name=", "spec.nodeName!=", "Exact", "NotOlderThan", "\x00"]))
QUERY_NAMES = st.sampled_from(["resourceVersion", "resourceVersionMatch", "limit", "continue",
                               "labelSelector", "fieldSelector", "timeoutSeconds", "watch",
                               "allowWatchBookmarks", "sendInitialEvents", "dryRun",
                               "fieldValidation", "gracePeriodSeconds", "propagationPolicy",
                               "pretty", "fieldManager", "force"])


@FUZZ
@given(resource=st.sampled_from(RESOURCES), method=st.sampled_from(["GET", "DELETE"]),
       named=st.booleans(), query=st.dictionaries(QUERY_NAMES, QUERY_VALUES, max_size=4))
def test_hostile_queries(server: Server, resource: Resource, method: str, named: bool,
                         query: dict[str, str]) -> None:
    if query_flag(query, "watch"):  # upstream's conversion: `watch=` is a watch too
        query["timeoutSeconds"] = "1"  # a watch that is accepted ends quickly
    # A DELETE of a collection really deletes: in a namespace of its own, so that it never
    # takes the shared namespace's `default` ServiceAccount the other tests' pods need
    # (nothing in this bare apiserver makes it again), and as a dry run where there is no
    # namespace to keep it in (a DELETE of every Namespace would take the shared one).
    if method == "DELETE" and not resource.namespaced:
        query["dryRun"] = "All"
    path = collection_path(resource, HOSTILE_NAMESPACE) + ("/x" if named else "")
    status, answer = server.request_with_query(method, path, query)
    assert_status_answer(status, answer, f"{method} {path} {query}")


def test_over_size_body_is_413_whatever_the_framing(server: Server) -> None:
    big = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"k":"' \
        + b"x" * (MAX_BODY + 1) + b'"}}'
    status, answer = server.request("POST", collection_path(RESOURCES[2]), big)
    assert_status_answer(status, answer, "over-size body")
    assert status == 413
    assert json.loads(answer)["message"] == f"Request entity too large: limit is {MAX_BODY}"
    chunked = server.http.request(
        "POST", f"http://127.0.0.1:{server.port}{collection_path(RESOURCES[2])}",
        body=iter([big[i:i + 4096] for i in range(0, len(big), 4096)]),
        headers={"Content-Type": "application/json"}, chunked=True)
    assert chunked.status == 413
    # The server still answers normally afterwards.
    assert server.request("GET", "/api/v1/namespaces/fuzz")[0] == 200


# --- regressions: what the fuzzing found, pinned down -------------------------------------

DEEP = 5000  # far past the decoder's nesting limit, and past Python's recursion limit


def configmaps() -> str:
    return f"/api/v1/namespaces/{NAMESPACE}/configmaps"


def test_a_body_nested_too_deep_is_a_400_with_the_decoders_message(server: Server) -> None:
    unrecognized = ("the object provided is unrecognized (must be of type ConfigMap): couldn't "
                    "get version/kind; json parse error: exceeded max depth")
    status, answer = server.request("POST", configmaps(), b"[" * DEEP + b"]" * DEEP)
    assert (status, json.loads(answer)["message"]) == (
        400, f"{unrecognized} ({'5b' * 30} ...)")
    status, answer = server.request("POST", configmaps(),
                                    b'{"a":' * DEEP + b"1" + b"}" * DEEP)
    assert (status, json.loads(answer)["message"]) == (
        400, f'{unrecognized} ({{"a":{{"a":{{"a":{{"a":{{"a":{{"a": ...)')

    server.request("POST", configmaps(), encoded(seed_object(RESOURCES_BY_PLURAL["configmaps"],
                                                             "deep")))
    for patch in (b"[" * DEEP + b"]" * DEEP, b'{"a":' * DEEP + b"1" + b"}" * DEEP):
        status, answer = server.request("PATCH", f"{configmaps()}/deep", patch,
                                        content_type="application/merge-patch+json")
        assert (status, json.loads(answer)["message"]) == (
            400, "error decoding patch: exceeded max depth")


def test_an_unknown_control_character_field_is_warned_about_go_quoted(server: Server) -> None:
    server.request("POST", configmaps(), encoded(seed_object(RESOURCES_BY_PLURAL["configmaps"],
                                                             "ctl")))
    response = server.http.request(
        "PATCH", f"http://127.0.0.1:{server.port}{configmaps()}/ctl",
        body=json.dumps({"\x1f": 1}).encode(),
        headers={"Content-Type": "application/merge-patch+json"})
    assert response.status == 200, response.data
    # the field's name quoted as Go's %q does, then the header text's quotes and
    # backslashes escaped: 299 - "unknown field \"\\x1f\""
    assert response.headers.getlist("Warning") == ['299 - "unknown field \\"\\\\x1f\\""']


# --- JSON null in place of an object -------------------------------------------------------

NULL_DEPTH = 3  # spec.template.spec, for one (in a create; two levels in an update)
# Upstream's subresources that take the whole object (the others are POST-only or a
# different kind).
WHOLE_OBJECT_SUBRESOURCES = ("status", "approval")
DRY_RUN = "?dryRun=All"  # every rule up to the store, without its writes (the time they take)


def object_paths(node: dict[str, Any], depth: int) -> list[tuple[str, ...]]:
    """The paths of the object-typed fields of a schema node, `depth` levels down."""
    paths: list[tuple[str, ...]] = []
    for key, sub in (schema.resolve(node).get("properties") or {}).items():
        target = schema.resolve(sub)
        if target.get("type", "object") != "object" or not (
                "properties" in target or "additionalProperties" in target):
            continue
        paths.append((key,))
        if depth > 1:
            paths.extend((key, *rest) for rest in object_paths(target, depth - 1))
    return paths


def with_value(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of `obj` with `value` at `path` (its missing parents made)."""
    out = json.loads(json.dumps(obj))
    node = out
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = json.loads(json.dumps(value))
    return out


def outcome(status: int, answer: bytes, name: str, path: tuple[str, ...]
            ) -> tuple[int, str]:
    """The HTTP status and, for an error, its message with the object's name blanked. An
    object accepted never holds a null top-level struct (it would be stored so)."""
    if status < 300 and len(path) == 1 and path[0] in STRUCT_FIELDS:
        assert json.loads(answer).get(path[0], {}) is not None, (path, answer[:300])
    message = json.loads(answer)["message"] if status >= 400 else ""
    return status, message.replace(f'"{name}"', '""')


def put_latest(server: Server, path: str, target: str, field: tuple[str, ...], value: Any
               ) -> tuple[int, bytes]:
    """PUT to `target` the object at `path` as it is now with `value` at `field`, again
    when a controller of the apiserver (a CRD's names) changed it in between (409)."""
    for _ in range(5):
        status, current = server.request("GET", path)
        assert status == 200, current
        status, answer = server.request(
            "PUT", target, encoded(with_value(json.loads(current), field, value)))
        if status != 409:
            break
    return status, answer


@pytest.mark.parametrize("resource", WRITABLE, ids=lambda r: r.plural)
def test_null_in_place_of_an_object_is_never_a_server_error(server: Server,
                                                            resource: Resource) -> None:
    """JSON null for each object field of the kind, three levels down in a create, two in a
    PUT of an object that exists (and of its status) and in a JSON patch: never a 5xx. Null in a
    top-level field that is a struct in Go's types (`metadata`, `spec`, `status`, `roleRef`,
    ...) is that struct's zero value, as upstream's decoder reads it: answered as `{}` is."""
    paths = object_paths(schema.definition(resource.definition), NULL_DEPTH)
    seed = valid_object(resource)
    top = {path for path in paths if len(path) == 1 and path[0] in STRUCT_FIELDS}
    for path in paths:
        answers = []
        for value, name in ((None, "null-a"), ({}, "null-b")):
            body = with_value(seed, path, value)
            if path != ("metadata",):
                body["metadata"] = {**body.get("metadata", {}), "name": name}
            status, answer = server.request("POST", collection_path(resource) + DRY_RUN,
                                            encoded(body))
            assert_status_answer(status, answer, f"POST {resource.plural} {path} {value}")
            answers.append(outcome(status, answer, name, path))
            if value is not None and path not in top:
                break
        if path in top:
            assert answers[0] == answers[1], (path, answers)
    if resource not in UPDATABLE:
        return
    name = seed["metadata"]["name"] if resource.plural != "namespaces" else NAMESPACE
    base = collection_path(resource) if resource.plural != "namespaces" else "/api/v1/namespaces"
    status, answer = server.request("POST", base, encoded(seed))
    assert status in (201, 409), answer
    for sub in ("", *[s for s in resource.subresources if s in WHOLE_OBJECT_SUBRESOURCES]):
        target = f"{base}/{name}" + (f"/{sub}" if sub else "")
        for path in (p for p in paths if len(p) < NULL_DEPTH):
            answers = []
            for value in (None, {}):
                status, answer = put_latest(server, f"{base}/{name}", target + DRY_RUN, path,
                                            value)
                assert_status_answer(status, answer, f"PUT {target} {path} {value}")
                answers.append(outcome(status, answer, name, path))
                if value is not None and path not in top:
                    break
            if path in top:
                assert answers[0][0] == answers[1][0], (target, path, answers)
            patch = [{"op": "add", "path": "/" + "/".join(path), "value": None}]
            status, answer = server.request("PATCH", target + DRY_RUN, encoded(patch),
                                            content_type="application/json-patch+json")
            assert_status_answer(status, answer, f"PATCH {target} {path}")
