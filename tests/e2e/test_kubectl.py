"""The real kubectl against a real `ephemera up`: creating, reading (tables, yaml, json,
jsonpath, watch), describing, discovering, explaining and deleting, with the messages kubectl
prints for the server's errors (reference/kubectl-and-clients.md section 2).

One cluster per module (`shared_cluster`, sqlite); every test has its own namespace and kubectl
HOME. The last test runs the commands that touch the store differently on a cluster with the
etcd store. Changing objects (apply, patch, edit, replace, subresources) is
`test_kubectl_update.py`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from cluster import Kubectl, kubectl, namespace_for, shared_cluster, start_cluster  # noqa: F401

pytestmark = pytest.mark.e2e

MANIFESTS = Path(__file__).parent / "manifests"
WEB = str(MANIFESTS / "pod-web.yaml")
BOUND = str(MANIFESTS / "pod-bound.yaml")
INVALID = str(MANIFESTS / "pod-invalid.yaml")
CONFIGMAP = str(MANIFESTS / "configmap.yaml")

NAME_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    r"used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
VOLUME_STATUSES = [{"name": "scratch", "hostPhase": "HostMounted"}]


def cells(line: str) -> list[str]:
    """The cells of a kubectl table line (columns are two or more spaces apart)."""
    return re.split(r"\s{2,}", line.strip())


def rows(output: str) -> dict[str, list[str]]:
    """A kubectl table's rows by their first cell, without the header."""
    return {cells(line)[0]: cells(line) for line in output.splitlines()[1:]}


def test_create_and_already_exists(kubectl: Kubectl) -> None:  # noqa: F811
    assert kubectl("create", "-f", WEB).stdout == "pod/web created\n"
    again = kubectl("create", "-f", WEB, check=False)
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f'Error from server (AlreadyExists): error when creating "{WEB}": '
        'pods "web" already exists')

    dry = kubectl("create", "-f", CONFIGMAP, "--dry-run=server")
    assert dry.stdout == "configmap/settings created (server dry run)\n"
    missing = kubectl("get", "configmap", "settings", check=False)
    assert missing.stderr.strip() == \
        'Error from server (NotFound): configmaps "settings" not found'


def test_get_as_table_wide_and_all_namespaces(kubectl: Kubectl) -> None:  # noqa: F811
    empty = kubectl("get", "pods")
    assert empty.stdout == ""
    assert empty.stderr.strip() == f"No resources found in {kubectl.namespace} namespace."

    kubectl("create", "-f", WEB)
    kubectl("create", "-f", BOUND)
    table = kubectl("get", "pods").stdout
    assert cells(table.splitlines()[0]) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    by_name = rows(table)
    assert sorted(by_name) == ["bound", "web"]
    assert by_name["web"][:4] == ["web", "0/1", "Pending", "0"]
    assert len(by_name["web"]) == 5

    wide = kubectl("get", "po", "-o", "wide").stdout  # the short name, too
    assert cells(wide.splitlines()[0]) == [
        "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE",
        "READINESS GATES"]
    assert rows(wide)["bound"][5:7] == ["<none>", "node-a"]
    assert rows(wide)["web"][5:7] == ["<none>", "<none>"]

    every = kubectl("get", "pods", "-A").stdout.splitlines()
    assert cells(every[0]) == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    mine = sorted(cells(line)[1] for line in every[1:]
                  if cells(line)[0] == kubectl.namespace)
    assert mine == ["bound", "web"]

    single = kubectl("get", "pod", "web").stdout.splitlines()
    assert len(single) == 2 and cells(single[1])[:3] == ["web", "0/1", "Pending"]

    labelled = kubectl("get", "pods", "-l", "app=bound", "-o", "name").stdout
    assert labelled == "pod/bound\n"
    on_node = kubectl("get", "pods", "--field-selector", "spec.nodeName=node-a",
                      "-o", "name").stdout
    assert on_node == "pod/bound\n"


