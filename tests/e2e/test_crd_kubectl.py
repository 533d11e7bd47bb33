"""CustomResourceDefinitions through their life with the real kubectl on a real
`ephemera up` (one cluster for the module): apply of a CRD and `kubectl wait` for
Established, `explain`, `apply`, `get` with the printer columns, by short name and by
category, `edit`, validation and CEL errors as kubectl prints them, the status and scale
subresources, another served version, and deletion of the CRD with its objects; then a kopf
operator (`kopf_operator/`, run with `kopf run`) reacting to creates, updates and deletes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cluster import (  # noqa: F401  (fixtures)
    Kubectl,
    as_identity,
    kubectl,
    shared_cluster,
    wait,
)

pytestmark = pytest.mark.e2e

MANIFESTS = Path(__file__).parent / "manifests"
CRD = str(MANIFESTS / "crontab-crd.yaml")
CRONTAB = str(MANIFESTS / "crontab.yaml")
CRD_NAME = "crontabs.stable.example.com"


@pytest.fixture
def crontabs(kubectl: Kubectl) -> Kubectl:  # noqa: F811
    """The module's CRD applied (idempotent) and Established."""
    kubectl("apply", "-f", CRD)
    kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=30s")
    return kubectl


def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\nset -e\n" + body)
    path.chmod(0o755)
    return str(path)


def test_crd_apply_explain_get_with_columns_short_names_and_categories(
        crontabs: Kubectl) -> None:
    k = crontabs
    crd = k.json("get", "crd", CRD_NAME)
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert "crontabs.stable.example.com" in k("get", "crds").stdout

    explained = k("explain", "crontab.spec").stdout
    assert "KIND:       CronTab" in explained
    assert "cronSpec\t<string> -required-" in explained
    assert "The schedule, in cron format." in explained

    assert k("apply", "-f", CRONTAB).stdout == "crontab.stable.example.com/nightly created\n"
    assert k("apply", "-f", CRONTAB).stdout == \
        "crontab.stable.example.com/nightly unchanged\n"
    table = k("get", "crontabs").stdout.splitlines()
    assert table[0].split() == ["NAME", "SPEC", "REPLICAS", "AGE"]
    assert table[1].split()[:7] == ["nightly", "*", "*", "*", "*", "*/5", "1"]
    assert k("get", "ct", "nightly", "-o", "name").stdout == \
        "crontab.stable.example.com/nightly\n"
    assert "crontab.stable.example.com/nightly" in k("get", "all", "-o", "name").stdout
    got = k.json("get", "crontab", "nightly")
    assert got["spec"]["replicas"] == 1 and got["spec"]["maxReplicas"] == 10
    # the other served version, with apiVersion rewritten
    beta = k.json("get", "crontabs.v1beta1.stable.example.com", "nightly")
    assert beta["apiVersion"] == "stable.example.com/v1beta1"
    assert beta["spec"]["cronSpec"] == "* * * * */5"


def test_crd_edit_server_side_apply_and_field_selector(crontabs: Kubectl,
                                                       tmp_path: Path) -> None:
    k = crontabs
    k("apply", "-f", CRONTAB)
    editor = script(tmp_path / "editor.sh",
                    "sed -i 's/busybox:1.36/busybox:1.37/' \"$1\"\n")
    result = k("edit", "crontab", "nightly", env={"EDITOR": editor, "KUBE_EDITOR": editor})
    assert result.stdout == "crontab.stable.example.com/nightly edited\n"
    assert k.json("get", "ct", "nightly")["spec"]["image"] == "busybox:1.37"
    applied = tmp_path / "ssa.yaml"
    applied.write_text(Path(CRONTAB).read_text().replace(
        '  - name: A\n    value: "1"\n', '  - name: B\n    value: "2"\n'))
    out = k("apply", "--server-side", "--field-manager=tester", "--force-conflicts", "-f",
            str(applied))
    assert out.stdout == "crontab.stable.example.com/nightly serverside-applied\n"
    env = k.json("get", "ct", "nightly")["spec"]["env"]
    # a list-type map: the new manager's entry is merged with the one the other owns
    assert {e["name"]: e["value"] for e in env} == {"A": "1", "B": "2"}
    names = k("get", "crontabs", "--field-selector", "metadata.name=nightly",
              "-o", "name").stdout
    assert names == "crontab.stable.example.com/nightly\n"


