"""ConfigMaps and Secrets through the apiserver: their keys, their 1 MiB limit, what a
Secret's type requires and what `immutable` freezes, answered with upstream's 422s."""

from __future__ import annotations

import base64

from apiserver_fixtures import Api, causes, configmap

CMS = "/api/v1/namespaces/default/configmaps"
SECRETS = "/api/v1/namespaces/default/secrets"
IMMUTABLE = "field is immutable when `immutable` is set"


async def test_a_config_map_over_a_mebibyte_is_refused(api: Api) -> None:
    status, body = await api.post(CMS, configmap("huge", {"a": "a" * (1024 * 1024 + 1)}))
    assert status == 422
    assert body["message"] == ('ConfigMap "huge" is invalid: []: Too long: may not be more '
                               "than 1048576 bytes")
    assert causes(body) == [("[]", "Too long: may not be more than 1048576 bytes")]
    status, _ = await api.get(f"{CMS}/huge")
    assert status == 404


async def test_a_config_map_key_must_be_a_config_key(api: Api) -> None:
    status, body = await api.post(CMS, configmap("keys", {"bad key": "1"}))
    assert status == 422
    assert body["message"].startswith(
        'ConfigMap "keys" is invalid: data[bad key]: Invalid value: "bad key": a valid config '
        "key must consist of alphanumeric characters")


async def test_an_immutable_config_map_cannot_change(api: Api) -> None:
    status, created = await api.post(CMS, {**configmap("frozen", {"a": "1"}), "immutable": True})
    assert status == 201, created
    changed = {**created, "data": {"a": "2"}}
    status, body = await api.put(f"{CMS}/frozen", changed)
    assert status == 422
    assert body["message"] == f'ConfigMap "frozen" is invalid: data: Forbidden: {IMMUTABLE}'
    status, body = await api.put(f"{CMS}/frozen", {**created, "immutable": False})
    assert status == 422
    assert causes(body) == [("immutable", f"Forbidden: {IMMUTABLE}")]
    # its labels may still change
    status, _ = await api.put(f"{CMS}/frozen", {**created, "metadata": {
        **created["metadata"], "labels": {"task": "7"}}})
    assert status == 200


async def test_a_tls_secret_needs_its_keys_and_keeps_its_type(api: Api) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls"},
              "type": "kubernetes.io/tls", "stringData": {"tls.crt": "c"}}
    status, body = await api.post(SECRETS, secret)
    assert status == 422
    assert body["message"] == 'Secret "tls" is invalid: data[tls.key]: Required value'
    status, created = await api.post(SECRETS, {**secret, "stringData": {"tls.crt": "c",
                                                                        "tls.key": "k"}})
    assert status == 201, created
    status, body = await api.put(f"{SECRETS}/tls", {**created, "type": "Opaque"})
    assert status == 422
    assert body["message"] == ('Secret "tls" is invalid: type: Invalid value: "Opaque": '
                               "field is immutable")


async def test_a_secret_over_a_mebibyte_decoded_is_refused(api: Api) -> None:
    data = base64.b64encode(b"s" * (1024 * 1024 + 1)).decode()
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "big"},
              "data": {"a": data}}
    status, body = await api.post(SECRETS, secret)
    assert status == 422
    assert body["message"] == ('Secret "big" is invalid: data: Too long: may not be more '
                               "than 1048576 bytes")
