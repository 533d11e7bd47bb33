"""TLS bootstrapping keeps its private key across restarts (upstream writes
`kubelet-client.key.tmp` before posting the CSR): a kubelet restarted while its request
waits for approval posts the same request again (same key, same name) instead of a new one,
and once signed writes its kubeconfig (0600) and deletes the key file. Against an
in-process apiserver; the test signs the request itself."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.apiserver.certs import create_ca, issue_client_cert
from ephemera.client import ApiClient, ClientConfig, load_kubeconfig, resource_path
from ephemera.kubelet.bootstrap import (
    BootstrapError,
    bootstrap_client_certificate,
    csr_name,
    load_or_create_key,
)
from ephemera.store import open_store

NODE = "boot-node"
CSRS = resource_path("certificatesigningrequests", None, group="certificates.k8s.io")


@contextlib.asynccontextmanager
async def apiserver(tmp_path: Path) -> AsyncIterator[tuple[ClientConfig, ApiClient]]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    server = TestServer(create_app(store, ApiserverConfig(namespace_retry_interval=0.05)))
    await server.start_server()
    try:
        config = ClientConfig(server=str(server.make_url("")).rstrip("/"))
        async with ApiClient(config, user_agent="bootstrap-test") as api:
            yield config, api
    finally:
        await server.close()
        await store.close()


def test_the_key_is_loaded_again_and_a_bad_one_replaced(tmp_path: Path) -> None:
    path = tmp_path / "kubelet-client.key.tmp"
    key = load_or_create_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = load_or_create_key(path)
    assert again.private_numbers() == key.private_numbers()
    path.write_text("not a key")
    assert load_or_create_key(path).private_numbers() != key.private_numbers()


async def test_a_restart_while_waiting_posts_the_same_request(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubelet" / "kubeconfig"
    async with apiserver(tmp_path) as (bootstrap, api):
        with pytest.raises(BootstrapError, match="was not signed within"):
            await bootstrap_client_certificate(bootstrap, NODE, kubeconfig, timeout=0.2)
        key_file = kubeconfig.with_name("kubelet-client.key.tmp")
        key_pem = key_file.read_bytes()
        [posted] = (await api.list(CSRS))["items"]
        name = posted["metadata"]["name"]

        async def approve() -> None:
            await asyncio.sleep(0.3)  # the restarted kubelet has posted again (409), polls
            csrs = (await api.list(CSRS))["items"]
            assert [c["metadata"]["name"] for c in csrs] == [name]
            path = resource_path("certificatesigningrequests", None, name,
                                 group="certificates.k8s.io")
            csr = csrs[0]
            csr["status"] = {"conditions": [{"type": "Approved", "status": "True",
                                             "reason": "Test", "message": "approved"}]}
            csr = await api.update(path + "/approval", csr)
            cert = issue_client_cert(create_ca(), f"system:node:{NODE}", ["system:nodes"])
            csr["status"]["certificate"] = base64.b64encode(cert.cert_pem).decode()
            await api.update(path + "/status", csr)

        approver = asyncio.ensure_future(approve())
        await bootstrap_client_certificate(bootstrap, NODE, kubeconfig, timeout=10)
        await approver
        assert [c["metadata"]["name"] for c in (await api.list(CSRS))["items"]] == [name]
        assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
        assert load_kubeconfig(kubeconfig).client_key_pem == key_pem
        assert not key_file.exists()
        assert sorted(p.name for p in kubeconfig.parent.iterdir()) == ["kubeconfig"]


def test_the_csr_name_is_upstream_s_digested_name() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    der = key.public_key().public_bytes(serialization.Encoding.DER,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)

    def enc(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    digest = hashlib.new("sha512_256")
    for part in (der, b"system:node:n1", b"system:nodes", b"digital signature",
                 b"client auth"):
        digest.update(enc(part) + b"|")
    assert csr_name(key, "n1") == "node-csr-" + enc(digest.digest()).decode()
    assert len(csr_name(key, "n1")) == len("node-csr-") + 43
