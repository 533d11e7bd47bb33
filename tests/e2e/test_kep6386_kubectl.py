"""KEP-6386 (pod-level `ephemeral-storage`) through the real kubectl against a real `ephemera
up` without a kubelet: the KEP's and the reference's worked examples (defaulting as `kubectl
get -o json` shows it), the validation rules with kubectl's exact lines, LimitRanger type Pod,
ResourceQuota, the scheduler (PodScheduled message, declared node features), and the
`PodLevelResourcesEphemeralStorage` gate turned off, then on, off and on again on one data dir
(the KEP's upgrade -> downgrade -> upgrade plan).

Manifests are in `manifests/kep6386/`. The module is one xdist group (`make test` runs
`--dist loadgroup`): one cluster with every gate on (`shared_cluster`, overridden here to run
no kubelet), one with the KEP gates off (`gates_off`); every test has its own namespace.
Nodes are cluster-wide: only the scheduler test creates any in the shared cluster, tainted so
that no other test's pod lands there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster, Kubectl, kubectl  # noqa: F401  (fixture)
from kep_e2e import (
    GATES_OFF,
    PLRES,
    as_input,
    kubectl_in,
    node_manifest,
    running_cluster,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("kep6386")]

MANIFESTS = Path(__file__).parent / "manifests" / "kep6386"
ES = "ephemeral-storage"
UNSUPPORTED = ('Unsupported value: "ephemeral-storage": supported values: "cpu", "hugepages-", '
               '"memory"')


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The module's cluster, every gate on, no kubelet (nodes are API objects here)."""
    with running_cluster(tmp_path_factory.mktemp("kep6386")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def gates_off_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("kep6386-off"), GATES_OFF) as cluster:
        yield cluster


@pytest.fixture
def gates_off(gates_off_cluster: Cluster, tmp_path: Path,
              request: pytest.FixtureRequest) -> Kubectl:
    """kubectl on the cluster with PodLevelResourcesEphemeralStorage and
    DynamicNodeLocalEphemeralVolumes off, in a namespace of this test."""
    return kubectl_in(gates_off_cluster, tmp_path, request.node.name)


def manifest(name: str) -> str:
    return str(MANIFESTS / f"{name}.yaml")


