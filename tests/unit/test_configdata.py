"""ConfigMap and Secret contents as upstream validates them (`ephemera.api.configdata`)."""

from __future__ import annotations

import base64
from typing import Any

from ephemera.api import field
from ephemera.api.configdata import (
    MAX_SECRET_SIZE,
    validate_config_map,
    validate_config_map_update,
    validate_secret,
    validate_secret_update,
)

KEY_RULE = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
            "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
            "'[-._a-zA-Z0-9]+')")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def texts(errs: list[field.FieldError]) -> list[str]:
    return [str(e) for e in errs]


def test_config_map_keys() -> None:
    cm = {"data": {"ok.key": "1", "bad key": "2"}, "binaryData": {"ok.key": _b64(b"x")}}
    assert texts(validate_config_map(cm)) == [
        f'data[bad key]: Invalid value: "bad key": {KEY_RULE}',
        'data[ok.key]: Invalid value: "ok.key": duplicate of key present in binaryData',
    ]


def test_config_map_of_more_than_a_mebibyte_is_too_long() -> None:
    at_limit = {"data": {"a": "a" * (MAX_SECRET_SIZE - 1)}, "binaryData": {"b": _b64(b"b")}}
    assert validate_config_map(at_limit) == []
    over = {"data": {"a": "a" * MAX_SECRET_SIZE}, "binaryData": {"b": _b64(b"b")}}
    assert texts(validate_config_map(over)) == [
        "[]: Too long: may not be more than 1048576 bytes"]
    # bytes, not characters: a two-byte character counts twice
    assert texts(validate_config_map({"data": {"a": "é" * (MAX_SECRET_SIZE // 2 + 1)}})) == [
        "[]: Too long: may not be more than 1048576 bytes"]


def test_an_immutable_config_map_keeps_its_data_and_stays_immutable() -> None:
    old: dict[str, Any] = {"immutable": True, "data": {"a": "1"}}
    assert validate_config_map_update({"immutable": True, "data": {"a": "1"}}, old) == []
    assert texts(validate_config_map_update({"data": {"a": "2"}, "binaryData": {"b": ""}},
                                            old)) == [
        "immutable: Forbidden: field is immutable when `immutable` is set",
        "data: Forbidden: field is immutable when `immutable` is set",
        "binaryData: Forbidden: field is immutable when `immutable` is set",
    ]
    # a mutable one may become immutable, and change meanwhile
    assert validate_config_map_update({"immutable": True, "data": {"a": "2"}},
                                      {"data": {"a": "1"}}) == []


def test_secret_size_counts_decoded_bytes() -> None:
    assert validate_secret({"type": "Opaque",
                            "data": {"a": _b64(b"a" * MAX_SECRET_SIZE)}}) == []
    assert texts(validate_secret({"type": "Opaque",
                                  "data": {"a": _b64(b"a" * MAX_SECRET_SIZE), "b": _b64(b"b")}}
                                 )) == ["data: Too long: may not be more than 1048576 bytes"]


def test_secret_types_require_their_keys() -> None:
    assert texts(validate_secret({"type": "kubernetes.io/tls", "data": {}})) == [
        "data[tls.crt]: Required value", "data[tls.key]: Required value"]
    assert texts(validate_secret({"type": "kubernetes.io/basic-auth"})) == [
        "data[username]: Required value", "data[password]: Required value"]
    assert validate_secret({"type": "kubernetes.io/basic-auth",
                            "data": {"username": ""}}) == []
    assert texts(validate_secret({"type": "kubernetes.io/ssh-auth",
                                  "data": {"ssh-privatekey": ""}})) == [
        "data[ssh-privatekey]: Required value"]
    assert texts(validate_secret({"type": "kubernetes.io/service-account-token",
                                  "metadata": {}})) == [
        "metadata.annotations[kubernetes.io/service-account.name]: Required value"]
    assert texts(validate_secret({"type": "kubernetes.io/dockerconfigjson", "data": {}})) == [
        "data[.dockerconfigjson]: Required value"]
    assert texts(validate_secret({"type": "kubernetes.io/dockerconfigjson",
                                  "data": {".dockerconfigjson": _b64(b"{nope")}})) == [
        'data[.dockerconfigjson]: Invalid value: "<secret contents redacted>": invalid '
        "character 'n' looking for beginning of object key string"]
    assert texts(validate_secret({"type": "kubernetes.io/dockercfg",
                                  "data": {".dockercfg": _b64(b"[]")}})) == [
        'data[.dockercfg]: Invalid value: "<secret contents redacted>": json: cannot '
        "unmarshal array into Go value of type map[string]interface {}"]
    assert validate_secret({"type": "example.com/custom"}) == []


def test_secret_type_and_immutable_data_are_frozen() -> None:
    old = {"type": "Opaque", "immutable": True, "data": {"a": _b64(b"1")}}
    new = {"type": "kubernetes.io/tls", "immutable": True,
           "data": {"tls.crt": "", "tls.key": ""}}
    assert texts(validate_secret_update(new, old)) == [
        'type: Invalid value: "kubernetes.io/tls": field is immutable',
        "data: Forbidden: field is immutable when `immutable` is set",
    ]