def test_crd_validation_and_cel_errors_as_kubectl_prints_them(crontabs: Kubectl,
                                                              tmp_path: Path) -> None:
    k = crontabs
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(CRONTAB).read_text().replace("nightly", "bad").replace(
        'cronSpec: "* * * * */5"', "cronSpec: 7\n  replicas: -1"))
    result = k("apply", "-f", str(bad), check=False)
    assert result.returncode == 1
    assert 'The CronTab "bad" is invalid: ' in result.stderr
    assert ('spec.cronSpec: Invalid value: "integer": spec.cronSpec in body must be of type '
            'string: "integer"') in result.stderr
    assert ("spec.replicas: Invalid value: -1: spec.replicas in body should be greater than "
            "or equal to 0") in result.stderr
    cel = tmp_path / "cel.yaml"
    cel.write_text(Path(CRONTAB).read_text().replace("nightly", "cel").replace(
        "image: busybox:1.36", "image: busybox:1.36\n  replicas: 20\n  maxReplicas: 3"))
    result = k("apply", "-f", str(cel), check=False)
    assert result.returncode == 1
    assert result.stderr.strip().endswith(
        'The CronTab "cel" is invalid: spec: Invalid value: "object": replicas must not '
        "exceed maxReplicas")


def test_crd_status_and_scale_subresources(crontabs: Kubectl) -> None:
    k = crontabs
    k("apply", "-f", CRONTAB)
    status = json.dumps({"status": {"replicas": 1, "phase": "Running",
                                    "selector": "app=nightly"}})
    k("patch", "crontab", "nightly", "--subresource=status", "--type=merge", "-p", status)
    got = k.json("get", "crontab", "nightly")
    assert got["status"]["phase"] == "Running"
    assert k("scale", "crontab", "nightly", "--replicas=3").stdout == \
        "crontab.stable.example.com/nightly scaled\n"
    got = k.json("get", "crontab", "nightly")
    assert got["spec"]["replicas"] == 3
    scale = json.loads(k("get", "--raw", f"/apis/stable.example.com/v1/namespaces/"
                                         f"{k.namespace}/crontabs/nightly/scale").stdout)
    assert scale["spec"] == {"replicas": 3}
    assert scale["status"] == {"replicas": 1, "selector": "app=nightly"}
    # a spec write keeps the status the status subresource wrote
    k("patch", "crontab", "nightly", "--type=merge", "-p",
      '{"spec":{"image":"busybox:1.38"},"status":{"phase":"Lost"}}')
    assert k.json("get", "crontab", "nightly")["status"]["phase"] == "Running"


def test_deleting_a_crd_deletes_its_objects(kubectl: Kubectl,  # noqa: F811
                                            tmp_path: Path) -> None:
    k = kubectl
    other = tmp_path / "widgets.yaml"
    other.write_text(Path(CRD).read_text()
                     .replace("crontabs", "widgets").replace("crontab", "widget")
                     .replace("CronTab", "Widget").replace("shortNames: [ct]",
                                                           "shortNames: [wd]"))
    k("apply", "-f", str(other))
    k("wait", "--for=condition=Established", "crd/widgets.stable.example.com",
      "--timeout=30s")
    widget = tmp_path / "widget.yaml"
    widget.write_text(Path(CRONTAB).read_text().replace("CronTab", "Widget"))
    k("apply", "-f", str(widget))
    assert k("get", "widgets", "-o", "name").stdout == "widget.stable.example.com/nightly\n"
    assert k("delete", "crd", "widgets.stable.example.com", "--timeout=30s").stdout == \
        'customresourcedefinition.apiextensions.k8s.io "widgets.stable.example.com" deleted\n'
    result = k("get", "widgets", check=False)
    assert result.returncode == 1
    # kubectl's discovery cache may still name the resource: then the list is a 404
    assert ('the server doesn\'t have a resource type "widgets"' in result.stderr
            or 'Unable to list "stable.example.com/v1, Resource=widgets": the server could '
               "not find the requested resource" in result.stderr), result.stderr
    assert "widgets" not in k("api-resources", "--api-group=stable.example.com").stdout


