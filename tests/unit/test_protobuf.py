"""ephemera.api.protobuf: Kubernetes protobuf request bodies decode to the JSON object the
same client would have sent as JSON.

The bodies below were captured from the real kubectl v1.32.4 (the dispatcher's built-in) as it
sent them to an ephemera apiserver; where kubectl can print the same object with
`--dry-run=client -o json`, that output is the expectation (KUBECTL_JSON), so the decoder is
checked against Go's own JSON encoder. The other cases encode messages by hand with the
small writer at the bottom of the captures.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import pytest

from ephemera.api import protobuf
from ephemera.api.protobuf import ProtobufError, decode_message, decode_object, is_protobuf

META = "k8s.io.apimachinery.pkg.apis.meta.v1."
CORE = "k8s.io.api.core.v1."

BODIES: dict[str, bytes] = {
    "configmap": base64.b64decode(
        "azhzAAoPCgJ2MRIJQ29uZmlnTWFwEj0KGgoFY21maXgSABoFY2FwbnMiACoAMgA4AEIAEgYKAWESAWISCQoF"
        "ZW1wdHkSABoMCgNiaW4SBQABAv7/GgAiAA=="
    ),
    "secret": base64.b64decode(
        "azhzAAoMCgJ2MRIGU2VjcmV0EkcKGwoGc2VjZml4EgAaBWNhcG5zIgAqADIAOABCABIMCgNiaW4SBQABAv7/"
        "EgkKBWVtcHR5EgASDQoEdXNlchIFYWRtaW4aABoAIgA="
    ),
    "namespace": base64.b64decode(
        "azhzAAoPCgJ2MRIJTmFtZXNwYWNlEh0KFQoFbnNmaXgSABoAIgAqADIAOABCABIAGgIKABoAIgA="
    ),
    "serviceaccount": base64.b64decode(
        "azhzAAoUCgJ2MRIOU2VydmljZUFjY291bnQSHAoaCgVzYWZpeBIAGgVjYXBucyIAKgAyADgAQgAaACIA"
    ),
    "quota": base64.b64decode(
        "azhzAAoTCgJ2MRINUmVzb3VyY2VRdW90YRJaChkKBHFmaXgSABoFY2FwbnMiACoAMgA4AEIAEjsKDgoDY3B1"
        "EgcKBTE1MDBtCg8KBm1lbW9yeRIFCgMyR2kKDAoEcG9kcxIECgIxMBIKQmVzdEVmZm9ydBoAGgAiAA=="
    ),
    "role": base64.b64decode(
        "azhzAAokChxyYmFjLmF1dGhvcml6YXRpb24uazhzLmlvL3YxEgRSb2xlEj8KGQoEcmZpeBIAGgVjYXBucyIA"
        "KgAyADgAQgASIgoDZ2V0CgRsaXN0EgAaBHBvZHMaCmNvbmZpZ21hcHMiAXgaACIA"
    ),
    "rolebinding": base64.b64decode(
        "azhzAAorChxyYmFjLmF1dGhvcml6YXRpb24uazhzLmlvL3YxEgtSb2xlQmluZGluZxK5AQoaCgVyYmZpeBIA"
        "GgVjYXBucyIAKgAyADgAQgASKAoEVXNlchIZcmJhYy5hdXRob3JpemF0aW9uLms4cy5pbxoDYm9iIgASKgoF"
        "R3JvdXASGXJiYWMuYXV0aG9yaXphdGlvbi5rOHMuaW8aBGRldnMiABIeCg5TZXJ2aWNlQWNjb3VudBIAGgNz"
        "YTEiBWNhcG5zGiUKGXJiYWMuYXV0aG9yaXphdGlvbi5rOHMuaW8SBFJvbGUaAnIxGgAiAA=="
    ),
    "clusterrole": base64.b64decode(
        "azhzAAorChxyYmFjLmF1dGhvcml6YXRpb24uazhzLmlvL3YxEgtDbHVzdGVyUm9sZRI3ChUKBWNyZml4EgAa"
        "ACIAKgAyADgAQgASDQoDZ2V0EgAaBHBvZHMSDwoDZ2V0KggvaGVhbHRoehoAIgA="
    ),
    "clusterrolebinding": base64.b64decode(
        "azhzAAoyChxyYmFjLmF1dGhvcml6YXRpb24uazhzLmlvL3YxEhJDbHVzdGVyUm9sZUJpbmRpbmcScQoWCgZj"
        "cmJmaXgSABoAIgAqADIAOABCABIoCgRVc2VyEhlyYmFjLmF1dGhvcml6YXRpb24uazhzLmlvGgNib2IiABot"
        "ChlyYmFjLmF1dGhvcml6YXRpb24uazhzLmlvEgtDbHVzdGVyUm9sZRoDY3IxGgAiAA=="
    ),
    "tokenrequest": base64.b64decode(
        "azhzAAooChhhdXRoZW50aWNhdGlvbi5rOHMuaW8vdjESDFRva2VuUmVxdWVzdBIlChAKABIAGgAiACoAMgA4"
        "AEIAEgsKAmExCgJhMiDYBBoECgASABoAIgA="
    ),
    "selfsubjectaccessreview": base64.b64decode(
        "azhzAAoyChdhdXRob3JpemF0aW9uLms4cy5pby92MRIXU2VsZlN1YmplY3RBY2Nlc3NSZXZpZXcSQAoQCgAS"
        "ABoAIgAqADIAOABCABIiCiAKBWNhcG5zEgZjcmVhdGUaACIAKgRwb2RzMgNsb2c6ABoICAASABoAIAAaACIA"
    ),
    "deleteoptions": base64.b64decode(
        "azhzAAoTCgJ2MRINRGVsZXRlT3B0aW9ucxICCAcaACIA"
    ),
    "pod-debug-node": base64.b64decode(
        "azhzAAoJCgJ2MRIDUG9kEswBCiYKFm5vZGUtZGVidWdnZXItbjEtczR6aDkSABoAIgAqADIAOABCABKPAQoS"
        "Cglob3N0LXJvb3QSBQoDCgEvEkUKCGRlYnVnZ2VyEgdidXN5Ym94KgBCAEoYCglob3N0LXJvb3QQABoFL2hv"
        "c3QiADIAagByAIABAIgBAJABAKIBBEZpbGUaBU5ldmVyMgBCAEoAUgJuMVgBYAFoAYIBAIoBAJoBALIBDgoA"
        "EgZFeGlzdHMaACIAwgEAGhAKABoAIgAqADIASgBaAHIAGgAiAA=="
    ),
    "pod-debug-copy": base64.b64decode(
        "azhzAAoJCgJ2MRIDUG9kEoYNCiYKCXJpY2gtY29weRIAGgVjYXBucyIAKgAyADgAQgBiBgoBYRIBYhLJDAok"
        "CgJjbRIemgEbCgUKA2NtMRINCgFhEgVhLnR4dBikAxiAAiAAChEKA3NlYxIKMggKBHNlYzEYAAodCgdzY3Jh"
        "dGNoEhISEAoGTWVtb3J5EgYKBDY0TWkKGwoEaG9zdBITChEKBC90bXASCURpcmVjdG9yeQpiCgRwcm9qElrS"
        "AVcKDyINCgF4EJAcGgV0b2tlbgpEEkIKHwoGbGFiZWxzEhUKAnYxEg9tZXRhZGF0YS5sYWJlbHMKHwoDY3B1"
        "GhgKBG1haW4SCmxpbWl0cy5jcHUaBAoCMW0KEQoFY2xhaW0SCFIGCgJjMRABErUFCgRtYWluEgxidXN5Ym94"
        "OjEuMzYaAnNoGgItYyITZWNobyBoaTsgc2xlZXAgMzYwMCoCL3cyEgoEaHR0cBAAGJA/IgNUQ1AqADIOCgAQ"
        "6SkYNSIDVURQKgA6BgoBQRIBMToJCgVFTVBUWRIAOh0KBE5PREUSABoTChEKABINc3BlYy5ub2RlTmFtZToj"
        "CgNNRU0SABoaEhgKABINbGltaXRzLm1lbW9yeRoFCgMxTWk6FwoDQ01LEgAaDhoMCgUKA2NtMRIBYRgAOhgK"
        "AlNLEgAaECIOCgYKBHNlYzESBHVzZXJCewoNCgNjcHUSBgoENTAwbQoaChFlcGhlbWVyYWwtc3RvcmFnZRIF"
        "CgMxR2kKEQoGbWVtb3J5EgcKBTEyOE1pEg0KA2NwdRIGCgQyNTBtEhoKEWVwaGVtZXJhbC1zdG9yYWdlEgUK"
        "AzFHaRIQCgZtZW1vcnkSBgoENjRNaUoPCgJjbRABGgMvY20iADIAShoKB3NjcmF0Y2gQABoCL3MiAXgqBE5v"
        "bmUyAFIzCiUSIwoIL2hlYWx0aHoSBwgAEJA/GgAaACIESFRUUCoGCgFYEgF5EAMYACAKKAAwADgAWhQKCAoG"
        "CgR0cnVlEAAYACAAKAAwBWIQCggKBgoEdHJ1ZRIEIgIIAmoUL2Rldi90ZXJtaW5hdGlvbi1sb2dyDElmTm90"
        "UHJlc2VudHouChAKCU5FVF9BRE1JThIDQUxMEAAgACgAMAE4AFoQCg5SdW50aW1lRGVmYXVsdIABAYgBAJAB"
        "AZoBEAoDQ01fEgkKBQoDY20xEAGaAQwKABoICgYKBHNlYzGiARVGYWxsYmFja1RvTG9nc09uRXJyb3KyARwK"
        "EBoOCgoIARAAGgRodHRwEgAQABgAIAAoADAAugESCgNjcHUSC05vdFJlcXVpcmVkEjUKCGRlYnVnZ2VyEgdi"
        "dXN5Ym94GgVzbGVlcBoBMSoAQgBqAHIAgAEAiAEAkAEAogEERmlsZRoGQWx3YXlzIAAo2AQyDENsdXN0ZXJG"
        "aXJzdDoLCgRkaXNrEgNzc2RCA3NhMUoDc2ExUgBYAGAAaAByKxDoByCgHyCIJyjQDzC4FzoaChJuZXQuY29y"
        "ZS5zb21heGNvbm4SBDEwMjR6CQoHcmVnY3JlZIIBAWiKAQNzdWKSAXwKOAoUChIKEAoEem9uZRICSW4aAWEa"
        "AWISIAgKEhwSGgoNbWV0YWRhdGEubmFtZRIFTm90SW4aAm4yGkAKPgodCgsKA2FwcBIEcmljaBIOCgR0aWVy"
        "EgZFeGlzdHMSBWNhcG5zGhZrdWJlcm5ldGVzLmlvL2hvc3RuYW1lmgERZGVmYXVsdC1zY2hlZHVsZXKiAVcK"
        "BHNpZGUSB2J1c3lib3gaBXNsZWVwGgQzNjAwKgBCAGoUL2Rldi90ZXJtaW5hdGlvbi1sb2dyBkFsd2F5c4AB"
        "AIgBAJABAKIBBEZpbGXCAQZBbHdheXOoAQCyARoKAWsSBUVxdWFsGgF2IglOb0V4ZWN1dGUoHrIBDgoAEgZF"
        "eGlzdHMaACIAugEcCggxMC4wLjAuMRIHYS5sb2NhbBIHYi5sb2NhbMIBAMgBANIBKQoHMS4xLjEuMRIJc3Zj"
        "LmxvY2FsGgoKBW5kb3RzEgEyGgcKBWVkbnMw2AEB4gETChFleGFtcGxlLmNvbS9yZWFkefABAPoBFFByZWVt"
        "cHRMb3dlclByaW9yaXR5igIoCAESBHpvbmUaDURvTm90U2NoZWR1bGUiDQoLCgNhcHASBHJpY2goApgCAKIC"
        "BwoFbGludXioAgGyAhIKEGV4YW1wbGUuY29tL2dhdGUaEAoAGgAiACoAMgBKAFoAcgAaACIA"
    ),
}

KUBECTL_JSON: dict[str, dict[str, Any]] = {
    "configmap": {'kind': 'ConfigMap',
 'apiVersion': 'v1',
 'metadata': {'name': 'cmfix', 'namespace': 'capns', 'creationTimestamp': None},
 'data': {'a': 'b', 'empty': ''},
 'binaryData': {'bin': 'AAEC/v8='}},
    "secret": {'kind': 'Secret',
 'apiVersion': 'v1',
 'metadata': {'name': 'secfix',
              'namespace': 'capns',
              'creationTimestamp': None},
 'data': {'bin': 'AAEC/v8=', 'empty': '', 'user': 'YWRtaW4='}},
    "namespace": {'kind': 'Namespace',
 'apiVersion': 'v1',
 'metadata': {'name': 'nsfix', 'creationTimestamp': None},
 'spec': {},
 'status': {}},
    "serviceaccount": {'kind': 'ServiceAccount',
 'apiVersion': 'v1',
 'metadata': {'name': 'safix', 'namespace': 'capns', 'creationTimestamp': None}},
    "quota": {'kind': 'ResourceQuota',
 'apiVersion': 'v1',
 'metadata': {'name': 'qfix', 'namespace': 'capns', 'creationTimestamp': None},
 'spec': {'hard': {'cpu': '1500m', 'memory': '2Gi', 'pods': '10'},
          'scopes': ['BestEffort']},
 'status': {}},
    "role": {'kind': 'Role',
 'apiVersion': 'rbac.authorization.k8s.io/v1',
 'metadata': {'name': 'rfix', 'namespace': 'capns', 'creationTimestamp': None},
 'rules': [{'verbs': ['get', 'list'],
            'apiGroups': [''],
            'resources': ['pods', 'configmaps'],
            'resourceNames': ['x']}]},
    "rolebinding": {'kind': 'RoleBinding',
 'apiVersion': 'rbac.authorization.k8s.io/v1',
 'metadata': {'name': 'rbfix', 'namespace': 'capns', 'creationTimestamp': None},
 'subjects': [{'kind': 'User',
               'apiGroup': 'rbac.authorization.k8s.io',
               'name': 'bob'},
              {'kind': 'Group',
               'apiGroup': 'rbac.authorization.k8s.io',
               'name': 'devs'},
              {'kind': 'ServiceAccount', 'name': 'sa1', 'namespace': 'capns'}],
 'roleRef': {'apiGroup': 'rbac.authorization.k8s.io',
             'kind': 'Role',
             'name': 'r1'}},
    "clusterrole": {'kind': 'ClusterRole',
 'apiVersion': 'rbac.authorization.k8s.io/v1',
 'metadata': {'name': 'crfix', 'creationTimestamp': None},
 'rules': [{'verbs': ['get'], 'apiGroups': [''], 'resources': ['pods']},
           {'verbs': ['get'], 'nonResourceURLs': ['/healthz']}]},
    "clusterrolebinding": {'kind': 'ClusterRoleBinding',
 'apiVersion': 'rbac.authorization.k8s.io/v1',
 'metadata': {'name': 'crbfix', 'creationTimestamp': None},
 'subjects': [{'kind': 'User',
               'apiGroup': 'rbac.authorization.k8s.io',
               'name': 'bob'}],
 'roleRef': {'apiGroup': 'rbac.authorization.k8s.io',
             'kind': 'ClusterRole',
             'name': 'cr1'}},
}


# --- a tiny protobuf writer for hand-made messages ------------------------------------------


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def vi(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def ld(number: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def envelope(api_version: str, kind: str, raw: bytes, encoding: str = "") -> bytes:
    type_meta = ld(1, api_version) + ld(2, kind)
    return b"k8s\x00" + ld(1, type_meta) + ld(2, raw) + ld(3, encoding) + ld(4, "")


# --- real kubectl bodies ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(KUBECTL_JSON))
def test_kubectl_create_bodies_decode_to_kubectl_json(name: str) -> None:
    assert is_protobuf(BODIES[name])
    decoded = decode_object(BODIES[name])
    assert decoded == KUBECTL_JSON[name]
    assert list(decoded) == list(KUBECTL_JSON[name])  # Go's field order too


def test_secret_data_is_base64_of_the_bytes_sent() -> None:
    data = decode_object(BODIES["secret"])["data"]
    assert base64.b64decode(data["bin"]) == b"\x00\x01\x02\xfe\xff"
    assert base64.b64decode(data["user"]) == b"admin"
    assert data["empty"] == ""


def test_token_request_self_subject_access_review_and_delete_options() -> None:
    assert decode_object(BODIES["tokenrequest"]) == {
        "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": {"audiences": ["a1", "a2"], "expirationSeconds": 600, "boundObjectRef": None},
        "status": {"token": "", "expirationTimestamp": None}}
    assert decode_object(BODIES["selfsubjectaccessreview"]) == {
        "kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": {"resourceAttributes": {"namespace": "capns", "verb": "create",
                                        "resource": "pods", "subresource": "log"}},
        "status": {"allowed": False}}
    # kubectl drain's pod deletion (DeleteOptions is sent as v1, a meta/v1 kind)
    assert decode_object(BODIES["deleteoptions"]) == {
        "kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 7}


def test_node_debugger_pod() -> None:
    pod = decode_object(BODIES["pod-debug-node"])
    assert pod["spec"] == {
        "volumes": [{"name": "host-root", "hostPath": {"path": "/"}}],
        "containers": [{"name": "debugger", "image": "busybox", "resources": {},
                        "volumeMounts": [{"name": "host-root", "mountPath": "/host"}],
                        "terminationMessagePolicy": "File"}],
        "restartPolicy": "Never", "nodeName": "n1", "hostNetwork": True, "hostPID": True,
        "hostIPC": True, "tolerations": [{"operator": "Exists"}]}
    assert pod["status"] == {}
    assert pod["metadata"]["name"].startswith("node-debugger-n1-")


def test_pod_copied_by_kubectl_debug_keeps_the_whole_pod_spec_tree() -> None:
    """`kubectl debug rich --copy-to=rich-copy` read a pod created as JSON and sent it back as
    protobuf; this is that pod, as ephemera served it, less what debug changes."""
    pod = decode_object(BODIES["pod-debug-copy"])
    spec = pod["spec"]
    assert pod["metadata"] == {"name": "rich-copy", "namespace": "capns",
                               "creationTimestamp": None, "annotations": {"a": "b"}}
    volumes = {v["name"]: v for v in spec["volumes"]}
    # VolumeSource is an embedded struct: its one field is inlined into the volume
    assert volumes["cm"] == {"name": "cm", "configMap": {
        "name": "cm1", "items": [{"key": "a", "path": "a.txt", "mode": 420}],
        "defaultMode": 256, "optional": False}}
    assert volumes["sec"] == {"name": "sec", "secret": {"secretName": "sec1", "defaultMode": 0}}
    assert volumes["scratch"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Mi"}
    assert volumes["proj"]["projected"]["sources"][1]["downwardAPI"]["items"][1] == {
        "path": "cpu", "resourceFieldRef": {"containerName": "main", "resource": "limits.cpu",
                                             "divisor": "1m"}}
    main, debugger = spec["containers"]
    assert debugger == {"name": "debugger", "image": "busybox", "command": ["sleep", "1"],
                        "resources": {}, "terminationMessagePolicy": "File"}
    assert main["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                             {"hostPort": 5353, "containerPort": 53, "protocol": "UDP"}]
    # EnvVar.value is `omitempty` and not a pointer: Go leaves the empty value out
    assert {"name": "EMPTY"} in main["env"]
    assert {"name": "CMK", "valueFrom": {"configMapKeyRef": {
        "name": "cm1", "key": "a", "optional": False}}} in main["env"]
    assert main["envFrom"] == [{"prefix": "CM_", "configMapRef": {"name": "cm1",
                                                                  "optional": True}},
                               {"secretRef": {"name": "sec1"}}]
    assert main["resources"]["limits"] == {"cpu": "500m", "ephemeral-storage": "1Gi",
                                           "memory": "128Mi"}
    # IntOrString: a number and a name
    assert main["livenessProbe"]["httpGet"]["port"] == 8080
    assert main["startupProbe"] == {"tcpSocket": {"port": "http"}}
    # pointers set to zero stay; ProbeHandler is inlined into the probe
    assert main["livenessProbe"]["terminationGracePeriodSeconds"] == 0
    assert main["readinessProbe"] == {"exec": {"command": ["true"]}, "failureThreshold": 5}
    assert main["lifecycle"] == {"postStart": {"exec": {"command": ["true"]}},
                                 "preStop": {"sleep": {"seconds": 2}}}
    assert main["securityContext"] == {
        "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}, "privileged": False,
        "runAsUser": 0, "runAsNonRoot": False, "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"}}
    assert main["stdin"] is True and main["tty"] is True
    assert "dynamicVolumePolicy" not in main  # no field number upstream: never in protobuf
    assert spec["initContainers"][0]["restartPolicy"] == "Always"
    assert spec["terminationGracePeriodSeconds"] == 0
    assert spec["priority"] == 0
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["hostUsers"] is True
    assert spec["setHostnameAsFQDN"] is False
    # plain bool and string fields with omitempty: false and "" are left out
    assert "hostNetwork" not in spec and "priorityClassName" not in spec
    assert spec["securityContext"]["supplementalGroups"] == [4000, 5000]
    assert spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] \
        == [{"labelSelector": {"matchLabels": {"app": "rich"},
                               "matchExpressions": [{"key": "tier", "operator": "Exists"}]},
             "namespaces": ["capns"], "topologyKey": "kubernetes.io/hostname"}]
    assert spec["tolerations"][0] == {"key": "k", "operator": "Equal", "value": "v",
                                      "effect": "NoExecute", "tolerationSeconds": 30}
    assert spec["dnsConfig"]["options"] == [{"name": "ndots", "value": "2"},
                                            {"name": "edns0"}]
    assert spec["topologySpreadConstraints"][0]["minDomains"] == 2
    assert spec["schedulingGates"] == [{"name": "example.com/gate"}]
    assert spec["os"] == {"name": "linux"}
    assert pod["status"] == {}
    json.dumps(pod)  # plain JSON all the way down


# --- hand-made messages: the special types ----------------------------------------------------


def test_time_micro_time_and_zero_time() -> None:
    lease_spec = (ld(1, "holder") + vi(2, 15)
                  + ld(3, vi(1, 1_700_000_000) + vi(2, 123_456_789))
                  + ld(4, b"") + vi(5, 0))
    body = envelope("coordination.k8s.io/v1", "Lease",
                    ld(1, ld(1, "l1") + ld(8, vi(1, 1_700_000_000))) + ld(2, lease_spec))
    assert decode_object(body) == {
        "kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
        "metadata": {"name": "l1", "creationTimestamp": "2023-11-14T22:13:20Z"},
        "spec": {"holderIdentity": "holder", "leaseDurationSeconds": 15,
                 "acquireTime": "2023-11-14T22:13:20.123456Z", "renewTime": None,
                 "leaseTransitions": 0}}
    assert decode_message(META + "Time", b"") is None
    assert decode_message(META + "Time", vi(1, -62135596800)) is None  # Go's zero time
    assert decode_message(META + "Time", vi(1, 0)) == "1970-01-01T00:00:00Z"
    assert decode_message(META + "Time", vi(1, -1)) == "1969-12-31T23:59:59Z"


@pytest.mark.parametrize(("nanoseconds", "text"), [
    (0, "0s"), (1, "1ns"), (1500, "1.5µs"), (2_000_000, "2ms"), (1_500_000_000, "1.5s"),
    (90 * 10**9, "1m30s"), (3600 * 10**9, "1h0m0s"), (-(5 * 10**9 + 1), "-5.000000001s"),
])
def test_duration_as_go_prints_it(nanoseconds: int, text: str) -> None:
    assert decode_message(META + "Duration", vi(1, nanoseconds)) == text


def test_int_or_string_quantity_fields_v1_and_raw_extension() -> None:
    ios = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"
    assert decode_message(ios, vi(1, 0) + vi(2, 80)) == 80
    assert decode_message(ios, vi(1, 1) + ld(3, "25%")) == "25%"
    assert decode_message(ios, vi(2, -1)) == -1
    assert decode_message("k8s.io.apimachinery.pkg.api.resource.Quantity",
                          ld(1, "100Mi")) == "100Mi"
    entry = (ld(1, "kubectl") + ld(2, "Update") + ld(3, "v1") + ld(6, "FieldsV1")
             + ld(7, ld(1, b'{"f:data":{".":{},"f:a":{}}}')))
    meta = decode_message(META + "ObjectMeta", ld(1, "x") + ld(17, entry))
    assert meta["managedFields"] == [{"manager": "kubectl", "operation": "Update",
                                      "apiVersion": "v1", "fieldsType": "FieldsV1",
                                      "fieldsV1": {"f:data": {".": {}, "f:a": {}}}}]
    # a RawExtension carries JSON, or a whole nested protobuf object
    cm = envelope("v1", "ConfigMap", ld(1, ld(1, "inner")) + ld(2, ld(1, "k") + ld(2, "v")))
    for raw, expected in [
        (b'{"kind":"Pod"}', {"kind": "Pod"}),
        (cm, {"kind": "ConfigMap", "apiVersion": "v1",
              "metadata": {"name": "inner", "creationTimestamp": None}, "data": {"k": "v"}}),
    ]:
        event = decode_object(envelope("v1", "WatchEvent", ld(1, "ADDED") + ld(2, ld(1, raw))))
        assert event == {"kind": "WatchEvent", "apiVersion": "v1", "type": "ADDED",
                         "object": expected}


def test_extra_values_maps_and_packed_repeated_integers() -> None:
    spec = (ld(3, "alice") + ld(4, "g1") + ld(4, "g2")
            + ld(5, ld(1, "scopes") + ld(2, ld(1, "a") + ld(1, "b")))
            + ld(5, ld(1, "none") + ld(2, b"")) + ld(6, "uid-1"))
    review = envelope("authorization.k8s.io/v1", "SubjectAccessReview", ld(2, spec))
    assert decode_object(review)["spec"] == {
        "user": "alice", "groups": ["g1", "g2"], "extra": {"scopes": ["a", "b"], "none": None},
        "uid": "uid-1"}
    packed = ld(4, varint(1000) + varint(2000))
    assert decode_message(CORE + "PodSecurityContext", packed)["supplementalGroups"] == [
        1000, 2000]
    # negative int32 values are sign-extended to 10 bytes on the wire
    assert decode_message(CORE + "PodSecurityContext", vi(2, -5))["runAsUser"] == -5


def test_double_fields_and_later_occurrences() -> None:
    # the last value of a scalar wins; a message seen twice is merged
    meta = decode_message(META + "ObjectMeta", ld(1, "a") + ld(1, "b") + ld(11, ld(1, "x")
                                                                          + ld(2, "1")))
    assert meta["name"] == "b" and meta["labels"] == {"x": "1"}
    container = decode_message(CORE + "Container",
                               ld(15, vi(4, 7)) + ld(15, vi(5, 1)) + ld(1, "c"))
    assert container["securityContext"] == {"runAsUser": 7, "runAsNonRoot": True}
    weight = "k8s.io.api.core.v1.WeightedPodAffinityTerm"
    assert decode_message(weight, vi(1, 3))["weight"] == 3
    # an unknown field is skipped, whatever its wire type
    unknown = vi(99, 1) + varint(98 << 3 | 1) + struct.pack("<d", 1.5) + ld(97, "x")
    assert decode_message(CORE + "LocalObjectReference", unknown + ld(1, "n")) == {"name": "n"}


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "message"), [
    (b"{}", "no k8s\\0 prefix"),
    (envelope("v1", "Frobnicator", b""), 'no kind "Frobnicator" is registered for version "v1"'),
    (envelope("v1", "ConfigMap", b"", encoding="gzip"), "unsupported content encoding"),
    (b"k8s\x00" + ld(2, b""), "Kind' is missing"),
    (b"k8s\x00\x0a\x05ab", "unexpected EOF"),
    (envelope("v1", "ConfigMap", vi(1, 3)), "wire type 0, want 2"),
    (envelope("v1", "ConfigMap", b"\x0f"), "unsupported wire type 7"),
])
def test_bad_bodies_raise_protobuf_error(body: bytes, message: str) -> None:
    with pytest.raises(ProtobufError, match=None) as err:
        decode_object(body)
    assert message in str(err.value)


def test_nesting_is_bounded() -> None:
    body = envelope("v1", "WatchEvent", ld(1, "ADDED"))
    for _ in range(150):
        body = envelope("v1", "WatchEvent", ld(1, "ADDED") + ld(2, ld(1, body)))
    with pytest.raises(ProtobufError, match="nested too deeply"):
        decode_object(body)


def test_is_protobuf_by_prefix_or_content_type() -> None:
    assert is_protobuf(b"k8s\x00anything")
    assert is_protobuf(b"", "application/vnd.kubernetes.protobuf; charset=utf-8")
    assert not is_protobuf(b'{"kind":"Pod"}', "application/json")
    assert not is_protobuf(b"k8s", None)


# --- the table ------------------------------------------------------------------------------


def test_table_covers_the_kinds_clients_send() -> None:
    for key in ["v1/ConfigMap", "v1/Secret", "v1/Namespace", "v1/ServiceAccount",
                "v1/ResourceQuota", "v1/LimitRange", "v1/Event", "v1/Binding", "v1/Node",
                "v1/Pod", "authorization.k8s.io/v1/SelfSubjectAccessReview",
                "authorization.k8s.io/v1/SubjectAccessReview",
                "authentication.k8s.io/v1/TokenRequest", "rbac.authorization.k8s.io/v1/Role",
                "rbac.authorization.k8s.io/v1/ClusterRole",
                "rbac.authorization.k8s.io/v1/RoleBinding",
                "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
                "coordination.k8s.io/v1/Lease", "policy/v1/Eviction"]:
        api_version, _, kind = key.rpartition("/")
        assert protobuf.message_for(api_version, kind), key
    assert protobuf.message_for("rbac.authorization.k8s.io/v1", "DeleteOptions") == (
        META + "DeleteOptions")
    messages = protobuf.table().messages
    for message in messages.values():
        for field in message.fields:
            assert field.kind != "message" or field.message in messages, field


def test_table_field_numbers_are_upstreams() -> None:
    def number(message: str, json_name: str) -> int:
        fields = protobuf.table().messages[message].fields
        return next(f.number for f in fields if f.json == json_name)

    assert number(META + "ObjectMeta", "managedFields") == 17
    assert number(CORE + "PodSpec", "resources") == 40
    assert number(CORE + "PodSpec", "ephemeralContainers") == 34
    assert number(CORE + "Container", "restartPolicy") == 24
    assert number("k8s.io.api.coordination.v1.LeaseSpec", "preferredHolder") == 7
    assert number("k8s.io.api.authorization.v1.ResourceAttributes", "labelSelector") == 9
    secret_data = protobuf.table().messages[CORE + "Secret"].by_number[2]
    assert (secret_data.json, secret_data.map_key, secret_data.kind) == ("data", "string",
                                                                         "bytes")
    # the KEP fields have no upstream numbers, so no protobuf body can carry them
    assert "dynamicVolumePolicy" not in {f.json for f in
                                         protobuf.table().messages[CORE + "Container"].fields}
    assert "volumeStatuses" not in {f.json for f in
                                    protobuf.table().messages[CORE + "PodStatus"].fields}


def test_ingress_as_kubectl_create_ingress_sends_it() -> None:
    """networking.k8s.io/v1 is in the table (kubectl create ingress sends protobuf): the body
    decodes to what `kubectl create ingress simple --rule=foo.com/bar=svc1:8080
    --dry-run=client -o json` prints."""
    port = ld(2, vi(2, 8080))  # ServiceBackendPort.number
    backend = ld(4, ld(1, "svc1") + port)  # IngressBackend.service
    http_path = ld(1, "/bar") + ld(2, backend) + ld(3, "Exact")
    rule = ld(1, "foo.com") + ld(2, ld(1, ld(1, http_path)))  # host, IngressRuleValue.http
    metadata = ld(1, "simple") + ld(8, b"")  # name, creationTimestamp (zero)
    body = envelope("networking.k8s.io/v1", "Ingress",
                    ld(1, metadata) + ld(2, ld(3, rule)) + ld(3, ld(1, b"")))
    decoded = decode_object(body)
    assert decoded == {
        "kind": "Ingress", "apiVersion": "networking.k8s.io/v1",
        "metadata": {"name": "simple", "creationTimestamp": None},
        "spec": {"rules": [{"host": "foo.com", "http": {"paths": [{
            "path": "/bar", "pathType": "Exact",
            "backend": {"service": {"name": "svc1", "port": {"number": 8080}}}}]}}]},
        "status": {"loadBalancer": {}}}
    assert protobuf.message_for("networking.k8s.io/v1", "NetworkPolicy")
    assert protobuf.message_for("storage.k8s.io/v1", "CSIStorageCapacity")
