"""The rules of ConfigMaps' and Secrets' contents (upstream's `ValidateConfigMap`,
`ValidateConfigMapUpdate`, `ValidateSecret`, `ValidateSecretUpdate` in
pkg/apis/core/validation): keys, the 1 MiB size limit, the keys a Secret's type requires,
and what `immutable: true` freezes. Pure functions over the v1 JSON (Secret and binaryData
values base64, as stored); metadata is the caller's (`ephemera.api.validation`)."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from ephemera.api import field
from ephemera.api.field import FieldError, Path
from ephemera.api.fieldvalidation import json_kind
from ephemera.api.patch import go_json_error
from ephemera.api.validation import config_map_key_errors, validate_immutable_field

__all__ = [
    "MAX_SECRET_SIZE",
    "validate_config_map",
    "validate_config_map_update",
    "validate_secret",
    "validate_secret_update",
]

# core.MaxSecretSize: the most bytes of data a ConfigMap or a Secret may hold.
MAX_SECRET_SIZE = 1024 * 1024

IMMUTABLE_SET = "field is immutable when `immutable` is set"

# Secret types and the data keys they require (core.SecretType*, core.*Key).
SERVICE_ACCOUNT_TOKEN = "kubernetes.io/service-account-token"
SERVICE_ACCOUNT_NAME_KEY = "kubernetes.io/service-account.name"
DOCKERCFG = "kubernetes.io/dockercfg"
DOCKERCFG_KEY = ".dockercfg"
DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
DOCKER_CONFIG_JSON_KEY = ".dockerconfigjson"
BASIC_AUTH = "kubernetes.io/basic-auth"
SSH_AUTH = "kubernetes.io/ssh-auth"
SSH_PRIVATE_KEY = "ssh-privatekey"
TLS = "kubernetes.io/tls"
TLS_CERT_KEY = "tls.crt"
TLS_PRIVATE_KEY_KEY = "tls.key"

REDACTED = "<secret contents redacted>"


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _decoded(value: Any) -> bytes:
    """A base64 value as its bytes (what Go's []byte holds; a value that is not base64 was
    refused when the body was decoded, and counts as its text here)."""
    text = str(value or "")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return text.encode()


def _key_errors(path: Path, data: Mapping[str, Any]) -> list[FieldError]:
    return [field.invalid(path.key(key), key, message)
            for key in sorted(data) for message in config_map_key_errors(key)]


def validate_config_map(cm: Mapping[str, Any]) -> list[FieldError]:
    """`ValidateConfigMap` beyond metadata: valid keys, none in both `data` and
    `binaryData`, at most `MAX_SECRET_SIZE` bytes in all (the error on the whole object,
    Go's empty path `[]`)."""
    data, binary = _map(cm.get("data")), _map(cm.get("binaryData"))
    errs = _key_errors(Path("data"), data)
    errs += [field.invalid(Path("data").key(key), key, "duplicate of key present in binaryData")
             for key in sorted(data) if key in binary]
    errs += _key_errors(Path("binaryData"), binary)
    size = sum(len(str(v or "").encode()) for v in data.values())
    size += sum(len(_decoded(v)) for v in binary.values())
    if size > MAX_SECRET_SIZE:
        errs.append(field.too_long("[]", MAX_SECRET_SIZE))
    return errs


def _immutable_errors(new: Mapping[str, Any], old: Mapping[str, Any],
                      frozen: tuple[str, ...]) -> list[FieldError]:
    """Once `immutable` is true it stays so, and the `frozen` fields stay as they are."""
    if old.get("immutable") is not True:
        return []
    errs = [] if new.get("immutable") is True else [field.forbidden("immutable", IMMUTABLE_SET)]
    errs += [field.forbidden(key, IMMUTABLE_SET) for key in frozen
             if _map(new.get(key)) != _map(old.get(key))]
    return errs


def validate_config_map_update(new: Mapping[str, Any], old: Mapping[str, Any]
                               ) -> list[FieldError]:
    """`ValidateConfigMapUpdate` beyond metadata: what `immutable` freezes, then the new
    ConfigMap's own rules."""
    return _immutable_errors(new, old, ("data", "binaryData")) + validate_config_map(new)


def _type_errors(secret: Mapping[str, Any], data: Mapping[str, Any]) -> list[FieldError]:
    """The keys (or annotation) a Secret's `type` requires."""
    path = Path("data")
    kind = secret.get("type") or ""
    if kind == SERVICE_ACCOUNT_TOKEN:
        annotations = _map(_map(secret.get("metadata")).get("annotations"))
        if not annotations.get(SERVICE_ACCOUNT_NAME_KEY):
            return [field.required(Path("metadata", "annotations").key(SERVICE_ACCOUNT_NAME_KEY))]
    elif kind in (DOCKERCFG, DOCKER_CONFIG_JSON):
        key = DOCKERCFG_KEY if kind == DOCKERCFG else DOCKER_CONFIG_JSON_KEY
        if key not in data:
            return [field.required(path.key(key))]
        text = _decoded(data[key]).decode(errors="replace")
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as err:
            return [field.invalid(path.key(key), REDACTED, go_json_error(text, err))]
        if parsed is not None and not isinstance(parsed, dict):
            return [field.invalid(path.key(key), REDACTED, f"json: cannot unmarshal "
                                  f"{json_kind(parsed)} into Go value of type "
                                  "map[string]interface {}")]
    elif kind == BASIC_AUTH:
        if "username" not in data and "password" not in data:
            return [field.required(path.key("username")), field.required(path.key("password"))]
    elif kind == SSH_AUTH:
        if not _decoded(data.get(SSH_PRIVATE_KEY)):
            return [field.required(path.key(SSH_PRIVATE_KEY))]
    elif kind == TLS:
        return [field.required(path.key(key)) for key in (TLS_CERT_KEY, TLS_PRIVATE_KEY_KEY)
                if key not in data]
    return []


def validate_secret(secret: Mapping[str, Any]) -> list[FieldError]:
    """`ValidateSecret` beyond metadata: valid keys, at most `MAX_SECRET_SIZE` bytes of data
    (decoded), and what its type requires (`stringData` is folded into `data` first)."""
    data = _map(secret.get("data"))
    errs = _key_errors(Path("data"), data)
    if sum(len(_decoded(v)) for v in data.values()) > MAX_SECRET_SIZE:
        errs.append(field.too_long("data", MAX_SECRET_SIZE))
    return errs + _type_errors(secret, data)


def validate_secret_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[FieldError]:
    """`ValidateSecretUpdate` beyond metadata: the type never changes, what `immutable`
    freezes, then the new Secret's own rules."""
    errs = validate_immutable_field(new.get("type") or "", old.get("type") or "", "type")
    return errs + _immutable_errors(new, old, ("data",)) + validate_secret(new)
