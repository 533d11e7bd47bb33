"""`ephemera dynamic` and `kubectl dynamic` (the plugin `kubectl-dynamic` from the virtualenv's
bin) against a real `ephemera up` with the real OCI runtime: add-volume of an emptyDir with
`--wait` (the container is restarted and sees the mount; `status` shows it HostMounted),
remove-volume with `--wait` (pruned, the container restarted without it), add-container and
remove-container with `--wait`, an invalid change answered with the server's causes and exit
code 1, a change the node cannot allocate (`--wait` says why) and one reading a ConfigMap that
does not exist yet (allocated, `ErrorMounting` until it is created, a later change not held up),
and `kubectl dynamic status` found by kubectl through PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import (
    Cluster,
    Kubectl,
    container,
    namespaced_kubectl,
    pod_json,
    run_kubelet_cluster,
    wait,
    wait_pod,
)

pytestmark = pytest.mark.e2e

VENV_BIN = Path(sys.executable).parent
SCRIPT = ("trap 'exit 0' TERM; for d in /keep /extra; do "
          "grep -q \" $d \" /proc/mounts && echo \"mounted $d\"; done; echo ready; "
          "while true; do sleep 0.2; done")


@pytest.fixture(scope="module")
def cli_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from run_kubelet_cluster(tmp_path_factory, "dynamic-cli-cluster", "cli-node")


@pytest.fixture
def k(cli_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Kubectl]:
    yield from namespaced_kubectl(cli_cluster, tmp_path, request)


def dynamic(k: Kubectl, *args: str) -> subprocess.CompletedProcess[str]:
    """`ephemera dynamic -n NAMESPACE --kubeconfig FILE ACTION ARGS` (the options before the
    action; the plugin test gives them after it)."""
    return subprocess.run(
        [sys.executable, "-m", "ephemera.cli", "dynamic", "-n", str(k.namespace),
         "--kubeconfig", str(k.cluster.kubeconfig), *args],
        capture_output=True, text=True, timeout=150, check=False,
        env={**os.environ, "HOME": str(k.home)})


def _worker(k: Kubectl) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "volumes": [{"name": "keep", "emptyDir": {}}],
                     "containers": [{"name": "c", "image": "busybox",
                                     "command": ["sh", "-c", SCRIPT],
                                     "volumeMounts": [{"name": "keep",
                                                       "mountPath": "/keep"}]}]}}
    k("create", "-f", "-", input=yaml.safe_dump(body))
    return wait_pod(k, "w", lambda p: "running" in container(p).get("state", {}), "running")


def _phase(p: dict[str, Any], name: str) -> str | None:
    for entry in p.get("status", {}).get("volumeStatuses") or []:
        if entry["name"] == name:
            return str(entry["hostPhase"])
    return None


def _row(table: str, first_cell: str) -> list[str]:
    for line in table.splitlines():
        cells = line.split()
        if cells and cells[0] == first_cell:
            return cells
    return []


def test_add_volume_then_remove_it_waiting_for_actuation(k: Kubectl) -> None:
    first_id = container(_worker(k))["containerID"]

    added = dynamic(k, "add-volume", "w", "--emptydir", "extra", "--size-limit", "16Mi",
                    "--mount", "c:/extra", "--wait")
    assert added.returncode == 0, added.stderr
    assert "pod/w: volume extra added" in added.stdout
    assert "pod/w: actuated in " in added.stdout
    # --wait returned only once actuated: no further waiting needed to see it.
    after = pod_json(k, "w")
    restarted = container(after)
    assert restarted["containerID"] != first_id
    assert "running" in restarted["state"]
    assert {(m["name"], m["mountPath"]) for m in restarted["volumeMounts"]} == \
        {("keep", "/keep"), ("extra", "/extra")}
    assert _phase(after, "extra") == "HostMounted"
    policy = after["spec"]["containers"][0]["dynamicVolumePolicy"]
    assert policy == {"restartPolicy": "RestartContainer"}
    wait(lambda: "mounted /extra" in k("logs", "w", "-c", "c").stdout,
         "the restarted container to see /extra", k.cluster)

    status = dynamic(k, "status", "w")
    assert status.returncode == 0, status.stderr
    assert _row(status.stdout, "VOLUME")[:3] == ["VOLUME", "TYPE", "DESIRED"]
    assert _row(status.stdout, "extra")[:5] == ["extra", "emptyDir", "yes", "yes",
                                                "HostMounted"]
    assert _row(status.stdout, "c")[1:4] == ["keep:/keep,extra:/extra"] * 3

    removed = dynamic(k, "remove-volume", "w", "extra", "--wait")
    assert removed.returncode == 0, removed.stderr
    assert "pod/w: volume extra removed" in removed.stdout
    assert "pod/w: actuated in " in removed.stdout
    gone = pod_json(k, "w")
    assert _phase(gone, "extra") is None
    assert [m["name"] for m in container(gone)["volumeMounts"]] == ["keep"]
    assert container(gone)["containerID"] != restarted["containerID"]
    status = dynamic(k, "status", "w")
    assert _row(status.stdout, "extra") == []
    assert _row(status.stdout, "c")[1:4] == ["keep:/keep"] * 3


def test_add_and_remove_a_container_waiting_for_actuation(k: Kubectl) -> None:
    main_id = container(_worker(k))["containerID"]
    added = dynamic(k, "add-container", "w", "--name", "side", "--image", "busybox",
                    "--volume-mount", "keep:/keep:ro", "--wait",
                    "--", "sh", "-c", SCRIPT)
    assert added.returncode == 0, added.stderr
    assert "pod/w: actuated in " in added.stdout
    p = pod_json(k, "w")
    side = container(p, "side")
    assert "running" in side["state"]
    assert [(m["name"], m["mountPath"]) for m in side["volumeMounts"]] == [("keep", "/keep")]
    assert container(p)["containerID"] == main_id  # the main container kept running

    removed = dynamic(k, "remove-container", "w", "side", "--wait")
    assert removed.returncode == 0, removed.stderr
    assert "pod/w: container side removed" in removed.stdout
    p = pod_json(k, "w")
    assert [c["name"] for c in p["spec"]["containers"]] == ["c"]
    assert "running" not in container(p, "side").get("state", {})
    assert container(p)["containerID"] == main_id


def test_an_invalid_change_shows_the_server_causes(k: Kubectl) -> None:
    _worker(k)
    result = dynamic(k, "add-volume", "w", "--emptydir", "keep", "--mount", "c:/again")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0].startswith('Error from server (Invalid): Pod "w" is invalid: ')
    assert '  spec.volumes[1].name: Duplicate value: "keep"' in lines
    assert result.stdout == ""
    missing = dynamic(k, "remove-volume", "w", "nope")
    assert missing.returncode == 1
    assert missing.stderr == 'error: pod "w" has no volume "nope"\n'
    absent = dynamic(k, "status", "nothere")
    assert absent.returncode == 1
    assert absent.stderr == 'Error from server (NotFound): pods "nothere" not found\n'


def test_kubectl_finds_the_plugin_on_path(k: Kubectl) -> None:
    _worker(k)
    env = {**os.environ, "HOME": str(k.home), "KUBECONFIG": str(k.cluster.kubeconfig),
           "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    listed = subprocess.run(["kubectl", "plugin", "list"], env=env, capture_output=True,
                            text=True, timeout=60, check=False)
    assert str(VENV_BIN / "kubectl-dynamic") in listed.stdout
    result = subprocess.run(["kubectl", "dynamic", "status", "w", "-n", str(k.namespace)],
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Pod: {k.namespace}/w   Node: cli-node   Phase: Running\n")
    assert _row(result.stdout, "keep")[:5] == ["keep", "emptyDir", "yes", "yes",
                                               "HostMounted"]
    assert _row(result.stdout, "c")[1:4] == ["keep:/keep"] * 3


def test_wait_on_a_change_the_node_cannot_allocate_says_why(k: Kubectl) -> None:
    first_id = container(_worker(k))["containerID"]
    pending = dynamic(k, "add-volume", "w", "--emptydir", "huge", "--medium", "Memory",
                      "--size-limit", "100Pi", "--mount", "c:/huge", "--wait", "--timeout", "3")
    assert pending.returncode == 1
    assert "pod/w: volume huge added" in pending.stdout
    assert "error: not actuated within 3s: volume huge is Pending" in pending.stderr
    assert "the node has not allocated it: Node didn't have enough resource: memory" in \
        pending.stderr
    status = dynamic(k, "status", "w")
    assert _row(status.stdout, "huge")[:5] == ["huge", "emptyDir(Memory)", "yes", "no",
                                               "Pending"]
    assert _row(status.stdout, "c")[1:4] == ["keep:/keep,huge:/huge", "keep:/keep",
                                             "keep:/keep"]
    withdrawn = dynamic(k, "remove-volume", "w", "huge", "--wait")
    assert withdrawn.returncode == 0, withdrawn.stderr
    assert "pod/w: actuated in " in withdrawn.stdout
    p = pod_json(k, "w")
    assert _phase(p, "huge") is None
    assert container(p)["containerID"] == first_id  # never restarted for it

    # A ConfigMap that does not exist yet is no reason to refuse a change (KEP-6395 phase
    # 3): allocated, the volume fails to mount (the node retries it), `c` keeps running as it
    # is, and a later change to the pod goes through meanwhile.
    failing = plugin(k, "add-volume", "w", "--configmap", "task", "--mount", "c:/task",
                     "--wait", "--timeout", "60")
    assert failing.returncode == 1
    assert failing.stderr.strip() == (
        "error: volume task failed to mount (the node retries it): MountVolume.SetUp failed "
        'for volume "task" : configmap "task" not found')
    status = plugin(k, "status", "w")
    assert _row(status.stdout, "task")[:5] == ["task", "configMap/task", "yes", "yes",
                                               "ErrorMounting"]
    assert _row(status.stdout, "c")[1:4] == ["keep:/keep,task:/task"] * 2 + ["keep:/keep"]
    side = dynamic(k, "add-container", "w", "--name", "side", "--image", "busybox",
                   "--wait", "--", "sh", "-c", SCRIPT)
    assert side.returncode == 0, side.stderr
    assert container(pod_json(k, "w"))["containerID"] == first_id
    k("create", "configmap", "task", "--from-literal=job=42")
    mounted = wait_pod(k, "w", lambda p: _phase(p, "task") == "HostMounted" and "running" in
                       container(p).get("state", {}) and
                       {m["name"] for m in container(p).get("volumeMounts") or []} ==
                       {"keep", "task"}, "c restarted with /task")
    assert container(mounted)["containerID"] != first_id


def plugin(k: Kubectl, *args: str) -> subprocess.CompletedProcess[str]:
    """The real kubectl running `kubectl dynamic ARGS -n NAMESPACE`, the plugin found on the
    PATH that `ephemera up` prints (the virtualenv's bin first)."""
    env = {**os.environ, "HOME": str(k.home), "KUBECONFIG": str(k.cluster.kubeconfig),
           "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["kubectl", "dynamic", *args, "-n", str(k.namespace)], env=env,
                          capture_output=True, text=True, timeout=150, check=False)


def test_kubectl_dynamic_adds_a_projected_volume_of_every_source(k: Kubectl) -> None:
    k("create", "configmap", "settings", "--from-literal=mode=fast")
    k("create", "secret", "generic", "creds", "--from-literal=password=s3cret")
    first_id = container(_worker(k))["containerID"]
    added = plugin(k, "add-volume", "w", "--projected", "bundle",
                   "--project-configmap", "settings", "--project-secret", "creds",
                   "--project-downward-api", "podname=metadata.name",
                   "--project-token", "token", "--token-audience", "vault",
                   "--token-expiration-seconds", "3600",
                   "--mount", "c:/bundle:ro", "--wait")
    assert added.returncode == 0, added.stderr
    assert "pod/w: volume bundle added" in added.stdout
    p = pod_json(k, "w")
    assert p["spec"]["volumes"][-1] == {"name": "bundle", "projected": {
        "defaultMode": 420, "sources": [
            {"configMap": {"name": "settings"}}, {"secret": {"name": "creds"}},
            {"downwardAPI": {"items": [{"path": "podname",
                                        "fieldRef": {"apiVersion": "v1",
                                                     "fieldPath": "metadata.name"}}]}},
            {"serviceAccountToken": {"path": "token", "audience": "vault",
                                     "expirationSeconds": 3600}}]}}
    assert container(p)["containerID"] != first_id
    assert _phase(p, "bundle") == "HostMounted"
    out = k("exec", "w", "-c", "c", "--", "sh", "-c",
            "cat /bundle/mode; echo; cat /bundle/password; echo; cat /bundle/podname; echo; "
            "head -c 3 /bundle/token").stdout
    assert out == "fast\ns3cret\nw\neyJ"  # a JWT's header
    status = plugin(k, "status", "w")
    assert status.returncode == 0, status.stderr
    assert _row(status.stdout, "bundle")[:5] == [
        "bundle", "projected(configMap/settings,secret/creds,downwardAPI,serviceAccountToken)",
        "yes", "yes", "HostMounted"]


def test_kubectl_dynamic_errors_say_what_its_help_says(k: Kubectl) -> None:
    helped = plugin(k, "add-volume", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "--mount CONTAINER:PATH[:ro]" in helped.stdout
    bad = plugin(k, "add-volume", "w", "--emptydir", "x", "--mount", "c")
    assert bad.returncode == 1
    assert bad.stderr == 'error: invalid --mount "c": expected CONTAINER:PATH[:ro]\n'
    helped = plugin(k, "add-container", "--help")
    assert "--volume-mount VOLUME:PATH[:ro]" in helped.stdout
    bad = plugin(k, "add-container", "w", "--name", "s", "--image", "busybox",
                 "--volume-mount", "keep")
    assert bad.returncode == 1
    assert bad.stderr == 'error: invalid --volume-mount "keep": expected VOLUME:PATH[:ro]\n'
    empty = plugin(k, "add-volume", "w", "--projected", "p")
    assert empty.returncode == 1
    assert empty.stderr == ("error: --projected needs at least one source: --project-secret, "
                            "--project-configmap, --project-downward-api or --project-token\n")
