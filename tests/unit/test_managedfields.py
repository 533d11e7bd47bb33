"""Server-side apply and managedFields bookkeeping: fieldsV1 sets, create/merge/conflict/force,
removal of fields an applier stops applying, record_update for non-apply writes, and the
upstream details (kubectl's takeover from client-side apply, before-first-apply, resets)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from ephemera.api import managedfields
from ephemera.api.errors import StatusError
from ephemera.api.managedfields import (
    LAST_APPLIED_ANNOTATION,
    ApplyConflict,
    decode_fields,
    encode_fields,
    record_update,
    server_side_apply,
)

POD = "io.k8s.api.core.v1.Pod"
CONFIGMAP = "io.k8s.api.core.v1.ConfigMap"


def config(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "p", "namespace": "default", **meta}}
    if spec is not None:
        obj["spec"] = spec
    return obj


def one_container(image: str = "busybox", **extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": image, **extra}]}


def entries(obj: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(e["manager"], e["operation"]): e for e in obj["metadata"].get("managedFields", [])}


def created(manager: str = "kubectl-create", **meta: Any) -> dict[str, Any]:
    """A pod as the apiserver stores it after a create by `manager`."""
    obj = config(one_container(), uid="u-1", resourceVersion="1",
                 creationTimestamp="2024-01-01T00:00:00Z", **meta)
    obj["status"] = {"phase": "Pending"}
    record_update(None, obj, manager, POD, "v1", now="2024-01-01T00:00:00Z")
    return obj


CONTAINER_C = 'k:{"name":"c"}'


# --- fieldsV1 ---------------------------------------------------------------------------------


def test_fields_v1_round_trip_and_order() -> None:
    fields = {
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:spec": {"f:containers": {
            'k:{"name":"b"}': {".": {}, "f:name": {}},
            'k:{"name":"a"}': {".": {}, "f:ports": {
                'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}}},
        }},
        "f:metadata2": {},
    }
    encoded = encode_fields(decode_fields(fields))
    assert json.dumps(encoded) == json.dumps({
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:metadata2": {},
        "f:spec": {"f:containers": {
            'k:{"name":"a"}': {".": {}, "f:ports": {
                'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}}},
            'k:{"name":"b"}': {".": {}, "f:name": {}},
        }},
    })


@pytest.mark.parametrize("bad", [{"x:y": {}}, {"f:a": 1}, {".": {}}, {"k:[1]": {}}])
def test_malformed_fields_v1_is_rejected(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        decode_fields(bad)


# --- record_update ----------------------------------------------------------------------------


def test_create_records_every_field_for_the_manager() -> None:
    obj = created(labels={"app": "web"})
    assert obj["metadata"]["managedFields"] == [{
        "manager": "kubectl-create", "operation": "Update", "apiVersion": "v1",
        "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {CONTAINER_C: {".": {}, "f:image": {}, "f:name": {}}}},
        },
    }], "name, uid, resourceVersion, creationTimestamp and status are not owned"


def test_configmap_data_owns_the_map_itself() -> None:
    cm: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
                          "data": {"k": "v"}}
    record_update(None, cm, "kubectl-create", CONFIGMAP, "v1", now="t")
    assert cm["metadata"]["managedFields"][0]["fieldsV1"] == {"f:data": {".": {}, "f:k": {}}}


def test_update_moves_changed_fields_and_forgets_removed_ones() -> None:
    old = created(labels={"app": "web"})
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = "nginx"
    del new["metadata"]["labels"]
    record_update(old, new, "kubectl-edit", POD, "v1", now="2024-01-02T00:00:00Z")
    got = entries(new)
    assert got[("kubectl-create", "Update")]["fieldsV1"] == {
        "f:spec": {"f:containers": {CONTAINER_C: {".": {}, "f:name": {}}}}}
    assert got[("kubectl-edit", "Update")] == {
        "manager": "kubectl-edit", "operation": "Update", "apiVersion": "v1",
        "time": "2024-01-02T00:00:00Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:containers": {CONTAINER_C: {"f:image": {}}}}}}
    assert [e["manager"] for e in new["metadata"]["managedFields"]] == [
        "kubectl-create", "kubectl-edit"], "sorted by operation, then time"


def test_no_op_update_leaves_managed_fields_alone() -> None:
    old = created()
    new = copy.deepcopy(old)
    new["metadata"]["resourceVersion"] = "2"
    new["metadata"]["generation"] = 3
    record_update(old, new, "kubectl-edit", POD, "v1", now="later")
    assert new["metadata"]["managedFields"] == old["metadata"]["managedFields"]


def test_update_without_managed_fields_in_the_body_keeps_the_live_ones() -> None:
    old = created()
    new = copy.deepcopy(old)
    del new["metadata"]["managedFields"]
    new["spec"]["nodeName"] = "n1"
    record_update(old, new, "kube-scheduler", POD, "v1", now="t2")
    got = entries(new)
    assert set(got) == {("kubectl-create", "Update"), ("kube-scheduler", "Update")}
    assert got[("kube-scheduler", "Update")]["fieldsV1"] == {"f:spec": {"f:nodeName": {}}}


@pytest.mark.parametrize("reset", [[], [{}]])
def test_managed_fields_can_be_reset(reset: list[Any]) -> None:
    old = created()
    new = copy.deepcopy(old)
    new["metadata"]["managedFields"] = reset
    record_update(old, new, "kubectl-edit", POD, "v1", now="t2")
    assert "managedFields" not in new["metadata"]


def test_status_subresource_owns_only_status() -> None:
    old = created()
    new = copy.deepcopy(old)
    new["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    new["spec"]["nodeName"] = "ignored-by-the-status-strategy"
    record_update(old, new, "kubelet", POD, "v1", subresource="status", now="t2")
    status_entry = [e for e in new["metadata"]["managedFields"] if e["manager"] == "kubelet"]
    assert status_entry == [{
        "manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "t2",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:conditions": {".": {}, 'k:{"type":"Ready"}': {
            ".": {}, "f:status": {}, "f:type": {}}}, "f:phase": {}}},
        "subresource": "status"}]


def test_at_most_ten_update_managers() -> None:
    obj = created()
    for i in range(12):
        new = copy.deepcopy(obj)
        new["metadata"].setdefault("labels", {})[f"l{i}"] = "x"
        record_update(obj, new, f"m{i:02d}", POD, "v1", now=f"2024-01-01T00:00:{i + 10:02d}Z")
        obj = new
    managers = [e["manager"] for e in obj["metadata"]["managedFields"]]
    assert len(managers) == 10
    assert "ancient-changes" in managers
    ancient = entries(obj)[("ancient-changes", "Update")]
    assert ancient["fieldsV1"]["f:spec"] == {
        "f:containers": {CONTAINER_C: {".": {}, "f:image": {}, "f:name": {}}}}
    assert set(ancient["fieldsV1"]["f:metadata"]["f:labels"]) >= {"f:l0", "f:l1"}


def test_existing_object_without_managed_fields_stays_untracked() -> None:
    old = config(one_container(), uid="u-1")
    new = copy.deepcopy(old)
    new["spec"]["nodeName"] = "n1"
    record_update(old, new, "kube-scheduler", POD, "v1", now="t")
    assert "managedFields" not in new["metadata"]


# --- server-side apply ------------------------------------------------------------------------


def test_apply_creates_the_object() -> None:
    applied = config(one_container(ports=[{"containerPort": 80}]), labels={"app": "web"})
    applied["status"] = {"phase": "Running"}
    before = copy.deepcopy(applied)
    obj = server_side_apply(None, applied, "kubectl", False, POD, "v1", now="t1")
    assert applied == before
    assert "status" not in obj, "status belongs to the status subresource"
    assert obj["spec"] == one_container(ports=[{"containerPort": 80}])
    assert obj["metadata"]["managedFields"] == [{
        "manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": "t1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {"f:containers": {CONTAINER_C: {
                ".": {}, "f:image": {}, "f:name": {},
                "f:ports": {'k:{"containerPort":80,"protocol":"TCP"}': {
                    ".": {}, "f:containerPort": {}}}}}},
        },
    }]


def test_apply_merges_into_the_live_object() -> None:
    live = created(labels={"app": "web"})
    obj = server_side_apply(
        live, config({"containers": [{"name": "c", "image": "busybox"},
                                     {"name": "sidecar", "image": "envoy"}]},
                     labels={"tier": "db"}),
        "ssa", False, POD, "v1", now="t2")
    assert obj["metadata"]["labels"] == {"app": "web", "tier": "db"}
    assert [c["name"] for c in obj["spec"]["containers"]] == ["c", "sidecar"]
    assert obj["status"] == {"phase": "Pending"}, "the live status is kept"
    assert obj["metadata"]["uid"] == "u-1"
    ssa = entries(obj)[("ssa", "Apply")]
    assert ssa["fieldsV1"]["f:spec"]["f:containers"] == {
        CONTAINER_C: {".": {}, "f:image": {}, "f:name": {}},
        'k:{"name":"sidecar"}': {".": {}, "f:image": {}, "f:name": {}}}
    create = entries(obj)[("kubectl-create", "Update")]
    assert create["fieldsV1"]["f:spec"]["f:containers"][CONTAINER_C] == {
        ".": {}, "f:image": {}, "f:name": {}}, "same value: shared ownership, no conflict"


def test_an_applied_null_drops_a_scalar_and_keeps_a_live_map_or_list() -> None:
    """structured-merge-diff: a null map or list merged into a non-empty live one keeps the
    live entries (and the applier owns the field itself); a null scalar (or a null where
    the live value is empty) leaves null, which decodes as unset."""
    live = created(labels={"app": "web"})
    live["spec"]["restartPolicy"] = "Always"
    applied = config({"containers": None, "restartPolicy": None, "volumes": None},
                     labels=None)
    applied["status"] = None
    obj = server_side_apply(live, applied, "ssa", True, POD, "v1", now="t2")
    assert obj["metadata"]["labels"] == {"app": "web"}
    assert obj["spec"]["containers"] == live["spec"]["containers"]
    assert obj["status"] == {"phase": "Pending"}
    assert "restartPolicy" not in obj["spec"]
    assert "volumes" not in obj["spec"]
    ssa = entries(obj)[("ssa", "Apply")]["fieldsV1"]
    assert ssa["f:spec"] == {"f:containers": {}, "f:restartPolicy": {}, "f:volumes": {}}
    assert ssa["f:metadata"]["f:labels"] == {}


def test_conflict_after_create_is_409_with_upstream_message() -> None:
    live = created()
    with pytest.raises(ApplyConflict) as info:
        server_side_apply(live, config(one_container("nginx")), "ssa", False, POD, "v1")
    assert info.value.status() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'Apply failed with 1 conflict: conflict with "kubectl-create" using v1: '
                   '.spec.containers[name="c"].image',
        "reason": "Conflict",
        "details": {"causes": [{"reason": "FieldManagerConflict",
                                "message": 'conflict with "kubectl-create" using v1',
                                "field": '.spec.containers[name="c"].image'}]},
        "code": 409}
    assert isinstance(info.value, StatusError)


def test_conflict_with_client_side_apply() -> None:
    live = created("kubectl-client-side-apply")
    with pytest.raises(StatusError) as info:
        server_side_apply(live, config(one_container("nginx")), "other", False, POD, "v1")
    assert info.value.message == (
        'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: '
        '.spec.containers[name="c"].image')


def test_several_conflicts() -> None:
    live = created(labels={"app": "web"})
    applied = config(one_container("nginx"), labels={"app": "db"})
    with pytest.raises(ApplyConflict) as info:
        server_side_apply(live, applied, "m", False, POD, "v1")
    assert info.value.message == (
        'Apply failed with 2 conflicts: conflicts with "kubectl-create" using v1:\n'
        "- .metadata.labels.app\n"
        '- .spec.containers[name="c"].image')
    assert [c["field"] for c in (info.value.details or {})["causes"]] == [
        ".metadata.labels.app", '.spec.containers[name="c"].image']


def test_conflict_with_another_applier_names_it_without_version() -> None:
    live = server_side_apply(None, config(one_container()), "first", False, POD, "v1")
    with pytest.raises(ApplyConflict) as info:
        server_side_apply(live, config(one_container("nginx")), "second", False, POD, "v1")
    assert info.value.message == ('Apply failed with 1 conflict: conflict with "first": '
                                  '.spec.containers[name="c"].image')


def test_force_moves_ownership() -> None:
    live = created()
    obj = server_side_apply(live, config(one_container("nginx")), "ssa", True, POD, "v1",
                            now="t2")
    assert obj["spec"]["containers"][0]["image"] == "nginx"
    got = entries(obj)
    assert got[("kubectl-create", "Update")]["fieldsV1"]["f:spec"] == {
        "f:containers": {CONTAINER_C: {".": {}, "f:name": {}}}}
    assert got[("ssa", "Apply")]["fieldsV1"]["f:spec"] == {
        "f:containers": {CONTAINER_C: {".": {}, "f:image": {}, "f:name": {}}}}
    # Now the old owner conflicts when it writes through apply.
    with pytest.raises(ApplyConflict):
        server_side_apply(obj, config(one_container("busybox")), "kubectl-create", False, POD,
                          "v1")


def test_fields_no_longer_applied_are_removed() -> None:
    first = config({"containers": [{"name": "c", "image": "busybox", "workingDir": "/w"},
                                   {"name": "d", "image": "x"}]},
                   labels={"a": "1", "b": "2"})
    obj = server_side_apply(None, first, "m", False, POD, "v1", now="t1")
    second = config({"containers": [{"name": "c", "image": "busybox"}]}, labels={"a": "1"})
    obj = server_side_apply(obj, second, "m", False, POD, "v1", now="t2")
    assert obj["spec"]["containers"] == [{"name": "c", "image": "busybox"}]
    assert obj["metadata"]["labels"] == {"a": "1"}
    assert entries(obj)[("m", "Apply")]["time"] == "t2"


def test_fields_another_manager_owns_are_kept() -> None:
    obj = server_side_apply(None, config(one_container(), labels={"a": "1", "b": "2"}), "m",
                            False, POD, "v1")
    obj = server_side_apply(obj, config(labels={"b": "2"}), "other", False, POD, "v1")
    obj = server_side_apply(obj, config(one_container()), "m", False, POD, "v1")
    assert obj["metadata"]["labels"] == {"b": "2"}, "a removed, b still owned by other"


def test_fields_set_by_an_update_are_kept_when_an_applier_stops_applying_them() -> None:
    obj = server_side_apply(None, config(one_container(), labels={"a": "1"}), "m", False, POD,
                            "v1")
    new = copy.deepcopy(obj)
    new["metadata"]["labels"]["a"] = "2"
    record_update(obj, new, "kubectl-label", POD, "v1")
    obj = server_side_apply(new, config(one_container()), "m", False, POD, "v1")
    assert obj["metadata"]["labels"] == {"a": "2"}


def test_no_op_apply_keeps_the_time() -> None:
    obj = server_side_apply(None, config(one_container()), "m", False, POD, "v1", now="t1")
    again = server_side_apply(obj, config(one_container()), "m", False, POD, "v1", now="t2")
    assert again == obj


def test_null_in_the_configuration_removes_the_field() -> None:
    obj = server_side_apply(None, config(one_container(workingDir="/w")), "m", False, POD, "v1")
    obj = server_side_apply(obj, config(one_container(workingDir=None)), "m", False, POD, "v1")
    assert obj["spec"]["containers"] == [{"name": "c", "image": "busybox"}]


def test_apply_on_status_subresource_keeps_spec() -> None:
    live = created()
    applied = config(one_container("ignored"))
    applied["status"] = {"phase": "Running"}
    obj = server_side_apply(live, applied, "kubelet", False, POD, "v1", subresource="status",
                            now="t2")
    assert obj["status"] == {"phase": "Running"}
    assert obj["spec"] == live["spec"]
    entry = entries(obj)[("kubelet", "Apply")]
    assert entry["subresource"] == "status"
    assert entry["fieldsV1"] == {"f:status": {"f:phase": {}}}


def test_first_apply_to_an_untracked_object_attributes_existing_fields() -> None:
    live = config(one_container(), uid="u-1")
    with pytest.raises(ApplyConflict) as info:
        server_side_apply(live, config(one_container("nginx")), "m", False, POD, "v1")
    assert info.value.message == (
        'Apply failed with 1 conflict: conflict with "before-first-apply" using v1: '
        '.spec.containers[name="c"].image')


def test_kubectl_takes_over_from_client_side_apply_without_conflicts() -> None:
    last_applied = json.dumps(config(one_container()))
    live = created("kubectl-client-side-apply",
                   annotations={LAST_APPLIED_ANNOTATION: last_applied})
    applied = config(one_container("nginx"))
    # Another manager conflicts ...
    with pytest.raises(ApplyConflict):
        server_side_apply(live, applied, "someone", False, POD, "v1")
    # ... but kubectl's server-side apply takes over what client-side apply set.
    obj = server_side_apply(live, applied, "kubectl", False, POD, "v1", now="t2")
    assert obj["spec"]["containers"][0]["image"] == "nginx"
    csa = entries(obj)[("kubectl-client-side-apply", "Update")]
    assert "f:image" not in csa["fieldsV1"]["f:spec"]["f:containers"][CONTAINER_C]
    annotation = obj["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]
    assert annotation.endswith("\n")
    assert json.loads(annotation) == applied, "the annotation follows the applied config"


def test_kubectl_still_conflicts_on_fields_changed_since_client_side_apply() -> None:
    live = created("kubectl-client-side-apply",
                   annotations={LAST_APPLIED_ANNOTATION: json.dumps(config(one_container()))})
    changed = copy.deepcopy(live)
    changed["spec"]["containers"][0]["image"] = "edited"
    record_update(live, changed, "kubectl-edit", POD, "v1")
    with pytest.raises(ApplyConflict) as info:
        server_side_apply(changed, config(one_container("nginx")), "kubectl", False, POD, "v1")
    assert info.value.message.endswith('conflict with "kubectl-edit" using v1: '
                                       '.spec.containers[name="c"].image')


@pytest.mark.parametrize(("applied", "message"), [
    ({"apiVersion": "v2", "kind": "Pod", "metadata": {"name": "p"}},
     "invalid object type: /v2, Kind=Pod"),
    ({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "p"}},
     "invalid object type: /v1, Kind=Service"),
    ({"metadata": {"name": "p"}}, "invalid object type: /, Kind="),
    ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "managedFields": []}},
     "metadata.managedFields must be nil"),
    (config({"containers": [{"image": "busybox"}]}),
     "failed to create typed patch object (default/p; /v1, Kind=Pod): .spec.containers: "
     'element 0: associative list with keys has an element that omits key field "name" (and '
     "doesn't have default value)"),
    (config({"containers": [{"name": "c"}, {"name": "c"}]}),
     "failed to create typed patch object (default/p; /v1, Kind=Pod): .spec.containers: "
     'duplicate entries for key [name="c"]'),
])
def test_bad_apply_configurations_are_400(applied: dict[str, Any], message: str) -> None:
    with pytest.raises(StatusError) as info:
        server_side_apply(None, applied, "m", False, POD, "v1")
    assert (info.value.code, info.value.reason, info.value.message) == (400, "BadRequest",
                                                                          message)


def test_record_update_after_create_then_apply_conflict_then_force() -> None:
    """The path `kubectl create` then `kubectl apply --server-side` takes."""
    live = created()
    applied = config(one_container("nginx"), labels={"new": "x"})
    with pytest.raises(ApplyConflict):
        server_side_apply(live, applied, "kubectl", False, POD, "v1")
    obj = server_side_apply(live, applied, "kubectl", True, POD, "v1", now="t3")
    assert obj["metadata"]["labels"] == {"new": "x"}
    assert obj["spec"]["containers"][0]["image"] == "nginx"
    # A later update by the creator takes the image back, and the applier conflicts again.
    edited = copy.deepcopy(obj)
    edited["spec"]["containers"][0]["image"] = "busybox"
    record_update(obj, edited, "kubectl-edit", POD, "v1", now="t4")
    assert "f:image" not in entries(edited)[("kubectl", "Apply")]["fieldsV1"]["f:spec"][
        "f:containers"][CONTAINER_C]
    with pytest.raises(ApplyConflict) as info:
        server_side_apply(edited, applied, "kubectl", False, POD, "v1")
    assert 'conflict with "kubectl-edit" using v1' in info.value.message


# --- the write path's shortcuts ----------------------------------------------------------------


def test_a_change_equal_in_python_but_not_in_json_still_moves_ownership() -> None:
    """1 and true are == in Python; skipping equal subtrees must not take them as equal."""
    old = created()
    old["spec"]["activeDeadlineSeconds"] = 1
    record_update(created(), old, "setter", POD, "v1", now="2024-01-02T00:00:00Z")
    new = copy.deepcopy(old)
    new["spec"]["activeDeadlineSeconds"] = True
    record_update(old, new, "flipper", POD, "v1", now="2024-01-03T00:00:00Z")
    assert entries(new)[("flipper", "Update")]["fieldsV1"] == {
        "f:spec": {"f:activeDeadlineSeconds": {}}}
    assert ("setter", "Update") not in entries(new)


def _writes(monkeypatch: pytest.MonkeyPatch | None) -> list[Any]:
    """managedFields after a status write, a spec write and a PUT carrying the stored
    entries (one of them altered); with `monkeypatch`, stored encodings are never reused."""
    if monkeypatch is not None:
        monkeypatch.setattr("ephemera.api.managedfields._stored_encodings", lambda _: {})
    old = created(labels={"app": "web"})
    status = copy.deepcopy(old)
    status["status"] = {"phase": "Running", "podIP": "10.0.0.1"}
    record_update(old, status, "kubelet", POD, "v1", "status", now="2024-01-02T00:00:00Z")
    spec = copy.deepcopy(status)
    spec["spec"]["containers"][0]["image"] = "nginx"
    record_update(status, spec, "kubectl-edit", POD, "v1", now="2024-01-03T00:00:00Z")
    put = copy.deepcopy(spec)
    put["metadata"]["labels"]["tier"] = "front"
    for entry in put["metadata"]["managedFields"]:
        if entry["manager"] == "kubelet":
            entry["fieldsV1"]["f:status"].pop("f:podIP")
    record_update(spec, put, "kubectl-label", POD, "v1", now="2024-01-04T00:00:00Z")
    return [status["metadata"]["managedFields"], spec["metadata"]["managedFields"],
            put["metadata"]["managedFields"]]


def test_reusing_stored_encodings_writes_what_encoding_again_writes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reused = _writes(None)
    assert reused == _writes(monkeypatch)
    assert [e["manager"] for e in reused[2]] == [
        "kubectl-create", "kubelet", "kubectl-edit", "kubectl-label"]
    assert reused[2][1]["fieldsV1"] == {"f:status": {"f:phase": {}}}, \
        "the PUT's altered entry is the one recorded"


def test_an_unchanged_manager_keeps_its_stored_encoding() -> None:
    old = created()
    new = copy.deepcopy(old)
    new["status"] = {"phase": "Running"}
    record_update(old, new, "kubelet", POD, "v1", "status", now="2024-01-02T00:00:00Z")
    before = entries(old)[("kubectl-create", "Update")]["fieldsV1"]
    assert entries(new)[("kubectl-create", "Update")]["fieldsV1"] is before


def test_decoded_field_sets_are_the_callers_own() -> None:
    """decode_fields remembers what it decoded; each answer is a new set all the same, and
    a malformed fieldsV1 is refused every time."""
    fields_v1 = {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}
    first = decode_fields(fields_v1)
    first.add((("f", "spec"),))
    assert decode_fields(fields_v1) == {(("f", "metadata"), ("f", "labels")),
                                        (("f", "metadata"), ("f", "labels"), ("f", "app"))}
    for _ in range(2):
        with pytest.raises(ValueError, match="fieldsV1 values must be objects"):
            decode_fields({"f:metadata": 1})


def test_encode_fields_remembers_a_set_but_answers_a_new_object_each_time() -> None:
    paths = {(("f", "metadata"), ("f", "labels"), ("f", "app")),
             (("f", "spec"), ("f", "containers"), ("k", (("name", '"c"'),))),
             (("f", "spec"), ("f", "containers"), ("k", (("name", '"c"'),)), ("f", "image"))}
    first = managedfields.encode_fields(paths)
    assert first == {"f:metadata": {"f:labels": {"f:app": {}}},
                     "f:spec": {"f:containers": {'k:{"name":"c"}': {".": {}, "f:image": {}}}}}
    first["f:spec"].clear()
    again = managedfields.encode_fields(paths)
    assert again is not first
    assert again["f:spec"] == {"f:containers": {'k:{"name":"c"}': {".": {}, "f:image": {}}}}


def test_encode_fields_does_not_remember_a_large_set() -> None:
    paths = {(("f", "metadata"), ("f", "labels"), ("f", f"l{i}"))
             for i in range(managedfields._ENCODED_MAX_PATHS + 1)}
    managedfields._ENCODED.clear()
    encoded = managedfields.encode_fields(paths)
    assert len(encoded["f:metadata"]["f:labels"]) == len(paths)
    assert managedfields._ENCODED == {}


def test_the_empty_object_of_a_create_is_a_new_object_each_time() -> None:
    root = managedfields.definition_node("io.k8s.api.core.v1.Pod")
    first = managedfields._empty_object(root)
    assert first and all(isinstance(v, dict) for v in first.values())
    for fields in first.values():
        fields["x"] = 1
    assert all("x" not in v for v in managedfields._empty_object(root).values())


# --- the comparison's shortcuts against a plain walk ------------------------------------------


def _reference_compare(lhs: Any, rhs: Any, definition: str,
                       ignored: tuple[Any, ...]) -> managedfields._Comparison:
    """TypedValue.Compare as a plain walk of both values (every field typed through the
    schema, one-sided subtrees walked against MISSING), then the reset fields dropped: what
    `_compare` computes with its shortcuts (one-sided subtrees collected, scalar leaves
    without a schema lookup, reset fields skipped as it goes)."""
    mf = managedfields
    c = mf._Comparison()

    def walk(left: Any, right: Any, prop: Any, at: tuple[Any, ...]) -> None:
        t = mf._pair_type(prop, left, right)
        if mf._is_leaf(t, left, right):
            if left is mf.MISSING:
                c.added.add(at)
            elif right is mf.MISSING:
                c.removed.add(at)
            elif not mf._json_equal(left, right):
                c.modified.add(at)
            return
        if t.tag == "map":
            lmap = left if isinstance(left, dict) else {}
            rmap = right if isinstance(right, dict) else {}
            for key in [*lmap, *(k for k in rmap if k not in lmap)]:
                lvalue, rvalue = lmap.get(key, mf.MISSING), rmap.get(key, mf.MISSING)
                if not mf.same_json(lvalue, rvalue):
                    walk(lvalue, rvalue, mf._child_prop(t, key), (*at, ("f", key)))
        else:
            litems = mf._index_items(t, left, at)
            ritems = mf._index_items(t, right, at)
            for pe in [*litems, *(k for k in ritems if k not in litems)]:
                litem, ritem = litems.get(pe, mf.MISSING), ritems.get(pe, mf.MISSING)
                if not mf.same_json(litem, ritem):
                    walk(litem, ritem, mf._items_prop(t), (*at, pe))
        if at:
            if left is mf.MISSING:
                c.added.add(at)
            elif right is mf.MISSING:
                c.removed.add(at)

    if not mf.same_json(lhs, rhs):
        walk(lhs, rhs, managedfields.definition_node(definition), ())
    return mf._Comparison(mf._without(c.added, ignored), mf._without(c.modified, ignored),
                          mf._without(c.removed, ignored))


def _pod(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": "rs", "uid": "u-rs", "controller": True}]},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                                     "ports": [{"containerPort": 80}],
                                     "resources": {"requests": {"cpu": "10m"}}}],
                     **spec}}


def _running(pod: dict[str, Any], ip: str = "10.0.0.1") -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["status"] = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                     "conditions": [{"type": "Ready", "status": "True",
                                     "lastProbeTime": None}],
                     "containerStatuses": [{"name": "c", "ready": True, "restartCount": 0,
                                            "state": {"running": {"startedAt": "t"}}}]}
    return out


EVENT = "io.k8s.api.core.v1.Event"
LEASE = "io.k8s.api.coordination.v1.Lease"
_EVENT_OBJ = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "d"},
              "involvedObject": {"kind": "Pod", "name": "p", "uid": "u", "fieldPath": "x"},
              "reason": "Started", "message": "m", "type": "Normal",
              "source": {"component": "kubelet", "host": "n1"}, "count": 1,
              "firstTimestamp": "t", "series": None}
_LEASE_OBJ = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
              "metadata": {"name": "n1", "namespace": "kube-node-lease"},
              "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40, "renewTime": "a"}}


def _comparison_cases() -> list[tuple[str, Any, Any]]:
    pod = _pod()
    running = _running(pod)
    changed = copy.deepcopy(running)
    changed["spec"]["containers"].append({"name": "d", "image": "nginx", "args": ["x"]})
    changed["spec"]["containers"][0]["image"] = "nginx"
    changed["spec"]["containers"][0]["ports"] = [{"containerPort": 81, "protocol": "UDP"}]
    changed["spec"]["activeDeadlineSeconds"] = 1
    changed["metadata"]["labels"] = {"tier": "front"}
    changed["metadata"]["deletionTimestamp"] = "t"
    changed["metadata"]["ownerReferences"] = []
    changed["status"]["conditions"].append({"type": "Initialized", "status": "True"})
    changed["status"]["podIPs"] = None
    changed["status"]["containerStatuses"][0]["state"] = {"waiting": {}}
    mismatched = copy.deepcopy(running)
    mismatched["spec"]["containers"] = {"name": "c"}  # a map where the schema has a list
    mismatched["spec"]["nodeSelector"] = ["a"]  # a list where the schema has a map
    mismatched["spec"]["unknown"] = {"deep": {"x": [1, 2]}}
    mismatched["status"]["phase"] = {"odd": True}
    floats = copy.deepcopy(running)
    floats["spec"]["activeDeadlineSeconds"] = 1.0
    floats["spec"]["containers"][0]["ports"][0]["containerPort"] = True
    renewed = copy.deepcopy(_LEASE_OBJ)
    renewed["spec"]["renewTime"] = "b"
    renewed["spec"]["leaseDurationSeconds"] = None
    root_of = managedfields.definition_node
    return [
        (POD, managedfields._empty_object(root_of(POD)), pod),
        (POD, managedfields._empty_object(root_of(POD)), running),
        (EVENT, managedfields._empty_object(root_of(EVENT)), _EVENT_OBJ),
        (LEASE, managedfields._empty_object(root_of(LEASE)), _LEASE_OBJ),
        (LEASE, _LEASE_OBJ, renewed),
        (POD, pod, running), (POD, running, pod),
        (POD, running, changed), (POD, changed, running),
        (POD, running, mismatched), (POD, mismatched, running), (POD, mismatched, changed),
        (POD, running, floats), (POD, floats, running),
        (POD, running, running), (POD, {}, running), (POD, running, {}),
    ]


@pytest.mark.parametrize("subresource", ["", "status"])
def test_compare_finds_what_a_plain_walk_finds(subresource: str) -> None:
    ignored = managedfields._ignored_fields(subresource)
    for definition, old, new in _comparison_cases():
        root = managedfields.definition_node(definition)
        got = managedfields._compare(old, new, root, ignored)
        want = _reference_compare(old, new, definition, ignored)
        assert (got.added, got.modified, got.removed) == \
            (want.added, want.modified, want.removed), (definition, old, new)
        assert managedfields._compare(old, new, root) == _reference_compare(old, new,
                                                                            definition, ())


def test_an_untypable_value_fails_the_write_even_in_a_reset_field() -> None:
    """The comparison skips the fields the strategy resets, but still walks a changed one: a
    list item without its key drops the managed fields, as the plain walk's error does."""
    old = _running(_pod())
    new = copy.deepcopy(old)
    new["status"]["conditions"].append({"status": "False"})  # no `type`, the list's key
    with pytest.raises(managedfields._ShapeError):
        _reference_compare(old, new, POD, managedfields._ignored_fields(""))
    with pytest.raises(managedfields._ShapeError):
        managedfields._compare(old, new, managedfields.definition_node(POD),
                               managedfields._ignored_fields(""))
    stored = copy.deepcopy(old)
    record_update(None, stored, "creator", POD, "v1", now="2024-01-01T00:00:00Z")
    stored["metadata"]["uid"] = "u-1"
    new["metadata"]["managedFields"] = stored["metadata"]["managedFields"]
    record_update(stored, new, "writer", POD, "v1", now="2024-01-02T00:00:00Z")
    assert "managedFields" not in new["metadata"]


