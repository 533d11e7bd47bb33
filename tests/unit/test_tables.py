"""Table output: columns, upstream's pod and node status logic, ages, Accept negotiation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ephemera.apiserver.resources import lookup
from ephemera.apiserver.tables import (
    human_duration,
    parse_include_object,
    row_cells,
    table_api_version,
    to_table,
    wants_table,
)

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
KUBECTL_GET_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,"
    "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


def ago(**kw: float) -> str:
    return (NOW - timedelta(**kw)).strftime("%Y-%m-%dT%H:%M:%SZ")


def res(plural: str, group: str = "") -> Any:
    r = lookup(group, "v1", plural)
    assert r is not None
    return r


PODS, NODES, EVENTS = res("pods"), res("nodes"), res("events")


@pytest.mark.parametrize(("seconds", "text"), [
    (-5, "<invalid>"), (-1, "0s"), (0, "0s"), (1, "1s"), (5, "5s"), (70, "70s"),
    (119, "119s"), (120, "2m"), (182, "3m2s"), (190, "3m10s"), (600, "10m"),
    (70 * 60, "70m"), (3 * 3600, "3h"), (3 * 3600 + 5 * 60, "3h5m"), (47 * 3600, "47h"),
    (49 * 3600, "2d1h"), (51 * 3600, "2d3h"), (72 * 3600, "3d"), ((8 * 24 + 2) * 3600, "8d"),
    (367 * 24 * 3600, "367d"), ((365 * 2 * 24 + 25) * 3600, "2y1d"),
    ((365 * 8 * 24 + 2) * 3600, "8y"),
])
def test_human_duration_matches_upstream(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def pod(status: dict[str, Any] | None = None, *, spec: dict[str, Any] | None = None,
        **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p1", "namespace": "default", "uid": "u1",
                     "creationTimestamp": ago(seconds=5), "resourceVersion": "7", **meta},
        "spec": spec or {"containers": [{"name": "c", "image": "busybox"}]},
        "status": status if status is not None else {"phase": "Pending"},
    }


def running(name: str = "c", *, ready: bool = True, restarts: int = 0,
            last_finished: str | None = None) -> dict[str, Any]:
    cs: dict[str, Any] = {"name": name, "ready": ready, "restartCount": restarts,
                          "state": {"running": {"startedAt": ago(minutes=1)}}}
    if last_finished:
        cs["lastState"] = {"terminated": {"exitCode": 1, "finishedAt": last_finished}}
    return cs


def cells(obj: dict[str, Any], resource: Any = PODS) -> list[Any]:
    return row_cells(resource, obj, NOW)


def test_pending_pod_row_with_wide_cells() -> None:
    assert cells(pod()) == ["p1", "0/1", "Pending", "0", "5s",
                            "<none>", "<none>", "<none>", "<none>"]


def test_running_pod_with_ip_node_and_restarts_ago() -> None:
    p = pod({"phase": "Running", "podIP": "10.0.0.5",
             "conditions": [{"type": "Ready", "status": "True"}],
             "containerStatuses": [running(restarts=2, last_finished=ago(minutes=5))]},
            spec={"nodeName": "n1", "containers": [{"name": "c"}],
                  "readinessGates": [{"conditionType": "x/ok"}, {"conditionType": "x/no"}]})
    p["status"]["conditions"].append({"type": "x/ok", "status": "True"})
    assert cells(p) == ["p1", "1/1", "Running", "2 (5m ago)", "5s",
                        "10.0.0.5", "n1", "<none>", "1/2"]


def test_pod_ips_take_precedence_and_nominated_node_shows() -> None:
    p = pod({"phase": "Pending", "podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.7"}],
             "nominatedNodeName": "n2"})
    assert cells(p)[5:8] == ["10.0.0.7", "<none>", "n2"]


def test_waiting_reason_wins() -> None:
    p = pod({"phase": "Running", "containerStatuses": [
        {"name": "c", "ready": False, "restartCount": 4,
         "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(seconds=30)}}}]})
    assert cells(p)[1:4] == ["0/1", "CrashLoopBackOff", "4 (30s ago)"]


def test_terminated_without_reason_shows_exit_code_or_signal() -> None:
    p = pod({"phase": "Failed", "containerStatuses": [
        {"name": "c", "ready": False, "state": {"terminated": {"exitCode": 3}}}]})
    assert cells(p)[2] == "ExitCode:3"
    p["status"]["containerStatuses"][0]["state"]["terminated"] = {"exitCode": 137, "signal": 9}
    assert cells(p)[2] == "Signal:9"


def test_completed_pod_and_its_row_condition() -> None:
    p = pod({"phase": "Succeeded", "containerStatuses": [
        {"name": "c", "ready": False,
         "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]})
    assert cells(p)[1:3] == ["0/1", "Completed"]
    row = to_table(PODS, [p], now=NOW)["rows"][0]
    assert row["conditions"] == [{"type": "Completed", "status": "True", "reason": "Succeeded",
                                  "message": "The pod has completed successfully."}]


def test_completed_with_a_running_container_is_running_or_not_ready() -> None:
    spec = {"containers": [{"name": "a"}, {"name": "b"}]}
    statuses = [running("a"), {"name": "b", "ready": False,
                               "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]
    p = pod({"phase": "Running", "containerStatuses": statuses,
             "conditions": [{"type": "Ready", "status": "True"}]}, spec=spec)
    assert cells(p)[1:3] == ["1/2", "Running"]
    p["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert cells(p)[2] == "NotReady"


def test_terminating_unless_finished() -> None:
    p = pod({"phase": "Running", "containerStatuses": [running()]},
            deletionTimestamp=ago(seconds=1))
    assert cells(p)[2] == "Terminating"
    p["status"]["phase"] = "Succeeded"
    assert cells(p)[2] == "Succeeded"
    lost = pod({"phase": "Running", "reason": "NodeLost"}, deletionTimestamp=ago(seconds=1))
    assert cells(lost)[2] == "Unknown"


def test_init_containers() -> None:
    spec = {"initContainers": [{"name": "i1"}, {"name": "i2"}], "containers": [{"name": "c"}]}
    p = pod({"phase": "Pending", "initContainerStatuses": [
        {"name": "i1", "ready": True, "state": {"terminated": {"exitCode": 0}}},
        {"name": "i2", "ready": False, "state": {"running": {}}}]}, spec=spec)
    assert cells(p)[1:3] == ["0/1", "Init:1/2"]
    p["status"]["initContainerStatuses"][1]["state"] = {"waiting": {"reason": "ErrImagePull"}}
    assert cells(p)[2] == "Init:ErrImagePull"
    p["status"]["initContainerStatuses"][1]["state"] = {"waiting": {"reason": "PodInitializing"}}
    assert cells(p)[2] == "Init:1/2"
    p["status"]["initContainerStatuses"][1]["state"] = {
        "terminated": {"exitCode": 1, "reason": "Error"}}
    assert cells(p)[2] == "Init:Error"
    p["status"]["initContainerStatuses"][1]["state"] = {"terminated": {"exitCode": 2}}
    assert cells(p)[2] == "Init:ExitCode:2"


def test_sidecar_init_containers_count_as_containers() -> None:
    spec = {"initContainers": [{"name": "side", "restartPolicy": "Always"}],
            "containers": [{"name": "c"}]}
    p = pod({"phase": "Running", "conditions": [{"type": "Initialized", "status": "True"},
                                                {"type": "Ready", "status": "True"}],
             "initContainerStatuses": [{"name": "side", "ready": True, "started": True,
                                        "restartCount": 1, "state": {"running": {}}}],
             "containerStatuses": [running()]}, spec=spec)
    assert cells(p)[1:4] == ["2/2", "Running", "1"]


def test_scheduling_gated() -> None:
    p = pod({"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]})
    assert cells(p)[2] == "SchedulingGated"


def node(**kw: Any) -> dict[str, Any]:
    n: dict[str, Any] = {"metadata": {"name": "n1", "creationTimestamp": ago(hours=51),
                                      "labels": kw.pop("labels", {})},
                         "spec": kw.pop("spec", {}), "status": kw.pop("status", {})}
    return n


def test_node_rows() -> None:
    n = node(labels={"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "edge"},
             status={"conditions": [{"type": "Ready", "status": "True"}],
                     "addresses": [{"type": "InternalIP", "address": "10.1.1.1"}],
                     "nodeInfo": {"kubeletVersion": "v1.38.0", "osImage": "Debian",
                                  "kernelVersion": "6.1", "containerRuntimeVersion": "runc"}})
    assert cells(n, NODES) == ["n1", "Ready", "control-plane,edge", "2d3h", "v1.38.0",
                               "10.1.1.1", "<none>", "Debian", "6.1", "runc"]
    n["status"]["conditions"][0]["status"] = "Unknown"
    n["spec"]["unschedulable"] = True
    assert cells(n, NODES)[1] == "NotReady,SchedulingDisabled"
    bare = cells(node(), NODES)
    assert bare[1:3] == ["Unknown", "<none>"]
    assert bare[7:] == ["<unknown>", "<unknown>", "<unknown>"]


def test_event_rows() -> None:
    event = {"metadata": {"name": "p1.abc", "namespace": "default"},
             "involvedObject": {"kind": "Pod", "name": "p1", "fieldPath": "spec.containers{c}"},
             "reason": "Pulled", "type": "Normal", "message": " pulled \n",
             "source": {"component": "kubelet", "host": "n1"},
             "firstTimestamp": ago(minutes=3), "lastTimestamp": ago(seconds=10), "count": 3}
    assert cells(event, EVENTS) == ["10s", "Normal", "Pulled", "pod/p1", "spec.containers{c}",
                                    "kubelet, n1", "pulled", "3m", 3, "p1.abc"]
    new_style = {"metadata": {"name": "e2"}, "involvedObject": {"kind": "Node"},
                 "eventTime": ago(seconds=4), "reportingComponent": "ephemera-scheduler"}
    assert cells(new_style, EVENTS) == ["4s", "", "", "node", "", "ephemera-scheduler", "",
                                        "4s", 1, "e2"]


def test_simple_kinds() -> None:
    meta = {"name": "x", "creationTimestamp": ago(days=3)}
    assert cells({"metadata": meta, "status": {"phase": "Active"}}, res("namespaces")) == [
        "x", "Active", "3d"]
    assert cells({"metadata": meta, "data": {"a": "1", "b": "2"}, "binaryData": {"c": ""}},
                 res("configmaps")) == ["x", 3, "3d"]
    assert cells({"metadata": meta, "type": "Opaque", "data": {"k": "dg=="}},
                 res("secrets")) == ["x", "Opaque", 1, "3d"]
    assert cells({"metadata": meta, "secrets": [{"name": "s"}]},
                 res("serviceaccounts")) == ["x", 1, "3d"]
    assert cells({"metadata": meta, "spec": {"holderIdentity": "n1"}},
                 res("leases", "coordination.k8s.io")) == ["x", "n1", "3d"]
    assert cells({"metadata": meta}, res("limitranges")) == [
        "x", (NOW - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ")]
    quota = {"metadata": meta, "status": {
        "hard": {"pods": "10", "requests.cpu": "2", "limits.memory": "1Gi",
                 "requests.ephemeral-storage": "5Gi"},
        "used": {"pods": "1", "requests.cpu": "500m"}}}
    assert cells(quota, res("resourcequotas")) == [
        "x", "3d", "pods: 1/10, requests.cpu: 500m/2, requests.ephemeral-storage: 0/5Gi",
        "limits.memory: 0/1Gi"]


def test_table_shape_and_include_object() -> None:
    p = pod()
    table = to_table(PODS, [p], now=NOW, metadata={"resourceVersion": "12"})
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "12"}
    names = [(c["name"], c["priority"]) for c in table["columnDefinitions"]]
    assert names == [("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0),
                     ("IP", 1), ("Node", 1), ("Nominated Node", 1), ("Readiness Gates", 1)]
    assert table["columnDefinitions"][0]["format"] == "name"
    [row] = table["rows"]
    assert row["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": p["metadata"]}
    assert len(row["cells"]) == len(table["columnDefinitions"])
    assert "conditions" not in row
    assert to_table(PODS, [p], include_object="Object", now=NOW)["rows"][0]["object"] == p
    assert "object" not in to_table(PODS, [p], include_object="None", now=NOW)["rows"][0]
    assert to_table(PODS, [p], with_columns=False, now=NOW)["columnDefinitions"] is None
    assert to_table(PODS, [], now=NOW)["rows"] == []


def test_scale_subresource_table_is_upstreams_print_scale() -> None:
    """scaleColumnDefinitions: Name (no `name` format), Desired and Available integers, Age;
    the cells of a Deployment's Scale are its name, spec.replicas, status.replicas, age."""
    scale = {"kind": "Scale", "apiVersion": "autoscaling/v1",
             "metadata": {"name": "dep1", "namespace": "default", "resourceVersion": "7",
                          "creationTimestamp": ago(hours=5)},
             "spec": {"replicas": 3}, "status": {"replicas": 2, "selector": "app=dep1"}}
    table = to_table(res("deployments", "apps"), [scale], subresource="scale", now=NOW)
    assert [(c["name"], c["type"], c["format"], c["priority"])
            for c in table["columnDefinitions"]] == [
        ("Name", "string", "", 0), ("Desired", "integer", "", 0),
        ("Available", "integer", "", 0), ("Age", "string", "", 0)]
    descriptions = [c["description"] for c in table["columnDefinitions"]]
    assert descriptions[1:3] == [
        "replicas is the desired number of instances for the scaled object.",
        "replicas is the actual number of observed instances of the scaled object."]
    assert descriptions[0].startswith("Name must be unique within a namespace.")
    assert descriptions[3].startswith("CreationTimestamp is a timestamp")
    [row] = table["rows"]
    assert row["cells"] == ["dep1", 3, 2, "5h"]
    assert row["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": scale["metadata"]}
    # a Scale without replicas prints Go's zero values
    assert row_cells(res("replicationcontrollers"), {"metadata": {"name": "rc"}},
                     NOW, "scale") == ["rc", 0, 0, "<unknown>"]


def test_every_served_kind_has_as_many_cells_as_columns() -> None:
    from ephemera.apiserver.resources import RESOURCES
    for r in RESOURCES:
        table = to_table(r, [{"metadata": {"name": "x"}}], now=NOW)
        assert len(table["rows"][0]["cells"]) == len(table["columnDefinitions"]), r.plural
        assert table["rows"][0]["cells"][0 if r.plural != "events" else 9] == "x"


@pytest.mark.parametrize(("accept", "expected"), [
    (KUBECTL_GET_ACCEPT, "meta.k8s.io/v1"),
    ("application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/json", "meta.k8s.io/v1beta1"),
    ("application/json", None),
    ("application/json, */*", None),
    ("*/*", None),
    (None, None),
    ("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json", None),
    ("application/json;as=Table;v=v9;g=meta.k8s.io,application/json", None),
])
def test_table_negotiation(accept: str | None, expected: str | None) -> None:
    assert table_api_version(accept) == expected
    assert wants_table(accept) is (expected is not None)


def test_include_object_parameter() -> None:
    assert parse_include_object(None) == "PartialObjectMetadata"
    assert parse_include_object("Object") == "Object"
    assert parse_include_object("None") == "None"
