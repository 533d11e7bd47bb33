"""The admission seam (`ephemera.apiserver.admission`) through the HTTP API: plugins run in
the configured order, mutating before the strategy's create/update rules and validation,
validating after them and before the store write; what each phase sees on create, update,
`/status`, delete and `pods/binding`; dryRun; a mutating plugin's changes are validated; the
NamespaceLifecycle plugin; the default chain in upstream's order."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from apiserver_fixtures import Api, configmap, pod, serve

from ephemera.api.errors import StatusError
from ephemera.apiserver.admission import (
    PLUGIN_ORDER,
    AdmissionChain,
    AdmissionPluginBase,
    AdmissionRequest,
    build_chain,
    default_plugins,
    ordered,
)
from ephemera.apiserver.app import REGISTRY
from ephemera.apiserver.resources import lookup
from ephemera.store import open_store

PODS = "/api/v1/namespaces/default/pods"
CMS = "/api/v1/namespaces/default/configmaps"
MERGE = "application/merge-patch+json"


@dataclass
class Seen:
    plugin: str
    phase: str
    operation: str
    subresource: str
    name: str
    dry_run: bool
    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    stored: bool  # the object was in the store when the phase ran


@dataclass
class Recorder(AdmissionPluginBase):
    """Records what it sees; may reject or mutate."""

    name: str = "Recorder"
    log: list[Seen] = field(default_factory=list)
    reject_in: str = ""  # "admit" or "validate"
    label: tuple[str, str] | None = None  # set in admit
    journal: list[str] = field(default_factory=list)  # "<plugin>.<phase>", shared

    def __post_init__(self) -> None:
        super().__init__()

    def handles(self, req: AdmissionRequest) -> bool:
        return req.resource.plural in ("pods", "configmaps")

    async def _record(self, phase: str, req: AdmissionRequest) -> None:
        stored = False
        if req.name:
            try:
                await self.context.get(req.resource, req.namespace, req.name)
                stored = True
            except StatusError as err:
                assert err.code == 404

        self.log.append(Seen(self.name, phase, req.operation, req.subresource, req.name,
                             req.dry_run, _copy(req.obj), _copy(req.old), stored))
        self.journal.append(f"{self.name}.{phase}")
        if self.reject_in == phase:
            raise req.forbidden(f"{self.name} says no")

    async def admit(self, req: AdmissionRequest) -> None:
        if self.label is not None and req.obj is not None and req.operation != "DELETE":
            req.obj.setdefault("metadata", {}).setdefault("labels", {})[self.label[0]] = \
                self.label[1]
        await self._record("admit", req)

    async def validate(self, req: AdmissionRequest) -> None:
        await self._record("validate", req)


def _copy(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    return copy.deepcopy(obj) if obj is not None else None


@pytest.fixture
def journal() -> list[str]:
    return []


@pytest.fixture
def first(journal: list[str]) -> Recorder:
    return Recorder(name="First", journal=journal)


@pytest.fixture
def second(journal: list[str]) -> Recorder:
    return Recorder(name="Second", journal=journal)


@pytest.fixture
async def chain_api(tmp_path: Path, first: Recorder, second: Recorder) -> AsyncIterator[Api]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    plugins = ["NamespaceLifecycle", first, "ServiceAccount", "Priority",
               "DefaultTolerationSeconds", "NodeDeclaredFeatureValidator", second]
    try:
        async for served in serve(store, admission_plugins=plugins):
            yield served
    finally:
        await store.close()


async def test_create_runs_mutating_then_validation_then_validating(
        chain_api: Api, first: Recorder, second: Recorder, journal: list[str]) -> None:
    status, created = await chain_api.post(PODS, pod("p1"))
    assert status == 201, created
    assert journal == ["First.admit", "Second.admit", "First.validate", "Second.validate"]
    admit_first, admit_second = first.log[0], second.log[0]
    validate_first = first.log[1]
    assert admit_first.operation == "CREATE" and admit_first.subresource == ""
    assert admit_first.old is None and not admit_first.dry_run
    assert admit_first.obj is not None and admit_second.obj is not None
    # defaults (on decode) come before the mutating phase ...
    assert admit_first.obj["spec"]["restartPolicy"] == "Always"
    # ... BeforeCreate after it (status, uid), and the ServiceAccount plugin between the two
    assert "status" not in admit_first.obj and "uid" not in admit_first.obj["metadata"]
    assert "serviceAccountName" not in admit_first.obj["spec"]
    assert admit_second.obj["spec"]["serviceAccountName"] == "default"
    # the validating phase sees the prepared object, not yet stored
    assert validate_first.obj is not None
    assert validate_first.obj["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert validate_first.obj["metadata"]["uid"] == created["metadata"]["uid"]
    assert not validate_first.stored


async def test_a_mutating_plugins_changes_are_validated(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    labeller = Recorder(name="Labeller", label=("team", "-bad-"))
    try:
        async for api in serve(store, admission_plugins=[labeller]):
            status, body = await api.post(CMS, configmap("c1"))
            assert status == 422
            assert [c["field"] for c in body["details"]["causes"]] == ["metadata.labels"]
            assert [s.phase for s in labeller.log] == ["admit"]
            labeller.label = ("team", "blue")
            status, body = await api.post(CMS, configmap("c1"))
            assert status == 201
            assert body["metadata"]["labels"] == {"team": "blue"}
    finally:
        await store.close()


async def test_validation_errors_come_before_validating_admission(
        chain_api: Api, journal: list[str]) -> None:
    bad = pod("p1")
    bad["spec"]["containers"][0]["image"] = ""
    status, body = await chain_api.post(PODS, bad)
    assert status == 422, body
    assert journal == ["First.admit", "Second.admit"]


async def test_a_rejection_stops_the_write(chain_api: Api, first: Recorder,
                                           second: Recorder) -> None:
    second.reject_in = "validate"
    status, body = await chain_api.post(PODS, pod("p1"))
    assert status == 403
    assert body["message"] == 'pods "p1" is forbidden: Second says no'
    assert (await chain_api.get(f"{PODS}/p1"))[0] == 404
    second.reject_in = ""
    first.reject_in = "admit"
    second.log.clear()
    status, body = await chain_api.post(PODS, pod("p1"))
    assert status == 403
    assert body["message"] == 'pods "p1" is forbidden: First says no'
    assert second.log == []  # the chain stops at the first rejection


async def test_dry_run_runs_admission_and_stores_nothing(chain_api: Api, first: Recorder,
                                                         second: Recorder) -> None:
    status, body = await chain_api.post(f"{PODS}?dryRun=All", pod("p1"))
    assert status == 201, body
    assert [(s.phase, s.dry_run) for s in second.log] == [("admit", True), ("validate", True)]
    assert (await chain_api.get(f"{PODS}/p1"))[0] == 404
    await chain_api.create_pod("p2")
    second.log.clear()
    status, body = await chain_api.patch(f"{PODS}/p2?dryRun=All",
                                         {"metadata": {"labels": {"a": "b"}}}, MERGE)
    assert status == 200
    assert [(s.operation, s.dry_run) for s in second.log] == [("UPDATE", True)] * 2
    second.log.clear()
    status, _ = await chain_api.delete(f"{PODS}/p2?dryRun=All")
    assert status == 200
    assert [(s.operation, s.dry_run) for s in second.log] == [("DELETE", True)] * 2
    assert (await chain_api.get(f"{PODS}/p2"))[0] == 200


async def test_update_status_and_delete_requests(chain_api: Api, second: Recorder) -> None:
    created = await chain_api.create_pod("p1")
    second.log.clear()
    status, body = await chain_api.patch(f"{PODS}/p1", {"spec": {"activeDeadlineSeconds": 60}},
                                         MERGE)
    assert status == 200, body
    admit, validate = second.log
    assert (admit.operation, admit.subresource, admit.name) == ("UPDATE", "", "p1")
    assert admit.old is not None and admit.old["metadata"]["generation"] == 1
    assert admit.obj is not None and admit.obj["spec"]["activeDeadlineSeconds"] == 60
    assert validate.obj is not None and validate.obj["metadata"]["generation"] == 2
    assert validate.stored

    second.log.clear()
    status, body = await chain_api.patch(f"{PODS}/p1/status", {"status": {"phase": "Running"}},
                                         MERGE)
    assert status == 200
    assert {(s.operation, s.subresource) for s in second.log} == {("UPDATE", "status")}

    second.log.clear()
    status, body = await chain_api.delete(f"{PODS}/p1")
    assert status == 200
    admit, validate = second.log
    assert (admit.operation, admit.obj, admit.old) == ("DELETE", None, None)
    assert validate.old is not None
    assert validate.old["metadata"]["uid"] == created["metadata"]["uid"]


async def test_binding_is_admitted_as_a_create_of_the_subresource(chain_api: Api,
                                                                  second: Recorder) -> None:
    await chain_api.create_pod("p1")
    second.log.clear()
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    second.reject_in = "validate"
    status, body = await chain_api.post(f"{PODS}/p1/binding", binding)
    assert (status, body["message"]) == (403, 'pods "p1" is forbidden: Second says no')
    _, got = await chain_api.get(f"{PODS}/p1")
    assert "nodeName" not in got["spec"]
    admit = second.log[0]
    assert (admit.operation, admit.subresource, admit.name) == ("CREATE", "binding", "p1")
    assert admit.obj is not None and admit.obj["kind"] == "Binding"


# --- NamespaceLifecycle --------------------------------------------------------------------


async def test_namespace_lifecycle_answers_before_validation(api: Api) -> None:
    bad = pod("p1")
    bad["spec"]["containers"] = []
    status, body = await api.post("/api/v1/namespaces/nope/pods", bad)
    assert (status, body["message"]) == (404, 'namespaces "nope" not found')
    status, body = await api.delete("/api/v1/namespaces/default")
    assert (status, body["message"]) == (
        403, 'namespaces "default" is forbidden: this namespace may not be deleted')
    status, _ = await api.post("/api/v1/namespaces", {"metadata": {"name": "team"}})
    assert status == 201
    await api.create_pod("p1", namespace="team", node="n1")  # holds the namespace a while
    status, _ = await api.delete("/api/v1/namespaces/team")
    assert status == 200
    status, body = await api.post("/api/v1/namespaces/team/configmaps", configmap("c1"))
    assert status == 403
    assert body["message"] == ('configmaps "c1" is forbidden: unable to create new content in '
                               "namespace team because it is being terminated")
    assert body["details"]["causes"] == [{"reason": "NamespaceTerminating",
                                          "message": "namespace team is being terminated",
                                          "field": "metadata.namespace"}]


# --- the chain itself ---------------------------------------------------------------------


def test_default_chain_is_in_upstream_order(api: Api) -> None:
    names = default_plugins()
    assert ordered(names) == names
    mine = ["NamespaceLifecycle", "ServiceAccount", "Priority", "DefaultTolerationSeconds",
            "NodeDeclaredFeatureValidator"]
    assert [n for n in names if n in mine] == mine
    assert set(names) <= set(PLUGIN_ORDER)
    assert api.app[REGISTRY].admission.names == names
    assert ordered(["ResourceQuota", "ServiceAccount", "LimitRanger", "NamespaceLifecycle"]) \
        == ["NamespaceLifecycle", "LimitRanger", "ServiceAccount", "ResourceQuota"]


def test_unknown_plugins_are_refused() -> None:
    with pytest.raises(ValueError, match="admission plugin 'AlwaysDeny' is unknown"):
        build_chain(["AlwaysDeny"])
    assert build_chain([]).names == []


async def test_forbidden_names_the_object(api: Api) -> None:
    registry = api.app[REGISTRY]
    resource = lookup("", "v1", "pods")
    assert resource is not None
    req = registry.admission_request("CREATE", resource, "default", "",
                                     {"metadata": {"generateName": "web-"}})
    err = req.forbidden("nope")
    assert isinstance(err, StatusError)
    assert (err.code, err.reason, err.message) == (403, "Forbidden",
                                                   'pods "web-" is forbidden: nope')
    chain = AdmissionChain([Recorder(name="R")])
    await chain.admit(req)
    assert chain.names == ["R"]


async def test_every_plugin_gets_the_apiserver_s_context(api: Api) -> None:
    """The app hands every plugin the same context (the caches and the quota writer); a plugin
    used without one is a wiring error, not a silent store read."""
    chain = api.app[REGISTRY].admission
    assert isinstance(chain, AdmissionChain)
    contexts = {id(p.context) for p in chain.plugins if isinstance(p, AdmissionPluginBase)}
    assert len(contexts) == 1
    context = next(p.context for p in chain.plugins if isinstance(p, AdmissionPluginBase))
    assert context.namespaces is not None  # the namespace lifecycle's cache
    accounts = lookup("", "v1", "serviceaccounts")
    assert accounts is not None
    account = await context.cached_get(accounts, "default", "default")
    assert account["metadata"]["name"] == "default"
    with pytest.raises(StatusError) as err:
        await context.get(accounts, "default", "nobody")
    assert err.value.code == 404
    with pytest.raises(RuntimeError, match="admission plugin R has no context"):
        _ = Recorder(name="R").context


async def test_an_updates_old_object_is_the_same_in_both_phases(chain_api: Api,
                                                                 second: Recorder) -> None:
    """`req.old` is the stored object, unchanged by the strategy's BeforeUpdate between the
    phases (admission reads it as it is, not a copy)."""
    await chain_api.create_pod("p1")
    for path, body in ((f"{PODS}/p1", {"spec": {"activeDeadlineSeconds": 60},
                                       "status": {"phase": "Failed"}}),
                       (f"{PODS}/p1/status", {"spec": {"activeDeadlineSeconds": 30},
                                              "status": {"phase": "Running"}})):
        status, before = await chain_api.get(f"{PODS}/p1")
        assert status == 200
        second.log.clear()
        status, after = await chain_api.patch(path, body, MERGE)
        assert status == 200, after
        admit, validate = second.log
        assert admit.old == validate.old == before