def pod(name: str, *containers: dict[str, Any], resources: dict[str, Any] | None = None,
        **spec: Any) -> dict[str, Any]:
    """A pod nothing schedules (schedulerName manual) unless `spec` says otherwise."""
    body: dict[str, Any] = {"schedulerName": "manual", **spec,
                            "containers": list(containers)
                            or [{"name": "app", "image": "busybox:1.36"}]}
    if resources is not None:
        body["resources"] = resources
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def container(name: str, requests: dict[str, str] | None = None,
              limits: dict[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "busybox:1.36", "resources": resources}


def invalid(kind: str, name: str, *lines: str) -> str:
    """kubectl's text for a 422 Invalid with these causes."""
    if len(lines) == 1:
        return f'The {kind} "{name}" is invalid: {lines[0]}'
    return f'The {kind} "{name}" is invalid: \n' + "\n".join(f"* {line}" for line in lines)


def forbidden_create(source: str, name: str, message: str) -> str:
    """kubectl's text for a 403 on `create -f source`."""
    return (f'Error from server (Forbidden): error when creating "{source}": pods "{name}" is '
            f"forbidden: {message}")


def pod_resources(k: Kubectl, name: str) -> Any:
    return k.json("get", "pod", name)["spec"].get("resources")


def create_rejected(k: Kubectl, *args: str, input: str | None = None) -> str:
    """Run a `kubectl create` that must fail; its stderr, stripped."""
    result = k("create", *args, check=False, input=input)
    assert result.returncode == 1, result.stdout
    assert result.stdout == ""
    return result.stderr.strip()


# --- the worked examples: defaulting as `kubectl get -o json` shows it ------------------------

# manifest -> (spec.resources after defaulting, {container: its resources} worth checking)
ACCEPTED: dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]] = {
    "data-pipeline-pod": ({"requests": {ES: "10Gi"}, "limits": {ES: "20Gi"}},
                          {"processor": {}, "log-shipper": {"limits": {ES: "2Gi"},
                                                            "requests": {ES: "2Gi"}}}),
    "example-pod": ({"requests": {ES: "2Gi"}, "limits": {ES: "5Gi"}}, {}),
    "emptydir-size-limits": ({"requests": {ES: "8Gi"}, "limits": {ES: "8Gi"}}, {}),
    "limit-and-one-limited-container": (
        {"requests": {ES: "2Gi"}, "limits": {ES: "20Gi"}},
        {"c1": {}, "c2": {"limits": {ES: "2Gi"}, "requests": {ES: "2Gi"}}}),
    "limit-only": ({"requests": {ES: "20Gi"}, "limits": {ES: "20Gi"}}, {"c1": {}}),
    "request-and-all-containers-limited": ({"requests": {ES: "6Gi"}, "limits": {ES: "8Gi"}},
                                           {}),
    "request-and-one-container-limited": ({"requests": {ES: "6Gi"}}, {}),
    "other-pod-limit-set": ({"requests": {"cpu": "2", ES: "1Gi"}, "limits": {"cpu": "2"}}, {}),
    "pod-cpu-container-storage": ({"requests": {"cpu": "500m", ES: "1536Mi"},
                                   "limits": {ES: "3Gi"}}, {}),
    "pod-cpu-limit-container-storage": ({"requests": {"cpu": "1", ES: "1536Mi"},
                                         "limits": {"cpu": "1"}},
                                        {"c2": {"requests": {ES: "512Mi"}}}),
    "sum-of-limits-exceeds-pod-limit": ({"requests": {ES: "2Gi"}, "limits": {ES: "3Gi"}}, {}),
    "init-container-counts-by-max": ({"requests": {ES: "1Gi"}}, {}),
    "canonical-quantity": ({"requests": {ES: "1536Mi"}, "limits": {ES: "1536Mi"}}, {}),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_worked_example_is_accepted_and_defaulted(kubectl: Kubectl,  # noqa: F811
                                                  name: str) -> None:
    expected_pod, expected_containers = ACCEPTED[name]
    assert kubectl("create", "-f", manifest(name)).stdout == f"pod/{name} created\n"
    spec = kubectl.json("get", "pod", name)["spec"]
    assert spec["resources"] == expected_pod
    by_name = {c["name"]: c for c in spec["containers"]}
    for container_name, expected in expected_containers.items():
        assert by_name[container_name]["resources"] == expected


# manifest -> the causes kubectl prints, in the server's order
REJECTED: dict[str, list[str]] = {
    "aggregate-requests-exceed-pod-request": [
        'spec.resources.requests[ephemeral-storage]: Invalid value: "1Gi": must be greater '
        "than or equal to aggregate container requests of 1600Mi"],
    "sidecar-counts-in-aggregate": [
        'spec.resources.requests[ephemeral-storage]: Invalid value: "1Gi": must be greater '
        "than or equal to aggregate container requests of 1200Mi"],
    "container-limit-exceeds-pod-limit": [
        'spec.resources.containers[1][ephemeral-storage].limits: Invalid value: "4Gi": must be '
        "less than or equal to pod limits of 3Gi"],
    "request-exceeds-limit": [
        'spec.resources.requests: Invalid value: "6Gi": must be less than or equal to '
        "ephemeral-storage limit of 5Gi"],
    "request-exceeds-defaulted-limit": [
        'spec.resources.requests: Invalid value: "10Gi": must be less than or equal to '
        "ephemeral-storage limit of 8Gi"],
    "container-requests-exceed-pod-limit": [
        'spec.resources.requests: Invalid value: "2Gi": must be less than or equal to '
        "ephemeral-storage limit of 1Gi"],
    "container-over-small-pod-limit": [
        'spec.resources.requests: Invalid value: "2Gi": must be less than or equal to '
        "ephemeral-storage limit of 1Gi",
        'spec.resources.containers[0][ephemeral-storage].limits: Invalid value: "2Gi": must be '
        "less than or equal to pod limits of 1Gi"],
    "negative-request": [
        'spec.resources.requests[ephemeral-storage]: Invalid value: "-1Gi": must be greater '
        "than or equal to 0"],
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_rule_breaking_pod_is_rejected(kubectl: Kubectl, name: str) -> None:  # noqa: F811
    assert create_rejected(kubectl, "-f", manifest(name)) == invalid("Pod", name,
                                                                     *REJECTED[name])
    gone = kubectl("get", "pod", name, check=False)
    assert gone.stderr.strip() == f'Error from server (NotFound): pods "{name}" not found'


def test_server_side_dry_run_and_raw_create_show_the_same(kubectl: Kubectl) -> None:  # noqa: F811
    dry = kubectl("create", "-f", manifest("limit-and-one-limited-container"),
                  "--dry-run=server", "-o", "json")
    assert json.loads(dry.stdout)["spec"]["resources"] == {
        "requests": {ES: "2Gi"}, "limits": {ES: "20Gi"}}
    assert kubectl("get", "pods", "-o", "name").stdout == ""

    # POST through `create --raw` (a chunked body): the 422 Status kubectl prints verbatim
    source = manifest("container-limit-exceeds-pod-limit")
    path = f"/api/v1/namespaces/{kubectl.namespace}/pods"
    raw = kubectl("create", "--raw", path, "-f", source, check=False)
    assert raw.returncode == 1
    assert raw.stderr.strip() == invalid(
        "Pod", "container-limit-exceeds-pod-limit", *REJECTED["container-limit-exceeds-pod-limit"])


# --- LimitRanger, type Pod ---------------------------------------------------------------


def test_limit_range_type_pod_defaults_and_bounds(kubectl: Kubectl) -> None:  # noqa: F811
    source = manifest("limitrange-pod")
    assert kubectl("create", "-f", source).stdout == "limitrange/pod-storage created\n"
    assert kubectl.json("get", "limitrange", "pod-storage")["spec"]["limits"] == [{
        "type": "Pod", "default": {ES: "2Gi"}, "defaultRequest": {ES: "1Gi"},
        "min": {ES: "512Mi"}, "max": {ES: "4Gi"}, "maxLimitRequestRatio": {ES: "3"}}]

    # nothing asked: the pod-level default and defaultRequest are applied
    kubectl("create", "-f", "-", input=as_input(pod("defaulted")))
    defaulted = kubectl.json("get", "pod", "defaulted")
    assert defaulted["spec"]["resources"] == {"requests": {ES: "1Gi"}, "limits": {ES: "2Gi"}}
    assert defaulted["metadata"]["annotations"] == {
        "kubernetes.io/limit-ranger":
            "LimitRanger plugin set: ephemeral-storage request for pod; ephemeral-storage limit "
            "for pod"}

    # a pod-level value replaces the sum of the containers' (5Gi would break max 4Gi)
    shared = pod("shared-budget",
                 container("c1", {ES: "512Mi"}, {ES: "2560Mi"}),
                 container("c2", {ES: "512Mi"}, {ES: "2560Mi"}),
                 resources={"requests": {ES: "2Gi"}, "limits": {ES: "3Gi"}})
    assert kubectl("create", "-f", "-", input=as_input(shared)).stdout == \
        "pod/shared-budget created\n"
    assert "annotations" not in kubectl.json("get", "pod", "shared-budget")["metadata"]

    cases = {
        "too-big": ({"limits": {ES: "8Gi"}},
                    "maximum ephemeral-storage usage per Pod is 4Gi, but limit is 8Gi"),
        "too-small": ({"requests": {ES: "100Mi"}, "limits": {ES: "1Gi"}},
                      "[minimum ephemeral-storage usage per Pod is 512Mi, but request is 100Mi, "
                      "ephemeral-storage max limit to request ratio per Pod is 3, but provided "
                      "ratio is 10.240000]"),
        "ratio": ({"requests": {ES: "600Mi"}, "limits": {ES: "4Gi"}},
                  "ephemeral-storage max limit to request ratio per Pod is 3, but provided ratio "
                  "is 6.826667"),
    }
    for name, (resources, message) in cases.items():
        assert create_rejected(kubectl, "-f", "-", input=as_input(
            pod(name, resources=resources))) == forbidden_create("STDIN", name, message)
    assert kubectl("get", "pods", "-o", "name").stdout.split() == [
        "pod/defaulted", "pod/shared-budget"]


# --- ResourceQuota ---------------------------------------------------------------------------


def quota_used(k: Kubectl, name: str) -> dict[str, str]:
    used: dict[str, str] = k.json("get", "resourcequota", name).get("status", {}).get("used", {})
    return used


def test_resource_quota_charges_the_pod_level_value(kubectl: Kubectl) -> None:  # noqa: F811
    kubectl("create", "-f", manifest("quota-storage"))
    wait_until(lambda: quota_used(kubectl, "storage"), "the quota's status.used")

    # the pod-level 9Gi is charged, not the container's 1Gi
    kubectl("create", "-f", "-", input=as_input(pod(
        "p1", container("c", {ES: "1Gi"}), resources={"requests": {ES: "9Gi"}})))
    wait_until(lambda: quota_used(kubectl, "storage").get("requests.ephemeral-storage") == "9Gi",
               "9Gi of requests.ephemeral-storage used")

    over_request = {
        "p2": {"requests": {ES: "2Gi"}},
        "p3": {"limits": {ES: "4Gi"}},  # the request defaults to the limit
    }
    for name, resources in over_request.items():
        requested = (resources.get("requests") or resources["limits"])[ES]
        assert create_rejected(kubectl, "-f", "-", input=as_input(
            pod(name, resources=resources))) == forbidden_create(
            "STDIN", name,
            f"exceeded quota: storage, requested: requests.ephemeral-storage={requested}, used: "
            "requests.ephemeral-storage=9Gi, limited: requests.ephemeral-storage=10Gi")
    assert create_rejected(kubectl, "-f", "-", input=as_input(pod(
        "p4", resources={"requests": {ES: "512Mi"}, "limits": {ES: "13Gi"}}))) == \
        forbidden_create("STDIN", "p4",
                         "exceeded quota: storage, requested: limits.ephemeral-storage=13Gi, "
                         "used: limits.ephemeral-storage=0, limited: "
                         "limits.ephemeral-storage=12Gi")

    # without any limit the pod charges nothing to limits.ephemeral-storage
    kubectl("create", "-f", "-", input=as_input(pod("p5", container("c", {ES: "512Mi"}))))
    wait_until(lambda: quota_used(kubectl, "storage") == {
        "requests.ephemeral-storage": "9728Mi", "limits.ephemeral-storage": "0"},
        "9728Mi of requests.ephemeral-storage used")
    # a pod-level limit is charged, not the container's smaller one
    kubectl("create", "-f", "-", input=as_input(pod(
        "p6", container("c", {ES: "256Mi"}, {ES: "512Mi"}),
        resources={"requests": {ES: "256Mi"}, "limits": {ES: "1Gi"}})))
    wait_until(lambda: quota_used(kubectl, "storage") == {
        "requests.ephemeral-storage": "9984Mi", "limits.ephemeral-storage": "1Gi"},
        "1Gi of limits.ephemeral-storage used")
    described = kubectl("describe", "resourcequota", "storage").stdout
    assert re.search(r"^requests\.ephemeral-storage\s+9984Mi\s+10Gi$", described, re.M), described
    assert re.search(r"^limits\.ephemeral-storage\s+1Gi\s+12Gi$", described, re.M), described


# --- the scheduler ---------------------------------------------------------------------------

SCHEDULER_TAINT = {"key": "kep6386.ephemera.test/scheduler", "value": "yes",
                   "effect": "NoSchedule"}
# Only this test's pods may use its nodes; and they do not mind the taint the node lifecycle
# controller puts on API-only nodes once their (absent) kubelet has been silent for 40 s.
SCHEDULER_TOLERATIONS = [
    {"key": SCHEDULER_TAINT["key"], "operator": "Exists"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists"},
]


def scheduling_condition(k: Kubectl, name: str) -> str:
    return k("get", "pod", name, "-o",
             'jsonpath={.status.conditions[?(@.type=="PodScheduled")].status}/'
             '{.status.conditions[?(@.type=="PodScheduled")].reason}/'
             '{.status.conditions[?(@.type=="PodScheduled")].message}').stdout


def node_of(k: Kubectl, name: str) -> str:
    return k("get", "pod", name, "-o", "jsonpath={.spec.nodeName}").stdout


@pytest.fixture
def scheduler_nodes(shared_cluster: Cluster) -> Iterator[list[str]]:
    """The names of the nodes the scheduler test creates; deleted afterwards."""
    names: list[str] = []
    yield names
    if names:
        shared_cluster.kubectl("delete", "node", *names, "--wait=false")


def test_scheduler_places_pod_level_storage_on_a_declaring_node(
        kubectl: Kubectl, scheduler_nodes: list[str]) -> None:  # noqa: F811
    def add_nodes(*nodes: dict[str, Any]) -> None:
        scheduler_nodes.extend(n["metadata"]["name"] for n in nodes)
        kubectl("create", "-f", "-", input=as_input(*nodes))

    small = [node_manifest(f"kep6386-small-{i}", es="2Gi", declared=[PLRES],
                           taints=[SCHEDULER_TAINT]) for i in (1, 2, 3)]
    add_nodes(*small)
    # pod-level 5Gi (the containers ask 1Gi in all): it fits none of the 2Gi nodes
    big = pod("big", container("app", {ES: "512Mi"}), container("log", {ES: "512Mi"}),
              resources={"requests": {ES: "5Gi"}}, schedulerName="default-scheduler",
              tolerations=SCHEDULER_TOLERATIONS)
    kubectl("create", "-f", "-", input=as_input(big))
    message = ("0/3 nodes are available: 3 Insufficient ephemeral-storage. preemption: 0/3 "
               "nodes are available: 3 No preemption victims found for incoming pod.")
    wait_until(lambda: scheduling_condition(kubectl, "big") == f"False/Unschedulable/{message}",
               "the Unschedulable condition")
    described = kubectl("describe", "pod", "big").stdout
    assert re.search(r"^\s+PodScheduled\s+False\s*$", described, re.M), described
    assert re.search(r"Warning\s+FailedScheduling\s+.*\sdefault-scheduler\s+"
                     + re.escape(message) + "$", described, re.M), described

    # a node with room that does not declare the feature is not chosen
    add_nodes(node_manifest("kep6386-undeclared", es="10Gi", taints=[SCHEDULER_TAINT]))
    message = ("0/4 nodes are available: 1 node(s) didn't match Pod's required features, "
               "3 Insufficient ephemeral-storage. preemption: 0/4 nodes are available: "
               "1 Preemption is not helpful for scheduling, 3 No preemption victims found for "
               "incoming pod.")
    wait_until(lambda: scheduling_condition(kubectl, "big") == f"False/Unschedulable/{message}",
               "the message counting the undeclared node")
    # ... though a pod with container-level storage only may go there
    plain = pod("plain", container("app", {ES: "4Gi"}), schedulerName="default-scheduler",
                tolerations=SCHEDULER_TOLERATIONS)
    kubectl("create", "-f", "-", input=as_input(plain))
    assert wait_until(lambda: node_of(kubectl, "plain"), "plain bound") == "kep6386-undeclared"
    # ... and the apiserver refuses a pod with pod-level storage naming that node itself
    pinned = pod("pinned", resources={"requests": {ES: "1Gi"}}, nodeName="kep6386-undeclared")
    assert create_rejected(kubectl, "-f", "-", input=as_input(pinned)) == forbidden_create(
        "STDIN", "pinned", "pod requires features PodLevelResourcesEphemeralStorage which are "
                           'not available on node "kep6386-undeclared"')
    assert node_of(kubectl, "big") == ""

    # a node big enough that declares the feature: the waiting pod is retried and bound there
    add_nodes(node_manifest("kep6386-declared", es="10Gi", declared=[PLRES],
                            taints=[SCHEDULER_TAINT]))
    assert wait_until(lambda: node_of(kubectl, "big"), "big bound") == "kep6386-declared"
    assert scheduling_condition(kubectl, "big") == "True//"
    events = kubectl.json("get", "events", "--field-selector", "involvedObject.name=big")
    assert [(e["reason"], e["message"]) for e in events["items"]
            if e["reason"] == "Scheduled"] == [
        ("Scheduled", f"Successfully assigned {kubectl.namespace}/big to kep6386-declared")]


# --- the gate off ------------------------------------------------------------------------


def test_gate_off_rejects_pod_level_storage(gates_off: Kubectl) -> None:
    cases = {
        "data-pipeline-pod": [f"spec.resources.limits[ephemeral-storage]: {UNSUPPORTED}",
                              f"spec.resources.requests[ephemeral-storage]: {UNSUPPORTED}"],
        "request-and-one-container-limited": [
            f"spec.resources.requests[ephemeral-storage]: {UNSUPPORTED}"],
        "limit-only": [f"spec.resources.limits[ephemeral-storage]: {UNSUPPORTED}"],
    }
    for name, lines in cases.items():
        assert create_rejected(gates_off, "-f", manifest(name)) == invalid("Pod", name, *lines)
    assert gates_off("get", "pods", "-o", "name").stdout == ""


def test_gate_off_defaults_no_pod_level_storage(gates_off: Kubectl) -> None:
    """The PRR's pods with pod-level cpu and container-level storage: with the gate off the
    pod level gets no ephemeral-storage (compare ACCEPTED, gate on)."""
    expected = {"pod-cpu-container-storage": {"requests": {"cpu": "500m"}},
                "pod-cpu-limit-container-storage": {"requests": {"cpu": "1"},
                                                    "limits": {"cpu": "1"}}}
    for name, resources in expected.items():
        gates_off("create", "-f", manifest(name))
        assert pod_resources(gates_off, name) == resources


def test_gate_off_limit_range_type_pod(gates_off: Kubectl) -> None:
    assert create_rejected(gates_off, "-f", manifest("limitrange-pod")) == invalid(
        "LimitRange", "pod-storage",
        "spec.limits[0].default: Forbidden: may not be specified when `type` is 'Pod'",
        "spec.limits[0].defaultRequest: Forbidden: may not be specified when `type` is 'Pod'")

    # min and max stay allowed, and judge the sum of the containers
    gates_off("create", "-f", manifest("limitrange-pod-bounds"))
    two = pod("two-containers", container("c1", {ES: "512Mi"}, {ES: "2560Mi"}),
              container("c2", {ES: "512Mi"}, {ES: "2560Mi"}))
    assert create_rejected(gates_off, "-f", "-", input=as_input(two)) == forbidden_create(
        "STDIN", "two-containers", "maximum ephemeral-storage usage per Pod is 4Gi, but limit "
                                   "is 5Gi")


# --- upgrade -> downgrade -> upgrade (the KEP's rollout plan) --------------------------------


def test_gate_turned_on_off_and_on_again(tmp_path: Path) -> None:
    base = tmp_path / "cluster"
    home = tmp_path / "home"
    home.mkdir()

    def user(cluster: Cluster, namespace: str = "default") -> Kubectl:
        return Kubectl(cluster, home, namespace)

    legacy = pod("legacy", container("c1", {ES: "1Gi"}, {ES: "2Gi"}),
                 resources={"requests": {"cpu": "500m"}})
    pod_level = pod("pod-level", container("app", {ES: "1Gi"}),
                    resources={"requests": {ES: "5Gi"}}, schedulerName="default-scheduler",
                    tolerations=SCHEDULER_TOLERATIONS)
    again = pod("again", resources={"requests": {ES: "1Gi"}})
    node = node_manifest("n1", es="2Gi", declared=[PLRES])
    one_node_full = ("0/1 nodes are available: 1 Insufficient ephemeral-storage. preemption: 0/1 "
                     "nodes are available: 1 No preemption victims found for incoming pod.")

    # Initial state, gate off: a baseline pod with pod-level cpu and container-level storage
    # (k/k#132449's pod).
    with running_cluster(base, GATES_OFF) as cluster:
        k = user(cluster)
        k("create", "-f", "-", input=as_input(legacy))
        assert pod_resources(k, "legacy") == {"requests": {"cpu": "500m"}}

    # Upgrade: the baseline pod stays valid and can still be changed (its pod-level storage is
    # now defaulted, as the PRR says); a pod with pod-level storage is admitted and judged by
    # its pod-level request.
    with running_cluster(base) as cluster:
        k, limited = user(cluster), user(cluster, "limits")
        assert k("label", "pod", "legacy", "phase=on").stdout == "pod/legacy labeled\n"
        assert pod_resources(k, "legacy") == {"requests": {"cpu": "500m", ES: "1Gi"},
                                              "limits": {ES: "2Gi"}}
        k("create", "-f", "-", input=as_input(node, pod_level))
        wait_until(lambda: scheduling_condition(k, "pod-level") ==
                   f"False/Unschedulable/{one_node_full}", "pod-level unschedulable")
        # a LimitRange with pod-level defaults, allowed now
        k("create", "namespace", "limits")
        limited("create", "-f", manifest("limitrange-pod"))
        limited("create", "-f", "-", input=as_input(pod("defaulted")))
        assert pod_resources(limited, "defaulted") == {"requests": {ES: "1Gi"},
                                                       "limits": {ES: "2Gi"}}

    # Downgrade: the stored pod keeps its pod-level storage through an update, the scheduler
    # falls back to the containers' 1Gi (it fits now), new pod-level storage is rejected.
    with running_cluster(base, GATES_OFF) as cluster:
        k, limited = user(cluster), user(cluster, "limits")
        assert k("label", "pod", "pod-level", "phase=off").stdout == "pod/pod-level labeled\n"
        assert pod_resources(k, "pod-level") == {"requests": {ES: "5Gi"}}
        assert wait_until(lambda: node_of(k, "pod-level"), "pod-level bound") == "n1"
        assert create_rejected(k, "-f", "-", input=as_input(again)) == invalid(
            "Pod", "again", f"spec.resources.requests[ephemeral-storage]: {UNSUPPORTED}")
        assert k("label", "pod", "legacy", "phase=off", "--overwrite").stdout == \
            "pod/legacy labeled\n"
        # the stored LimitRange's pod-level defaults are ignored (so a bare pod now breaks
        # its bounds), and its bounds judge the containers' sum
        assert create_rejected(limited, "-f", "-", input=as_input(pod("bare"))) == \
            forbidden_create("STDIN", "bare", "[minimum ephemeral-storage usage per Pod is "
                             "512Mi.  No request is specified, maximum ephemeral-storage usage "
                             "per Pod is 4Gi.  No limit is specified, ephemeral-storage max "
                             "limit to request ratio per Pod is 3, but no request is specified "
                             "or request is 0]")
        too_big = pod("too-big", container("app", {ES: "3Gi"}, {ES: "8Gi"}))
        assert create_rejected(limited, "-f", "-", input=as_input(too_big)) == forbidden_create(
            "STDIN", "too-big", "maximum ephemeral-storage usage per Pod is 4Gi, but limit is "
                                "8Gi")

    # Re-upgrade: new pods with pod-level storage are admitted again.
    with running_cluster(base) as cluster:
        k = user(cluster)
        assert k("create", "-f", "-", input=as_input(again)).stdout == "pod/again created\n"
        assert pod_resources(k, "again") == {"requests": {ES: "1Gi"}}
        assert node_of(k, "pod-level") == "n1"