def _renewals(monkeypatch: pytest.MonkeyPatch | None) -> list[Any]:
    """managedFields after a Lease's create and three renewals by its holder (the last one
    also changing the duration), and an Event's create; with `monkeypatch`, stored
    encodings are never reused."""
    if monkeypatch is not None:
        monkeypatch.setattr("ephemera.api.managedfields._stored_encodings", lambda _: {})
    out = []
    old = copy.deepcopy(_LEASE_OBJ)
    record_update(None, old, "kubelet", LEASE, "coordination.k8s.io/v1", now="t0")
    old["metadata"]["uid"] = "u-lease"
    for i in range(3):
        new = copy.deepcopy(old)
        new["spec"]["renewTime"] = f"r{i}"
        if i == 2:
            new["spec"]["leaseDurationSeconds"] = 10
            new["spec"]["acquireTime"] = "a"
        record_update(old, new, "kubelet", LEASE, "coordination.k8s.io/v1", now=f"t{i + 1}")
        out.append(new["metadata"]["managedFields"])
        old = new
    event = copy.deepcopy(_EVENT_OBJ)
    record_update(None, event, "kubelet", EVENT, "v1", now="t")
    out.append(event["metadata"]["managedFields"])
    return out


def test_a_writer_keeps_its_stored_encoding_when_its_fields_stay_the_same(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reused = _renewals(None)
    assert reused == _renewals(monkeypatch)
    assert reused[0][0]["time"] == "t1"
    assert reused[2][0]["fieldsV1"] == {"f:spec": {
        "f:acquireTime": {}, "f:holderIdentity": {}, "f:leaseDurationSeconds": {},
        "f:renewTime": {}}}
    assert reused[3][0]["fieldsV1"] == {
        "f:count": {}, "f:firstTimestamp": {},
        "f:involvedObject": {},  # (an ObjectReference: an atomic struct)
        "f:message": {}, "f:reason": {}, "f:series": {},
        "f:source": {"f:component": {}, "f:host": {}}, "f:type": {}}
