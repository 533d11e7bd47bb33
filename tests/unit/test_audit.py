"""The audit policy's rule matching, its file validation, the event shape and log rotation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ephemera.apiserver.audit import (
    AuditLog,
    AuditRecord,
    Decision,
    PolicyError,
    load_policy,
    parse_policy,
    read_events,
)
from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.authz import Attributes

ADMIN = UserInfo("kubernetes-admin", ("system:masters", "system:authenticated"))
NODE = UserInfo("system:node:n1", ("system:nodes", "system:authenticated"))


def resource(verb: str, res: str, sub: str = "", *, group: str = "", namespace: str = "d",
             name: str = "x", user: UserInfo = ADMIN) -> Attributes:
    return Attributes(user, verb, api_group=group, api_version="v1", resource=res,
                      subresource=sub, namespace=namespace, name=name)


def path(verb: str, url: str, user: UserInfo = ADMIN) -> Attributes:
    return Attributes(user, verb, resource_request=False, path=url)


@pytest.mark.parametrize(("attributes", "level"), [
    (resource("update", "pods", "dynamic"), "RequestResponse"),
    (resource("patch", "pods", "dynamic"), "RequestResponse"),
    (resource("get", "pods", "dynamic"), "RequestResponse"),
    (resource("create", "secrets"), "Metadata"),
    (resource("get", "secrets"), "Metadata"),
    (resource("update", "configmaps"), "Metadata"),
    (resource("create", "serviceaccounts", "token"), "Metadata"),
    (resource("create", "tokenreviews", group="authentication.k8s.io", namespace=""),
     "Metadata"),
    (path("get", "/healthz"), "None"),
    (path("get", "/readyz/ping"), "None"),
    (path("get", "/apis/coordination.k8s.io/v1"), "None"),
    (path("get", "/metrics"), "Metadata"),
    (resource("update", "leases", group="coordination.k8s.io", user=NODE), "None"),
    (resource("update", "leases", group="coordination.k8s.io"), "Request"),
    (resource("create", "events"), "None"),
    (resource("list", "pods", namespace=""), "Metadata"),
    (resource("create", "pods"), "Request"),
    (resource("patch", "pods", "status", user=NODE), "Request"),
])
def test_default_policy_levels(attributes: Attributes, level: str) -> None:
    assert load_policy().decide(attributes).level == level


def test_default_policy_omits_request_received_and_managed_fields_of_writes() -> None:
    decision = load_policy().decide(resource("create", "pods"))
    assert not decision.records("RequestReceived")
    assert decision.records("ResponseComplete")
    assert decision.omit_managed_fields
    assert not load_policy().decide(resource("update", "pods", "dynamic")).omit_managed_fields


def policy(*rules: dict[str, object], **top: object) -> dict[str, object]:
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": list(rules), **top}


@pytest.mark.parametrize(("pattern", "attributes", "matches"), [
    ("pods", resource("get", "pods"), True),
    ("pods", resource("get", "pods", "log"), False),
    ("pods/*", resource("get", "pods", "log"), True),
    ("pods/*", resource("get", "pods"), True),
    ("*/status", resource("patch", "nodes", "status"), True),
    ("*/status", resource("patch", "nodes"), False),
    ("*", resource("patch", "nodes", "status"), True),
    ("pods/log", resource("get", "pods", "log"), True),
    ("pods/log", resource("get", "pods", "exec"), False),
])
def test_resource_patterns(pattern: str, attributes: Attributes, matches: bool) -> None:
    p = parse_policy(policy({"level": "Metadata",
                             "resources": [{"group": "", "resources": [pattern]}]}))
    assert (p.decide(attributes).level == "Metadata") is matches


def test_rule_selectors_users_groups_verbs_namespaces_names() -> None:
    p = parse_policy(policy(
        {"level": "RequestResponse", "users": ["system:node:n1"]},
        {"level": "Request", "userGroups": ["system:masters"], "verbs": ["delete"]},
        {"level": "Metadata", "namespaces": ["kube-system"],
         "resources": [{"group": "", "resources": ["pods"], "resourceNames": ["a"]}]},
    ))
    assert p.decide(resource("get", "pods", user=NODE)).level == "RequestResponse"
    assert p.decide(resource("delete", "pods")).level == "Request"
    assert p.decide(resource("get", "pods", namespace="kube-system", name="a")).level \
        == "Metadata"
    assert p.decide(resource("get", "pods", namespace="kube-system", name="b")).level == "None"
    assert p.decide(resource("get", "pods", namespace="d", name="a")).level == "None"
    # A rule with namespaces never matches a non-resource request.
    assert p.decide(path("get", "/version")).level == "None"


def test_non_resource_rules_do_not_match_resource_requests() -> None:
    p = parse_policy(policy({"level": "Metadata", "nonResourceURLs": ["*"]}))
    assert p.decide(path("get", "/anything")).level == "Metadata"
    assert p.decide(resource("get", "pods")).level == "None"


@pytest.mark.parametrize(("document", "message"), [
    ({"kind": "Policy", "rules": [{"level": "None"}]},
     'the policy must have apiVersion "audit.k8s.io/v1" and kind "Policy"'),
    (policy(), "rules: Required value: the policy must have at least one rule"),
    (policy({"level": "Everything"}),
     'rules[0].level: Unsupported value: "Everything": supported values: "None", "Metadata", '
     '"Request", "RequestResponse"'),
    (policy({"level": "None", "verbs": "get"}), "rules[0].verbs: must be a list of strings"),
    (policy({"level": "None", "omitStages": ["Later"]}),
     'rules[0].omitStages: Unsupported value: "Later": supported values: "RequestReceived", '
     '"ResponseStarted", "ResponseComplete", "Panic"'),
    (policy({"level": "None", "nonResourceURLs": ["/x"],
             "resources": [{"resources": ["pods"]}]}),
     "rules[0].nonResourceURLs: Invalid value: rules cannot apply to both regular resources "
     "and non-resource URLs"),
])
def test_invalid_policies_name_the_field(document: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(document)
    assert str(err.value) == message


def test_load_policy_from_file(tmp_path: Path) -> None:
    file = tmp_path / "policy.yaml"
    file.write_text("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Request\n")
    assert load_policy(file).decide(resource("get", "secrets")).level == "Request"
    file.write_text("rules: [")
    with pytest.raises(PolicyError, match="not YAML"):
        load_policy(file)


def test_event_levels_decide_what_is_carried() -> None:
    attributes = resource("update", "pods", "dynamic", name="p1")
    body = {"kind": "Pod", "metadata": {"name": "p1", "managedFields": [{}]}}
    for level, has_request, has_response in (("Metadata", False, False),
                                            ("Request", True, False),
                                            ("RequestResponse", True, True)):
        record = AuditRecord(attributes, Decision(level), "/api/v1/namespaces/d/pods/p1/dynamic",
                             source_ips=("127.0.0.1",), user_agent="kubectl/v1.32")
        event = record.event("ResponseComplete", code=200, request_object=body,
                             response_object=body)
        assert event["level"] == level
        assert ("requestObject" in event) is has_request
        assert ("responseObject" in event) is has_response
        assert event["objectRef"] == {"resource": "pods", "namespace": "d", "name": "p1",
                                      "apiVersion": "v1", "subresource": "dynamic"}
        assert event["user"] == {"username": "kubernetes-admin",
                                 "groups": ["system:masters", "system:authenticated"]}
        assert event["responseStatus"] == {"metadata": {}, "code": 200}
        assert event["stageTimestamp"] >= event["requestReceivedTimestamp"]
    stripped = AuditRecord(attributes, Decision("Request", omit_managed_fields=True), "/x")
    event = stripped.event("ResponseComplete", request_object=body)
    assert event["requestObject"]["metadata"] == {"name": "p1"}
    assert body["metadata"]["managedFields"] == [{}]  # the caller's object is untouched


def test_an_impersonated_request_names_both_users() -> None:
    record = AuditRecord(resource("list", "pods"), Decision("Metadata"), "/api/v1/pods")
    assert "impersonatedUser" not in record.event("RequestReceived")
    record.impersonated_user = UserInfo("jane", ("system:authenticated",))
    event = record.event("ResponseComplete", code=200)
    assert event["user"]["username"] == "kubernetes-admin"
    assert event["impersonatedUser"] == {"username": "jane",
                                         "groups": ["system:authenticated"]}
    keys = list(event)
    assert keys.index("impersonatedUser") == keys.index("user") + 1


def test_failed_request_keeps_the_status_message() -> None:
    record = AuditRecord(resource("update", "pods", "dynamic"), Decision("Metadata"), "/x")
    event = record.event("ResponseComplete", code=403, status={
        "kind": "Status", "status": "Failure", "message": "forbidden", "reason": "Forbidden"})
    assert event["responseStatus"] == {"metadata": {}, "code": 403, "status": "Failure",
                                       "message": "forbidden", "reason": "Forbidden"}


def test_log_rotates_by_size_and_keeps_backups(tmp_path: Path) -> None:
    log_path = tmp_path / "audit" / "audit.log"
    log = AuditLog(log_path, max_size_bytes=400, max_backups=2)
    record = AuditRecord(resource("create", "pods"), Decision("Metadata"), "/api/v1/pods")
    written = [record.event("ResponseComplete", code=201) for _ in range(12)]
    for event in written:
        log.write(event)
    log.close()
    backups = log.backups()
    assert len(backups) == 2
    assert all(p.name.startswith("audit-") and p.suffix == ".log" for p in backups)
    kept = [e for p in [*backups, log_path] for e in read_events(p)]
    # Every kept line is one whole event, the newest ones are kept, in order.
    assert kept == written[-len(kept):]
    assert oct(log_path.stat().st_mode & 0o777) == "0o600"


WRITER = """
import sys
from pathlib import Path
from ephemera.apiserver.audit import AuditLog
log = AuditLog(Path(sys.argv[1]), max_size_bytes=2000, max_backups=0, shared=True)
for i in range(150):
    log.write({"writer": sys.argv[2], "i": i, "pad": "x" * 100})
log.close()
"""


def test_shared_log_takes_whole_lines_from_processes_that_rotate_it(tmp_path: Path) -> None:
    """`apiserver --workers`: several processes append to one log and rotate it; every event
    is kept once, whole, in each writer's order. The writers are fresh interpreters: a fork
    of this test process would inherit whatever gRPC threads earlier tests left running."""
    log_path = tmp_path / "audit.log"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(log_path), name])
               for name in ("a", "b", "c")]
    for process in writers:
        assert process.wait(60) == 0
    log = AuditLog(log_path, max_backups=0)
    files = [*log.backups(), log_path]
    log.close()
    assert len(files) > 10  # rotated many times, by all of them
    events = [e for p in files for e in read_events(p)]
    for name in ("a", "b", "c"):
        assert [e["i"] for e in events if e["writer"] == name] == list(range(150))
    assert all(p.stat().st_size <= 2000 for p in files)
