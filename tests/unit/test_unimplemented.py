"""The pod fields ephemera accepts without effect (`ephemera.pods.unimplemented`): each is
warned about when set, never silently ignored, and the README lists every one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ephemera.kubelet.volumes.manager import default_plugins
from ephemera.pods.unimplemented import (
    MOUNTABLE_VOLUME_SOURCES,
    unimplemented_paths,
    unimplemented_warnings,
    unimplemented_warnings_on_update,
)

README = Path(__file__).resolve().parents[2] / "README.md"
NO_EFFECT = "has no effect in ephemera (not implemented)"
NO_EFFECT_PLURAL = "have no effect in ephemera (not implemented)"  # "sysctls have"


def spec(**fields: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "busybox"}], **fields}


def test_a_plain_pod_earns_no_warning() -> None:
    assert unimplemented_warnings(spec(restartPolicy="Always", dnsPolicy="ClusterFirst",
                                       hostNetwork=True, nodeSelector={"a": "b"})) == []
    # Zero values ask for nothing.
    assert unimplemented_warnings(spec(hostPID=False, hostAliases=[], securityContext={},
                                       affinity={"podAffinity": {}})) == []


def test_the_api_defaults_earn_no_warning() -> None:
    """A pod re-created from `kubectl get pod -o yaml` carries the defaults: they ask for
    nothing; another value is warned about."""
    defaulted = {"name": "c", "image": "busybox",
                 "terminationMessagePath": "/dev/termination-log",
                 "terminationMessagePolicy": "File"}
    assert unimplemented_warnings({"containers": [defaulted],
                                   "initContainers": [defaulted]}) == []
    changed = {**defaulted, "terminationMessagePath": "/tmp/msg",
               "terminationMessagePolicy": "FallbackToLogsOnError"}
    assert unimplemented_warnings({"containers": [changed]}) == [
        f"spec.containers[0].terminationMessagePath: a termination message file {NO_EFFECT}",
        f"spec.containers[0].terminationMessagePolicy: a termination message policy "
        f"{NO_EFFECT}"]


def test_each_place_is_warned_with_its_path() -> None:
    pod = spec(
        activeDeadlineSeconds=30, hostAliases=[{"ip": "1.2.3.4", "hostnames": ["a"]}],
        affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
                  "nodeAffinity": {"x": 1}, "podAffinity": {"preferred": [1]}},
        securityContext={"runAsUser": 1000, "sysctls": [{"name": "a", "value": "1"}]},
        initContainers=[{"name": "i", "image": "busybox", "resizePolicy": [
            {"resourceName": "cpu", "restartPolicy": "NotRequired"}]}],
        containers=[
            {"name": "c", "image": "busybox", "livenessProbe": {"exec": {"command": ["true"]}}},
            {"name": "d", "image": "busybox",
             "lifecycle": {"preStop": {"exec": {"command": ["true"]}}},
             "ports": [{"containerPort": 80}, {"containerPort": 81, "hostPort": 8081}],
             "securityContext": {"privileged": True, "capabilities": {"add": ["NET_ADMIN"]},
                                 "readOnlyRootFilesystem": True}}])
    assert unimplemented_warnings(pod) == [
        f"spec.activeDeadlineSeconds: a deadline on the pod's run time {NO_EFFECT}",
        f"spec.hostAliases: adding /etc/hosts entries {NO_EFFECT}",
        f"spec.affinity.podAffinity: pod affinity {NO_EFFECT}",
        f"spec.affinity.podAntiAffinity: pod anti-affinity {NO_EFFECT}",
        f"spec.securityContext.runAsUser: a user to run as {NO_EFFECT}",
        f"spec.securityContext.sysctls: sysctls {NO_EFFECT_PLURAL}",
        f"spec.initContainers[0].resizePolicy: a resize policy {NO_EFFECT}",
        f"spec.containers[1].lifecycle: lifecycle hooks {NO_EFFECT_PLURAL}",
        f"spec.containers[1].ports[1].hostPort: a host port {NO_EFFECT}",
        f"spec.containers[1].securityContext.privileged: privileged mode {NO_EFFECT}",
        f"spec.containers[1].securityContext.capabilities: adding or dropping capabilities "
        f"{NO_EFFECT}",
    ]


def test_implemented_fields_are_not_listed() -> None:
    """readOnlyRootFilesystem is implemented (a read-only root in both runtimes)."""
    assert not any("readOnlyRootFilesystem" in path for path in unimplemented_paths())


def test_the_probes_are_not_warned_about() -> None:
    probe = {"exec": {"command": ["true"]}}
    assert unimplemented_warnings(spec(containers=[
        {"name": "c", "image": "i", "livenessProbe": probe, "readinessProbe": probe,
         "startupProbe": probe}])) == []


def test_an_update_warns_only_about_what_it_newly_sets() -> None:
    old = spec(hostIPC=True)
    new = spec(hostIPC=True)
    new["containers"].append({"name": "sidecar", "image": "busybox",
                              "lifecycle": {"postStart": {"exec": {"command": ["true"]}}}})
    assert unimplemented_warnings_on_update(new, old) == [
        f"spec.containers[1].lifecycle: lifecycle hooks {NO_EFFECT_PLURAL}"]
    assert unimplemented_warnings_on_update(old, old) == []


def test_the_readme_lists_every_warned_field() -> None:
    text = README.read_text()
    section = text[text.index("### Accepted without effect (warned)"):]
    section = section[:section.find("\n#", 1)]
    listed = re.findall(r"`([^`]+)`", section)
    assert [p for p in unimplemented_paths() if p not in listed] == []
    assert [p for p in listed if p.startswith("spec.") and p not in unimplemented_paths()] \
        == []


def test_reordered_containers_earn_no_new_warning() -> None:
    hook = {"preStop": {"exec": {"command": ["true"]}}}
    old = spec(containers=[{"name": "a", "image": "i", "lifecycle": hook},
                           {"name": "b", "image": "i"}])
    new = spec(containers=[{"name": "new", "image": "i", "lifecycle": hook},
                           {"name": "a", "image": "i", "lifecycle": hook},
                           {"name": "b", "image": "i"}])
    assert unimplemented_warnings_on_update(new, old) == [
        f"spec.containers[0].lifecycle: lifecycle hooks {NO_EFFECT_PLURAL}"]


def test_a_volume_the_kubelet_cannot_mount_is_warned_about() -> None:
    pod = spec(volumes=[{"name": "e", "emptyDir": {}},
                        {"name": "h", "hostPath": {"path": "/srv"}},
                        {"name": "n", "nfs": {"server": "x", "path": "/"}}])
    assert unimplemented_warnings(pod) == [
        "spec.volumes[1].hostPath: hostPath volumes cannot be mounted in ephemera (not "
        "implemented): a container that mounts one does not start",
        "spec.volumes[2].nfs: nfs volumes cannot be mounted in ephemera (not implemented): "
        "a container that mounts one does not start"]
    # An update warns about a newly added one only.
    old = spec(volumes=pod["volumes"][:2])
    assert [w.split(":")[0] for w in unimplemented_warnings_on_update(pod, old)] == [
        "spec.volumes[2].nfs"]


def test_the_mountable_sources_are_the_kubelets_plugins() -> None:
    assert {p.source_key for p in default_plugins()} == set(MOUNTABLE_VOLUME_SOURCES)