def test_rbac_applies_to_custom_resources(crontabs: Kubectl, tmp_path: Path) -> None:
    k = crontabs
    k("apply", "-f", CRONTAB)
    alice = as_identity(k, "alice", tmp_path)
    denied = alice("get", "crontabs", check=False)
    assert denied.returncode == 1
    assert denied.stderr.strip() == (
        'Error from server (Forbidden): crontabs.stable.example.com is forbidden: User "alice" '
        'cannot list resource "crontabs" in API group "stable.example.com" in the namespace '
        f'"{k.namespace}"')
    k("create", "role", "crontab-reader", "--verb=get,list", "--resource=crontabs")
    k("create", "rolebinding", "alice-reads", "--role=crontab-reader", "--user=alice")
    assert alice("get", "crontabs", "-o", "name").stdout == \
        "crontab.stable.example.com/nightly\n"
    denied = alice("delete", "crontab", "nightly", check=False)
    assert 'cannot delete resource "crontabs" in API group "stable.example.com"' \
        in denied.stderr


# --- a kopf operator --------------------------------------------------------------------------

OPERATOR = Path(__file__).parent / "kopf_operator" / "crontab_operator.py"


def _events(k: Kubectl, name: str) -> dict[str, str]:
    listed = k.json("get", "events", "--field-selector", f"involvedObject.name={name}")
    return {e["reason"]: e["message"] for e in listed["items"]}


def test_kopf_operator_reacts_to_create_update_and_delete(crontabs: Kubectl,
                                                          tmp_path: Path) -> None:
    k = crontabs
    deleted_log = tmp_path / "deleted.log"
    deleted_log.touch()
    argv = [sys.executable, "-m", "kopf", "run", "--standalone", "--namespace",
            str(k.namespace), str(OPERATOR)]
    env = {**os.environ, "KUBECONFIG": str(k.cluster.kubeconfig), "HOME": str(k.home),
           "CRONTAB_DELETED_LOG": str(deleted_log)}
    output = tmp_path / "kopf.out"
    with open(output, "wb") as out:
        operator = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
    try:
        k("apply", "-f", CRONTAB)
        got = wait(lambda: (lambda o: o if o.get("status", {}).get("phase") == "Scheduled"
                            else None)(k.json("get", "ct", "nightly")),
                   "kopf handled the create", timeout=30)
        assert got["status"]["created"] == {"image": "busybox:1.36"}
        assert "kopf.zalando.org/KopfFinalizerMarker" in got["metadata"]["finalizers"]
        assert wait(lambda: _events(k, "nightly").get("Scheduled"), "the create event",
                    timeout=30) == "nightly runs busybox:1.36"

        k("patch", "crontab", "nightly", "--type=merge", "-p",
          '{"spec":{"image":"busybox:1.37"}}')
        got = wait(lambda: (lambda o: o if o.get("status", {}).get("phase") == "Updated"
                            else None)(k.json("get", "ct", "nightly")),
                   "kopf handled the update", timeout=30)
        assert got["status"]["image"] == "busybox:1.37"
        assert wait(lambda: _events(k, "nightly").get("ImageChanged"), "the update event",
                    timeout=30) == "busybox:1.36 -> busybox:1.37"

        k("delete", "crontab", "nightly", "--timeout=30s")
        assert deleted_log.read_text() == f"{k.namespace}/nightly\n"
        assert k("get", "ct", "nightly", check=False).returncode == 1
    finally:
        operator.terminate()
        try:
            operator.wait(15)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait()
    log = output.read_text(errors="replace")
    assert "Traceback" not in log, log