def test_get_yaml_json_jsonpath_keep_the_kep_fields(kubectl: Kubectl) -> None:  # noqa: F811
    kubectl("create", "-f", WEB)
    patch = json.dumps({"status": {"volumeStatuses": VOLUME_STATUSES}})
    kubectl("patch", "pod", "web", "--subresource=status", "--type=merge", "-p", patch)

    as_yaml = yaml.safe_load(kubectl("get", "pod", "web", "-o", "yaml").stdout)
    assert as_yaml["spec"]["containers"][0]["dynamicVolumePolicy"] == {
        "restartPolicy": "RestartContainer"}
    assert as_yaml["status"]["volumeStatuses"] == VOLUME_STATUSES
    assert as_yaml["metadata"]["namespace"] == kubectl.namespace
    assert as_yaml["metadata"]["uid"] and as_yaml["metadata"]["creationTimestamp"]

    as_list = kubectl.json("get", "pods")
    assert as_list["kind"] == "List"
    [item] = as_list["items"]
    assert item["kind"] == "Pod"
    assert item["spec"]["containers"][0]["dynamicVolumePolicy"]["restartPolicy"] == \
        "RestartContainer"
    assert item["status"]["volumeStatuses"] == VOLUME_STATUSES

    jsonpath = kubectl(
        "get", "pod", "web", "-o",
        "jsonpath={.spec.containers[0].dynamicVolumePolicy.restartPolicy}"
        " {.status.volumeStatuses[0].hostPhase} {.metadata.resourceVersion}").stdout
    policy, phase, resource_version = jsonpath.split()
    assert (policy, phase) == ("RestartContainer", "HostMounted")
    assert resource_version == item["metadata"]["resourceVersion"]


def test_get_watch_prints_rows_as_the_pods_change(kubectl: Kubectl) -> None:  # noqa: F811
    kubectl("create", "-f", BOUND)
    with kubectl.stream("get", "pods", "-w") as watch:
        watch.wait_for_line(lambda line: cells(line)[:3] == ["bound", "0/1", "Pending"])
        kubectl("create", "-f", WEB)
        watch.wait_for_line(lambda line: cells(line)[:3] == ["web", "0/1", "Pending"])
        kubectl("delete", "pod", "bound", "--wait=false")
        watch.wait_for_line(lambda line: cells(line)[:3] == ["bound", "0/1", "Terminating"])
        assert watch.process.poll() is None  # still watching
    assert cells(watch.stdout_lines[0]) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert sum(1 for line in watch.stdout_lines if line.startswith("NAME")) == 1

    # One pod, as JSON events: the current state first, then every change, unknown fields kept.
    with kubectl.stream("get", "pod", "web", "-w", "-o", "json",
                        "--output-watch-events") as events:
        events.wait_for_line(lambda line: '"type":"ADDED"' in line)
        kubectl("label", "pod", "web", "watched=yes")
        modified = events.wait_for_line(lambda line: '"type":"MODIFIED"' in line)
        kubectl("delete", "pod", "web")
        deleted = events.wait_for_line(lambda line: '"type":"DELETED"' in line)
    event = json.loads(modified)
    assert event["object"]["metadata"]["labels"] == {"app": "web", "watched": "yes"}
    assert event["object"]["spec"]["containers"][0]["dynamicVolumePolicy"] == {
        "restartPolicy": "RestartContainer"}
    assert json.loads(deleted)["object"]["metadata"]["name"] == "web"
    assert all(json.loads(line)["object"]["metadata"]["name"] == "web"
               for line in events.stdout_lines)


def test_delete_bound_pod_is_graceful(kubectl: Kubectl) -> None:  # noqa: F811
    kubectl("create", "-f", BOUND)
    assert kubectl("delete", "pod", "bound", "--wait=false").stdout == 'pod "bound" deleted\n'
    pod = kubectl.json("get", "pod", "bound")
    assert pod["metadata"]["deletionTimestamp"]
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
    assert rows(kubectl("get", "pods").stdout)["bound"][2] == "Terminating"

    # A plain delete waits for the object to go; the node's grace-0 delete ends the wait.
    with kubectl.stream("delete", "pod", "bound") as waiting:
        # its DELETE answered (a force delete before it would leave it a 404), it waits
        waiting.wait_for_line(lambda line: line == 'pod "bound" deleted')
        assert kubectl.json("get", "pod", "bound")["metadata"]["deletionTimestamp"]
        assert waiting.process.poll() is None
        forced = kubectl("delete", "pod", "bound", "--grace-period=0", "--force")
        assert forced.stdout == 'pod "bound" force deleted\n'
        assert forced.stderr.startswith("Warning: Immediate deletion does not wait")
        assert waiting.wait() == 0
    assert waiting.stdout_lines == ['pod "bound" deleted']
    gone = kubectl("get", "pod", "bound", check=False)
    assert gone.stderr.strip() == 'Error from server (NotFound): pods "bound" not found'


