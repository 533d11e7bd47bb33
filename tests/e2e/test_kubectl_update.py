"""The real kubectl changing objects on a real `ephemera up`: `apply` (client-side and
`--server-side`), `patch` of every type, `edit` with a scripted EDITOR, `replace`, and the
`status` and `dynamic` subresources (`--subresource`, `get --raw`, `replace --raw`), with what
kubectl prints (reference/kubectl-and-clients.md sections 2 and 6).

Only the changes a pod update allows are made (labels, images), so that the tests hold once
pod update validation and the `/dynamic` rules judge them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import Kubectl, kubectl, shared_cluster  # noqa: F401  (fixtures)

pytestmark = pytest.mark.e2e

MANIFESTS = Path(__file__).parent / "manifests"
WEB = str(MANIFESTS / "pod-web.yaml")
APPLIED = MANIFESTS / "pod-applied.yaml"
POLICY = {"restartPolicy": "RestartContainer"}
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
CONFLICT = ('Operation cannot be fulfilled on pods "web": the object has been modified; please '
            "apply your changes to the latest version and try again")


def edited_copy(source: Path, target: Path, *replacements: tuple[str, str]) -> str:
    text = source.read_text()
    for old, new in replacements:
        assert old in text
        text = text.replace(old, new)
    target.write_text(text)
    return str(target)


def resource_version(kubectl: Kubectl, name: str = "web") -> str:  # noqa: F811
    return str(kubectl.json("get", "pod", name)["metadata"]["resourceVersion"])


def managed(kubectl: Kubectl, name: str) -> dict[str, Any]:  # noqa: F811
    """The pod with its managedFields (kubectl hides them unless asked)."""
    pod: dict[str, Any] = kubectl.json("get", "pod", name, "--show-managed-fields")
    return pod


def script(path: Path, body: str) -> str:
    """An executable shell script (for EDITOR)."""
    path.write_text("#!/bin/sh\nset -e\n" + body)
    path.chmod(0o755)
    return str(path)


def test_apply_client_side_created_configured_unchanged(kubectl: Kubectl,  # noqa: F811
                                                        tmp_path: Path) -> None:
    manifest = str(tmp_path / "applied.yaml")
    shutil.copy(APPLIED, manifest)
    assert kubectl("apply", "-f", manifest).stdout == "pod/applied created\n"
    assert kubectl("apply", "-f", manifest).stdout == "pod/applied unchanged\n"

    first = kubectl.json("get", "pod", "applied")
    last_applied = json.loads(first["metadata"]["annotations"][LAST_APPLIED])
    assert last_applied["spec"]["containers"][0]["dynamicVolumePolicy"] == POLICY

    # A new image for one container and a new label: a three-way strategic merge patch that
    # keeps the object-valued dynamicVolumePolicy of the container it changes.
    edited_copy(Path(manifest), Path(manifest),
                ("image: busybox:1.36\n    dynamicVolumePolicy", "image: busybox:1.37\n"
                 "    dynamicVolumePolicy"), ("team: a", "team: a\n    tier: back"))
    assert kubectl("apply", "-f", manifest).stdout == "pod/applied configured\n"
    pod = kubectl.json("get", "pod", "applied")
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    assert [c["name"] for c in pod["spec"]["containers"]] == ["c", "sidecar"]
    assert containers["c"]["image"] == "busybox:1.37"
    assert containers["c"]["dynamicVolumePolicy"] == POLICY
    assert containers["sidecar"]["image"] == "busybox:1.36"
    assert pod["metadata"]["labels"] == {"team": "a", "tier": "back"}
    assert int(pod["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert kubectl("apply", "-f", manifest).stdout == "pod/applied unchanged\n"

    # A label dropped from the manifest is removed (it was in the last applied configuration).
    edited_copy(Path(manifest), Path(manifest), ("\n    tier: back", ""))
    assert kubectl("apply", "-f", manifest).stdout == "pod/applied configured\n"
    assert kubectl.json("get", "pod", "applied")["metadata"]["labels"] == {"team": "a"}


def test_apply_server_side_conflicts_and_force(kubectl: Kubectl, tmp_path: Path) -> None:  # noqa: F811
    manifest = str(APPLIED)
    assert kubectl("apply", "--server-side", "-f", manifest).stdout == \
        "pod/applied serverside-applied\n"
    pod = managed(kubectl, "applied")
    assert pod["spec"]["containers"][0]["dynamicVolumePolicy"] == POLICY
    [entry] = [e for e in pod["metadata"]["managedFields"] if e["manager"] == "kubectl"]
    assert entry["operation"] == "Apply"
    assert "f:dynamicVolumePolicy" in json.dumps(entry["fieldsV1"])

    again = kubectl("apply", "--server-side", "-f", manifest)
    assert again.stdout == "pod/applied serverside-applied\n"
    assert kubectl.json("get", "pod", "applied")["metadata"]["resourceVersion"] == \
        pod["metadata"]["resourceVersion"]  # nothing changed

    # Another manager takes the label over; applying the old value conflicts.
    kubectl("patch", "pod", "applied", "--type=merge", "-p",
            '{"metadata":{"labels":{"team":"b"}}}')
    conflict = kubectl("apply", "--server-side", "-f", manifest, check=False)
    assert conflict.returncode == 1
    assert conflict.stderr.splitlines()[0] == (
        'error: Apply failed with 1 conflict: conflict with "kubectl-patch" using v1: '
        ".metadata.labels.team")
    assert kubectl.json("get", "pod", "applied")["metadata"]["labels"] == {"team": "b"}

    forced = kubectl("apply", "--server-side", "--force-conflicts", "-f", manifest)
    assert forced.stdout == "pod/applied serverside-applied\n"
    pod = managed(kubectl, "applied")
    assert pod["metadata"]["labels"] == {"team": "a"}
    managers = {e["manager"]: e for e in pod["metadata"]["managedFields"]}
    assert "f:team" in json.dumps(managers["kubectl"]["fieldsV1"])
    assert "f:team" not in json.dumps(managers.get("kubectl-patch", {}).get("fieldsV1", {}))

    # Server-side apply of a new image through the dynamic subresource: there, "kubectl" is
    # another manager than on the main resource (managers are per subresource), so the image
    # it owns on the main resource conflicts until forced.
    dynamic = edited_copy(APPLIED, tmp_path / "dynamic.yaml",
                          ("image: busybox:1.36\n    dynamicVolumePolicy",
                           "image: busybox:1.37\n    dynamicVolumePolicy"))
    refused = kubectl("apply", "--server-side", "--subresource=dynamic", "-f", dynamic,
                      check=False)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[0] == (
        'error: Apply failed with 1 conflict: conflict with "kubectl": '
        '.spec.containers[name="c"].image')
    result = kubectl("apply", "--server-side", "--subresource=dynamic", "--force-conflicts",
                     "-f", dynamic)
    assert result.stdout == "pod/applied serverside-applied\n"
    pod = managed(kubectl, "applied")
    assert pod["spec"]["containers"][0]["image"] == "busybox:1.37"
    on_dynamic = [e for e in pod["metadata"]["managedFields"]
                  if e.get("subresource") == "dynamic"]
    assert [(e["manager"], e["operation"]) for e in on_dynamic] == [("kubectl", "Apply")]


@pytest.mark.parametrize(("patch_type", "patch", "label"), [
    ("strategic", '{"metadata":{"labels":{"kind":"strategic"}}}', "strategic"),
    ("merge", '{"metadata":{"labels":{"kind":"merge"}}}', "merge"),
    ("json", '[{"op":"add","path":"/metadata/labels/kind","value":"json"}]', "json"),
])
def test_patch_every_type_and_no_op(kubectl: Kubectl, patch_type: str, patch: str,  # noqa: F811
                                    label: str) -> None:
    kubectl("create", "-f", WEB)
    before = resource_version(kubectl)
    result = kubectl("patch", "pod", "web", f"--type={patch_type}", "-p", patch)
    assert result.stdout == "pod/web patched\n"
    pod = kubectl.json("get", "pod", "web")
    assert pod["metadata"]["labels"] == {"app": "web", "kind": label}
    assert int(pod["metadata"]["resourceVersion"]) > int(before)
    assert pod["spec"]["containers"][0]["dynamicVolumePolicy"] == POLICY

    # The same patch again changes nothing: kubectl says so and the version stays.
    repeated = kubectl("patch", "pod", "web", f"--type={patch_type}", "-p", patch)
    assert repeated.stdout == "pod/web patched (no change)\n"
    assert resource_version(kubectl) == pod["metadata"]["resourceVersion"]


def test_strategic_patch_merges_containers_by_name(kubectl: Kubectl) -> None:  # noqa: F811
    kubectl("create", "-f", WEB)
    result = kubectl("patch", "pod", "web", "-p",
                     '{"spec":{"containers":[{"name":"c","image":"busybox:1.37"}]}}')
    assert result.stdout == "pod/web patched\n"
    [container] = kubectl.json("get", "pod", "web")["spec"]["containers"]
    assert container["image"] == "busybox:1.37"
    assert container["dynamicVolumePolicy"] == POLICY  # merged by name, not replaced

    # A JSON patch whose test fails changes nothing.
    failed = kubectl("patch", "pod", "web", "--type=json", "-p",
                     '[{"op":"test","path":"/metadata/labels/app","value":"other"},'
                     '{"op":"remove","path":"/metadata/labels/app"}]', check=False)
    assert failed.returncode == 1
    assert "testing value /metadata/labels/app failed: test failed" in failed.stderr
    assert kubectl.json("get", "pod", "web")["metadata"]["labels"] == {"app": "web"}


def test_edit_with_a_scripted_editor(kubectl: Kubectl, tmp_path: Path) -> None:  # noqa: F811
    kubectl("create", "-f", WEB)
    relabel = script(tmp_path / "relabel.sh", "sed -i 's/app: web/app: edited/' \"$1\"\n")
    edited = kubectl("edit", "pod", "web", env={"EDITOR": relabel})
    assert edited.stdout == "pod/web edited\n"
    pod = kubectl.json("get", "pod", "web")
    assert pod["metadata"]["labels"] == {"app": "edited"}
    assert pod["spec"]["containers"][0]["dynamicVolumePolicy"] == POLICY

    unchanged = kubectl("edit", "pod", "web", env={"EDITOR": script(tmp_path / "noop.sh", "")})
    assert unchanged.stderr.strip() == "Edit cancelled, no changes made."
    assert resource_version(kubectl) == pod["metadata"]["resourceVersion"]

    # Through the dynamic subresource: a new image for the container.
    reimage = script(tmp_path / "reimage.sh",
                     "sed -i 's/image: busybox:1.36/image: busybox:1.37/' \"$1\"\n")
    dynamic = kubectl("edit", "pod", "web", "--subresource=dynamic", env={"EDITOR": reimage})
    assert dynamic.stdout == "pod/web edited\n"
    assert kubectl.json("get", "pod", "web")["spec"]["containers"][0]["image"] == \
        "busybox:1.37"


def test_edit_rejected_by_validation_saves_nothing(kubectl: Kubectl,  # noqa: F811
                                                   tmp_path: Path) -> None:
    kubectl("create", "-f", WEB)
    before = resource_version(kubectl)
    forbidden = script(tmp_path / "restart-policy.sh",
                       "sed -i 's/restartPolicy: Always/restartPolicy: Never/' \"$1\"\n")
    result = kubectl("edit", "pod", "web", env={"EDITOR": forbidden}, check=False)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == 'error: pods "web" is invalid'
    assert lines[-1] == "error: Edit cancelled, no valid changes were saved."
    # kubectl keeps the file with the server's causes in its header comment.
    kept = Path(lines[1].split('"')[1]).read_text()
    assert "# * spec: Forbidden: pod updates may not change fields other than" in kept
    assert resource_version(kubectl) == before


def test_edit_of_a_volume_shows_upstream_s_diff(kubectl: Kubectl,  # noqa: F811
                                               tmp_path: Path) -> None:
    """`kubectl edit` that changes a volume: the rejection's diff marks only the changed
    field, however the edited YAML orders its keys."""
    pod = yaml.safe_load(Path(WEB).read_text())
    pod["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}]
    kubectl("create", "-f", "-", input=json.dumps(pod))
    resize = script(tmp_path / "resize.sh", "sed -i 's/sizeLimit: 1Gi/sizeLimit: 2Gi/' \"$1\"\n")
    result = kubectl("edit", "pod", "web", env={"EDITOR": resize}, check=False)
    assert result.returncode == 1
    kept = Path(result.stderr.splitlines()[1].split('"')[1]).read_text()
    header = kept.splitlines()
    start = header.index("#   core.PodSpec{")
    assert header[start:header.index("#   }", start) + 1] == [
        "#   core.PodSpec{",
        "#   \tVolumes: []core.Volume{",
        "#   \t\t{",
        '#   \t\t\tName: "scratch",',
        "#   \t\t\tVolumeSource: core.VolumeSource{",
        "#   \t\t\t\tEmptyDir: &core.EmptyDirVolumeSource{",
        '# - \t\t\t\t\tSizeLimit: "1Gi",',
        '# + \t\t\t\t\tSizeLimit: "2Gi",',
        "#   \t\t\t\t},",
        "#   \t\t\t},",
        "#   \t\t},",
        "#   \t},",
        '#   \tContainers:    {{Name: "c", Image: "busybox:1.36", Resources: {}, '
        'TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: "File", '
        'ImagePullPolicy: "IfNotPresent", DynamicVolumePolicy: {RestartPolicy: '
        '"RestartContainer"}}},',
        '#   \tRestartPolicy: "Always",',
        "#   \t... // 10 identical fields",
        "#   }"]


def test_fields_without_effect_are_warned(kubectl: Kubectl) -> None:  # noqa: F811
    """kubectl prints the apiserver's `Warning` for a field ephemera accepts without
    acting on it."""
    pod = yaml.safe_load(Path(WEB).read_text())
    pod["spec"]["hostAliases"] = [{"ip": "10.0.0.1", "hostnames": ["db"]}]
    pod["spec"]["containers"][0]["securityContext"] = {"runAsUser": 1000}
    created = kubectl("create", "-f", "-", input=json.dumps(pod))
    assert created.stdout == "pod/web created\n"
    no_effect = "has no effect in ephemera (not implemented)"
    assert created.stderr.splitlines() == [
        f"Warning: spec.hostAliases: adding /etc/hosts entries {no_effect}",
        f"Warning: spec.containers[0].securityContext.runAsUser: a user to run as {no_effect}"]
    relabeled = kubectl("label", "pod", "web", "tier=backend")
    assert relabeled.stderr == ""  # nothing newly set: no warning again


def test_diff_and_empty_metadata_maps(kubectl: Kubectl, tmp_path: Path) -> None:  # noqa: F811
    kubectl("create", "-f", WEB)
    before = resource_version(kubectl)
    assert kubectl("diff", "-f", WEB).stdout == ""  # a server-side dry run: no difference

    newer = edited_copy(Path(WEB), tmp_path / "newer.yaml",
                        ("busybox:1.36", "busybox:1.37"))
    diff = kubectl("diff", "-f", newer, check=False)
    assert diff.returncode == 1  # differences found
    changed = [line for line in diff.stdout.splitlines()
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed == ["-  generation: 1", "+  generation: 2",
                       "-    image: busybox:1.36", "+    image: busybox:1.37"]
    assert resource_version(kubectl) == before  # the dry run stored nothing

    # An empty map in metadata is no change at all (upstream never stores one).
    for patch_type in ("merge", "strategic"):
        result = kubectl("patch", "pod", "web", f"--type={patch_type}", "-p",
                         '{"metadata":{"annotations":{},"finalizers":[]}}')
        assert result.stdout == "pod/web patched (no change)\n"
    pod = managed(kubectl, "web")
    assert pod["metadata"]["resourceVersion"] == before
    assert "annotations" not in pod["metadata"]
    assert [e["manager"] for e in pod["metadata"]["managedFields"]] == ["kubectl-create"]


def test_replace_and_stale_resource_version(kubectl: Kubectl, tmp_path: Path) -> None:  # noqa: F811
    kubectl("create", "-f", WEB)
    live = tmp_path / "live.yaml"
    live.write_text(kubectl("get", "pod", "web", "-o", "yaml").stdout)
    changed = edited_copy(live, live, ("app: web", "app: replaced"))
    assert kubectl("replace", "-f", changed).stdout == "pod/web replaced\n"
    pod = kubectl.json("get", "pod", "web")
    assert pod["metadata"]["labels"] == {"app": "replaced"}
    assert pod["spec"]["containers"][0]["dynamicVolumePolicy"] == POLICY

    stale = kubectl("replace", "-f", changed, check=False)  # its resourceVersion is old now
    assert stale.returncode == 1
    assert stale.stderr.strip() == \
        f'Error from server (Conflict): error when replacing "{changed}": {CONFLICT}'


def test_status_subresource_patch_with_volume_statuses(kubectl: Kubectl) -> None:  # noqa: F811
    kubectl("create", "-f", WEB)
    statuses = [{"name": "scratch", "hostPhase": "Pending"}]
    patch = json.dumps({"status": {"volumeStatuses": statuses}})
    result = kubectl("patch", "pod", "web", "--subresource=status", "--type=merge", "-p", patch)
    assert result.stdout == "pod/web patched\n"
    pod = kubectl.json("get", "pod", "web")
    assert pod["status"]["volumeStatuses"] == statuses
    assert pod["status"]["phase"] == "Pending"

    again = kubectl("patch", "pod", "web", "--subresource=status", "--type=merge", "-p", patch)
    assert again.stdout == "pod/web patched (no change)\n"
    assert resource_version(kubectl) == pod["metadata"]["resourceVersion"]

    # The status subresource ignores spec changes; the main resource ignores status changes.
    kubectl("patch", "pod", "web", "--subresource=status", "--type=merge", "-p",
            '{"metadata":{"labels":{"via":"status"}},"spec":{"activeDeadlineSeconds":5}}')
    kubectl("patch", "pod", "web", "--type=merge", "-p",
            '{"status":{"volumeStatuses":[{"name":"other","hostPhase":"Pending"}]}}')
    pod = kubectl.json("get", "pod", "web")
    assert "activeDeadlineSeconds" not in pod["spec"]
    assert pod["status"]["volumeStatuses"] == statuses


def test_dynamic_subresource_with_kubectl(kubectl: Kubectl, tmp_path: Path) -> None:  # noqa: F811
    kubectl("create", "-f", WEB)
    table = kubectl("get", "pod", "web", "--subresource=dynamic").stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert table[1].split()[:3] == ["web", "0/1", "Pending"]
    as_yaml = yaml.safe_load(
        kubectl("get", "pod", "web", "--subresource=dynamic", "-o", "yaml").stdout)
    assert as_yaml["spec"]["containers"][0]["dynamicVolumePolicy"] == POLICY

    patched = kubectl("patch", "pod", "web", "--subresource=dynamic", "--type=merge", "-p",
                      '{"metadata":{"labels":{"via":"dynamic"}}}')
    assert patched.stdout == "pod/web patched\n"
    assert kubectl.json("get", "pod", "web")["metadata"]["labels"] == {
        "app": "web", "via": "dynamic"}

    current = tmp_path / "dynamic.json"
    current.write_text(kubectl("get", "pod", "web", "--subresource=dynamic", "-o", "json").stdout)
    changed = edited_copy(current, current, ('"busybox:1.36"', '"busybox:1.37"'))
    assert kubectl("replace", "--subresource=dynamic", "-f", changed).stdout == \
        "pod/web replaced\n"
    pod = kubectl.json("get", "pod", "web")
    assert pod["spec"]["containers"][0]["image"] == "busybox:1.37"
    assert pod["spec"]["containers"][0]["dynamicVolumePolicy"] == POLICY


def test_raw_get_and_replace_on_dynamic(kubectl: Kubectl, tmp_path: Path) -> None:  # noqa: F811
    kubectl("create", "-f", WEB)
    path = f"/api/v1/namespaces/{kubectl.namespace}/pods/web/dynamic"
    pod: dict[str, Any] = json.loads(kubectl("get", "--raw", path).stdout)
    assert pod["kind"] == "Pod"
    assert pod["spec"]["containers"][0]["dynamicVolumePolicy"] == POLICY
    first_version = pod["metadata"]["resourceVersion"]

    # A JSON body, sent chunked without a Content-Type.
    pod["metadata"]["labels"]["body"] = "json"
    as_json = tmp_path / "pod.json"
    as_json.write_text(json.dumps(pod))
    replaced = json.loads(kubectl("replace", "--raw", path, "-f", str(as_json)).stdout)
    assert replaced["metadata"]["labels"] == {"app": "web", "body": "json"}
    assert int(replaced["metadata"]["resourceVersion"]) > int(first_version)

    # The same file again carries the old resourceVersion: 409 Conflict.
    stale = kubectl("replace", "--raw", path, "-f", str(as_json), check=False)
    assert stale.returncode == 1
    assert stale.stderr.strip() == f"Error from server (Conflict): {CONFLICT}"

    # A YAML body (sent as is) with the current resourceVersion and a new image.
    replaced["metadata"]["labels"]["body"] = "yaml"
    replaced["spec"]["containers"][0]["image"] = "busybox:1.37"
    as_yaml = tmp_path / "pod.yaml"
    as_yaml.write_text(yaml.safe_dump(replaced))
    from_yaml = json.loads(kubectl("replace", "--raw", path, "-f", str(as_yaml)).stdout)
    assert from_yaml["metadata"]["labels"] == {"app": "web", "body": "yaml"}
    pod = kubectl.json("get", "pod", "web")
    assert pod["spec"]["containers"][0]["image"] == "busybox:1.37"
    assert pod["spec"]["containers"][0]["dynamicVolumePolicy"] == POLICY
    assert pod["metadata"]["resourceVersion"] == from_yaml["metadata"]["resourceVersion"]
