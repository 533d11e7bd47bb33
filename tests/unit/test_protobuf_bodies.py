"""Protobuf request bodies as kubectl 1.32's typed commands send them (bytes captured from
`kubectl create namespace|configmap|secret|quota|serviceaccount`)."""

from __future__ import annotations

import pytest

from ephemera.apiserver.protobuf import ProtobufError, decode_object, is_protobuf

NAMESPACE = ("6b3873000a0f0a02763112094e616d657370616365121a0a120a027a7a12001a0022002a0032003800"
             "420012001a020a001a002200")
CONFIGMAP = ("6b3873000a0f0a0276311209436f6e6669674d617012290a140a02633112001a027a7a22002a003200"
             "3800420012060a016112016212090a05656d70747912001a002200")
SECRET = ("6b3873000a0c0a027631120653656372657412260a140a02733112001a027a7a22002a003200380042001"
          "2060a01781201791a064f70617175651a002200")
QUOTA = ("6b3873000a130a027631120d5265736f7572636551756f746112430a140a02713112001a027a7a22002a00"
         "32003800420012290a0a0a0363707512030a01310a0b0a04706f647312030a0132120e4e6f745465726d"
         "696e6174696e671a001a002200")
SERVICEACCOUNT = ("6b3873000a140a027631120e536572766963654163636f756e7412170a150a0373613112001a02"
                  "7a7a22002a003200380042001a002200")


def test_namespace() -> None:
    data = bytes.fromhex(NAMESPACE)
    assert is_protobuf(data)
    assert decode_object(data) == {"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": "zz"}, "spec": {}, "status": {}}


def test_configmap_with_an_empty_value() -> None:
    assert decode_object(bytes.fromhex(CONFIGMAP)) == {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c1", "namespace": "zz"}, "data": {"a": "b", "empty": ""}}


def test_secret_bytes_become_base64() -> None:
    assert decode_object(bytes.fromhex(SECRET)) == {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1", "namespace": "zz"},
        "data": {"x": "eQ=="}, "type": "Opaque"}


def test_resource_quota_quantities() -> None:
    quota = decode_object(bytes.fromhex(QUOTA))
    assert quota["spec"] == {"hard": {"cpu": "1", "pods": "2"}, "scopes": ["NotTerminating"]}


def test_service_account() -> None:
    assert decode_object(bytes.fromhex(SERVICEACCOUNT))["metadata"] == {"name": "sa1",
                                                                        "namespace": "zz"}


def test_unsupported_kind_and_garbage() -> None:
    pod_envelope = bytes.fromhex("6b3873000a090a0276311203506f641200")
    with pytest.raises(ProtobufError, match="kind 'Pod'"):
        decode_object(pod_envelope)
    with pytest.raises(ProtobufError):
        decode_object(b"k8s\x00\x0a\xff")
    assert not is_protobuf(b'{"kind": "Pod"}')