def test_delete_unbound_pod_goes_at_once_and_dry_run_keeps_it(kubectl: Kubectl) -> None:  # noqa: F811
    kubectl("create", "-f", WEB)
    kubectl("create", "-f", BOUND)
    dry = kubectl("delete", "pod", "bound", "--dry-run=server")
    assert dry.stdout == 'pod "bound" deleted (server dry run)\n'
    still = kubectl.json("get", "pod", "bound")
    assert "deletionTimestamp" not in still["metadata"]

    assert kubectl("delete", "pod", "web").stdout == 'pod "web" deleted\n'
    gone = kubectl("get", "pod", "web", check=False)
    assert gone.returncode == 1
    assert gone.stderr.strip() == 'Error from server (NotFound): pods "web" not found'


def test_describe_pod_shows_its_events(kubectl: Kubectl) -> None:  # noqa: F811
    kubectl("create", "-f", BOUND)
    kubectl("create", "-f", WEB)
    uid = kubectl.json("get", "pod", "bound")["metadata"]["uid"]

    def event(name: str, pod: str, pod_uid: str, reason: str, message: str) -> dict[str, object]:
        return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
                "involvedObject": {"kind": "Pod", "name": pod, "namespace": kubectl.namespace,
                                   "uid": pod_uid},
                "reason": reason, "message": message, "type": "Normal", "count": 1,
                "source": {"component": "default-scheduler"},
                "firstTimestamp": "2026-01-01T00:00:00Z",
                "lastTimestamp": "2026-01-01T00:00:00Z"}

    events = [event("bound.1", "bound", uid, "Scheduled",
                    f"Successfully assigned {kubectl.namespace}/bound to node-a"),
              event("web.1", "web", "another-uid", "Other", "not about bound")]
    kubectl("create", "-f", "-", input=yaml.safe_dump_all(events))

    described = kubectl("describe", "pod", "bound").stdout
    assert re.search(r"^Name:\s+bound$", described, re.M)
    assert re.search(rf"^Namespace:\s+{kubectl.namespace}$", described, re.M)
    assert re.search(r"^Node:\s+node-a/", described, re.M)
    assert re.search(r"^Status:\s+Pending$", described, re.M)
    section = described[described.index("\nEvents:") + 1:].splitlines()[1:]
    assert cells(section[0]) == ["Type", "Reason", "Age", "From", "Message"]
    assert len(section) == 3, described  # header, rule, the one event about this pod
    assert cells(section[2])[:2] == ["Normal", "Scheduled"]
    assert cells(section[2])[-2:] == [
        "default-scheduler", f"Successfully assigned {kubectl.namespace}/bound to node-a"]

    web = kubectl("describe", "pod", "web").stdout
    assert re.search(r"^Events:\s+<none>$", web, re.M)  # web's event names another uid
    assert "not about bound" not in web


def test_api_resources_and_explain(kubectl: Kubectl) -> None:  # noqa: F811
    listing = kubectl("api-resources").stdout.splitlines()
    assert cells(listing[0]) == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    by_name = {cells(line)[0]: cells(line) for line in listing[1:]}
    assert by_name["pods"] == ["pods", "po", "v1", "true", "Pod"]
    assert by_name["leases"][-3:] == ["coordination.k8s.io/v1", "true", "Lease"]
    assert not any("/" in name for name in by_name)  # subresources are not listed

    explained = kubectl("explain", "pod.spec.containers.dynamicVolumePolicy").stdout
    assert "FIELD: dynamicVolumePolicy <ContainerDynamicVolumePolicy>" in explained
    assert re.search(r"^  restartPolicy\t<string>$", explained, re.M)
    assert "RestartContainer" in explained

    statuses = kubectl("explain", "pod.status.volumeStatuses").stdout
    assert "FIELD: volumeStatuses <[]PodVolumeStatus>" in statuses
    assert re.search(r"^  hostPhase\t<string>$", statuses, re.M)
    assert re.search(r"^  name\t<string> -required-$", statuses, re.M)

    strategy = kubectl("explain", "deployment.spec.strategy").stdout
    assert "FIELD: strategy <DeploymentStrategy>" in strategy
    assert "How old pods give way to new ones in a rollout" in strategy
    assert re.search(r"^  type\t<string>\n    Recreate \(stop every old pod", strategy, re.M)


def test_errors_for_missing_and_invalid_objects(kubectl: Kubectl) -> None:  # noqa: F811
    not_found = 'Error from server (NotFound): pods "nope" not found'
    for args in (("get", "pod", "nope"), ("delete", "pod", "nope"),
                 ("get", "--raw", f"/api/v1/namespaces/{kubectl.namespace}/pods/nope/dynamic"),
                 ("get", "pod", "nope", "--subresource=dynamic")):
        result = kubectl(*args, check=False)
        assert result.returncode == 1, args
        assert result.stderr.strip() == not_found, args

    invalid = kubectl("create", "-f", INVALID, check=False)
    assert invalid.returncode == 1
    # kubectl lists the Status's details.causes, one per line.
    assert invalid.stderr.splitlines() == [
        'The Pod "Bad_Name" is invalid: ',
        f'* metadata.name: Invalid value: "Bad_Name": {NAME_MESSAGE}',
        "* spec.containers[0].image: Required value"]

    unknown = kubectl("create", "-f", "-", check=False, input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "typo"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "imagePolicy": "Always"}]}}))
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == (
        'Error from server (BadRequest): error when creating "STDIN": Pod in version "v1" '
        'cannot be handled as a Pod: strict decoding error: unknown field '
        '"spec.containers[0].imagePolicy"')

    # A kind no OpenAPI v3 document names: kubectl validates it against the protobuf
    # `/openapi/v2`, finds no schema, and the REST mapping's error is what it prints.
    for api_version, kind in (("v1", "Pood"), ("example.com/v1", "Widget")):
        mapped = kubectl("apply", "-f", "-", check=False, input=yaml.safe_dump({
            "apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}))
        assert mapped.returncode == 1
        assert mapped.stderr.splitlines() == [
            f'error: resource mapping not found for name: "x" namespace: "" from "STDIN": '
            f'no matches for kind "{kind}" in version "{api_version}"',
            "ensure CRDs are installed first"], mapped.stderr


def test_debug_says_ephemeral_containers_are_not_served(kubectl: Kubectl) -> None:  # noqa: F811
    """`kubectl debug` PATCHes `pods/NAME/ephemeralcontainers`, which ephemera does not serve:
    kubectl tells that 404 from a missing pod's by its empty `details`, as upstream's."""
    kubectl("create", "-f", WEB)
    debug = kubectl("debug", "web", "--image=busybox", "--profile=general", "--", "true",
                    check=False)
    assert debug.returncode == 1
    assert debug.stderr.strip() == (
        'error: ephemeral containers are disabled for this cluster (error from server: '
        '"the server could not find the requested resource")'), debug.stderr


def test_as_another_user(kubectl: Kubectl) -> None:  # noqa: F811
    """`--as`/`--as-group`: the admin may impersonate, and the request is then served as the
    user named (who may list nothing here)."""
    who = rows(kubectl("auth", "whoami", "--as=jane", "--as-group=devs").stdout)
    assert who["Username"] == ["Username", "jane"]
    assert who["Groups"] == ["Groups", "[devs system:authenticated]"]
    denied = kubectl("get", "pods", "--as=jane", check=False)
    assert denied.returncode == 1
    assert denied.stderr.strip() == (
        'Error from server (Forbidden): pods is forbidden: User "jane" cannot list resource '
        f'"pods" in API group "" in the namespace "{kubectl.namespace}"')
    assert kubectl("auth", "can-i", "list", "pods", "--as=jane", check=False).stdout == "no\n"


def test_delete_namespace_removes_its_contents(kubectl: Kubectl) -> None:  # noqa: F811
    doomed = f"{kubectl.namespace}-doomed"
    kubectl("create", "namespace", doomed)
    kubectl("-n", doomed, "create", "-f", WEB)
    kubectl("-n", doomed, "create", "-f", CONFIGMAP)
    kubectl("create", "-f", CONFIGMAP)  # a namesake in another namespace stays

    assert kubectl("delete", "namespace", doomed).stdout == f'namespace "{doomed}" deleted\n'
    gone = kubectl("get", "namespace", doomed, check=False)
    assert gone.stderr.strip() == \
        f'Error from server (NotFound): namespaces "{doomed}" not found'
    leftovers = kubectl("-n", doomed, "get", "pods,configmaps")
    assert leftovers.stdout == ""
    assert leftovers.stderr.strip() == f"No resources found in {doomed} namespace."
    assert kubectl("get", "configmap", "settings", "-o", "name").stdout == \
        "configmap/settings\n"


@pytest.mark.etcd
def test_kubectl_on_the_etcd_store(etcd_endpoint: str, tmp_path: Path) -> None:
    """Create, list, watch, apply, patch, conflict, graceful delete and restart with the etcd
    backend (its etcd is shared by this worker's tests: a namespace of our own)."""
    data, home = tmp_path / "data", tmp_path / "home"
    store = ["--store", "etcd", "--etcd-endpoints", etcd_endpoint]
    namespace = namespace_for("etcd-store")
    with start_cluster(data, home, store) as cluster:
        run = Kubectl(cluster, home, namespace)
        run("create", "namespace", namespace)
        run("create", "-f", BOUND)
        with run.stream("get", "pods", "-w") as watch:
            watch.wait_for_line(lambda line: cells(line)[:3] == ["bound", "0/1", "Pending"])
            assert run("apply", "-f", WEB).stdout == "pod/web created\n"
            watch.wait_for_line(lambda line: cells(line)[:3] == ["web", "0/1", "Pending"])
            run("delete", "pod", "bound", "--wait=false")
            watch.wait_for_line(
                lambda line: cells(line)[:3] == ["bound", "0/1", "Terminating"])
        assert run("apply", "-f", WEB).stdout == "pod/web unchanged\n"
        before = run.json("get", "pod", "web")["metadata"]["resourceVersion"]
        patch = '{"metadata":{"labels":{"store":"etcd"}}}'
        assert run("patch", "pod", "web", "-p", patch).stdout == "pod/web patched\n"
        assert run("patch", "pod", "web", "-p", patch).stdout == \
            "pod/web patched (no change)\n"
        live = tmp_path / "web.json"
        live.write_text(json.dumps(run.json("get", "pod", "web")))
        run("label", "pod", "web", "then=changed")
        stale = run("replace", "-f", str(live), check=False)
        assert stale.stderr.strip() == (
            f'Error from server (Conflict): error when replacing "{live}": Operation cannot '
            'be fulfilled on pods "web": the object has been modified; please apply your '
            "changes to the latest version and try again")
        assert cluster.stop() == 0

    with start_cluster(data, home, store) as cluster:
        run = Kubectl(cluster, home, namespace)
        pod = run.json("get", "pod", "web")
        assert int(pod["metadata"]["resourceVersion"]) > int(before)
        assert pod["metadata"]["labels"] == {"app": "web", "store": "etcd", "then": "changed"}
        assert pod["spec"]["containers"][0]["dynamicVolumePolicy"] == {
            "restartPolicy": "RestartContainer"}
        assert run.json("get", "pod", "bound")["metadata"]["deletionTimestamp"]
        run("delete", "pod", "bound", "--grace-period=0", "--force")
        assert run("delete", "namespace", namespace).stdout == \
            f'namespace "{namespace}" deleted\n'
        assert cluster.stop() == 0
