"""A kubelet's certificates renewed before they expire (`ephemera.kubelet.certificate`): the
rotation deadline at 70-90% of the lifetime, the serving certificate asked for with the
Node's addresses, stored as upstream's file store does and loaded into a running TLS server
without a restart (new connections see the new certificate, the server keeps answering),
and the client certificate written into the kubeconfig and handed to the ApiClient.
Against an in-process apiserver, with the real signer (`csrsigning`) and a short lifetime;
the test approves the requests."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import ipaddress
import ssl
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.apiserver.certs import create_ca, issue_client_cert
from ephemera.cli.kubelet import ensure_self_signed
from ephemera.client import (
    ApiClient,
    ApiUnavailable,
    ClientConfig,
    load_kubeconfig,
    resource_path,
)
from ephemera.controllers.certificates import CertificateSigner
from ephemera.kubelet.bootstrap import write_kubeconfig
from ephemera.kubelet.certificate import (
    PemStore,
    client_rotator,
    rotation_deadline,
    serving_names,
    serving_rotator,
)
from ephemera.kubelet.server import kubelet_ssl_context
from ephemera.store import open_store

NODE = "rot-node"
CSRS = resource_path("certificatesigningrequests", None, group="certificates.k8s.io")


def certificate(not_before: dt.datetime, not_after: dt.datetime) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "x")])
    return (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(not_before).not_valid_after(not_after).sign(key, hashes.SHA256()))


def test_the_rotation_deadline_is_at_70_to_90_percent_of_the_lifetime() -> None:
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    cert = certificate(start, start + dt.timedelta(seconds=1000))
    assert rotation_deadline(cert, 0.0) == start + dt.timedelta(seconds=700)
    assert rotation_deadline(cert, 0.5) == start + dt.timedelta(seconds=800)
    seen = {rotation_deadline(cert) for _ in range(200)}
    assert all(start + dt.timedelta(seconds=700) <= d < start + dt.timedelta(seconds=900)
               for d in seen)
    assert len(seen) > 100  # jittered


def test_serving_names_come_from_the_nodes_addresses() -> None:
    addresses = [{"type": "InternalIP", "address": "10.0.0.5"},
                 {"type": "Hostname", "address": "n1"},
                 {"type": "ExternalIP", "address": "fd00::5"},
                 {"type": "InternalIP", "address": "10.0.0.5"},
                 {"type": "ExternalDNS", "address": "n1.example.com"},
                 {"type": "InternalIP", "address": "not-an-ip"},
                 {"type": "Hostname", "address": ""}]
    assert serving_names(addresses) == [
        x509.DNSName("n1"), x509.DNSName("n1.example.com"),
        x509.IPAddress(ipaddress.ip_address("10.0.0.5")),
        x509.IPAddress(ipaddress.ip_address("fd00::5"))]


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path, lifetime: dt.timedelta
                  ) -> AsyncIterator[tuple[ApiClient, bytes]]:
    """An in-process apiserver with a Node `NODE` at 127.0.0.1, the signer, and an approver
    that approves every CSR; yields a client and the CA certificate."""
    store = open_store("sqlite", data_dir=tmp_path / "data")
    server = TestServer(create_app(store, ApiserverConfig(namespace_retry_interval=0.05)))
    await server.start_server()
    ca = create_ca()
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    (tmp_path / "ca.key").write_bytes(ca.key_pem)
    config = ClientConfig(server=str(server.make_url("")).rstrip("/"))
    tasks: list[asyncio.Task[Any]] = []
    try:
        async with ApiClient(config, user_agent="rotation-test") as api:
            node = await api.create(resource_path("nodes"), {
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
            node["status"] = {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                            {"type": "Hostname", "address": NODE}]}
            await api.update(resource_path("nodes", None, NODE, "status"), node)
            signer = CertificateSigner(api, tmp_path / "ca.crt", tmp_path / "ca.key",
                                       duration=lifetime)
            tasks = [asyncio.create_task(signer.run()), asyncio.create_task(approve_all(api))]
            yield api, ca.cert_pem
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.close()
        await store.close()


async def approve_all(api: ApiClient) -> None:
    while True:
        for csr in (await api.list(CSRS))["items"]:
            if (csr.get("status") or {}).get("conditions"):
                continue
            csr["status"] = {"conditions": [{"type": "Approved", "status": "True",
                                             "reason": "Test", "message": "approved"}]}
            await api.update(f"{CSRS}/{csr['metadata']['name']}/approval", csr)
        await asyncio.sleep(0.1)


async def served_certificate(port: int, ca_pem: bytes) -> x509.Certificate:
    """The certificate a new TLS connection to 127.0.0.1:port gets (verified against the CA
    and the address, as the apiserver does), after one request answered."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.1 200")
    finally:
        writer.close()
    return x509.load_der_x509_certificate(der)


async def test_the_serving_certificate_is_issued_and_renewed_while_serving(
        tmp_path: Path) -> None:
    lifetime = dt.timedelta(seconds=6)
    async with cluster(tmp_path, lifetime) as (api, ca_pem):
        cert_file, key_file = ensure_self_signed(tmp_path / "root" / "pki", NODE)
        context = kubelet_ssl_context(cert_file, key_file, None)
        app = web.Application()

        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok")

        app.router.add_get("/healthz", healthz)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port = runner.addresses[0][1]
        store = PemStore(tmp_path / "root" / "pki", "kubelet-server")
        rotator = serving_rotator(api, NODE, store, context, poll_interval=0.05)
        assert rotator.current is None  # nothing stored: ask at once
        task = asyncio.create_task(rotator.run())
        try:
            with pytest.raises(ssl.SSLCertVerificationError):
                await served_certificate(port, ca_pem)  # the self-signed placeholder
            async with asyncio.timeout(30):
                while rotator.rotations < 1:
                    await asyncio.sleep(0.05)
            first = await served_certificate(port, ca_pem)
            assert first.subject.rfc4514_string() == f"CN=system:node:{NODE},O=system:nodes"
            assert first.extensions.get_extension_for_class(
                x509.SubjectAlternativeName).value == x509.SubjectAlternativeName(
                [x509.DNSName(NODE), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            assert list(first.extensions.get_extension_for_class(
                x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.SERVER_AUTH]
            # the lifetime plus a backdate of a tenth of it (X.509 times are whole seconds)
            assert lifetime <= first.not_valid_after_utc - first.not_valid_before_utc <= \
                lifetime + dt.timedelta(seconds=1)
            csrs = (await api.list(CSRS))["items"]
            assert [(c["spec"]["signerName"], sorted(c["spec"]["usages"])) for c in csrs] == [
                ("kubernetes.io/kubelet-serving", ["digital signature", "server auth"])]
            # renewed at 70-90% of the lifetime, before it expires, without a restart
            async with asyncio.timeout(30):
                while rotator.rotations < 2:
                    await asyncio.sleep(0.05)
            renewal = max((await api.list(CSRS))["items"],
                          key=lambda c: c["metadata"]["creationTimestamp"])
            asked = dt.datetime.fromisoformat(renewal["metadata"]["creationTimestamp"])
            assert first.not_valid_before_utc + lifetime / 2 < asked < first.not_valid_after_utc
            second = await served_certificate(port, ca_pem)
            assert second.serial_number != first.serial_number
            assert second.public_key() != first.public_key()  # a new key each time
            link = store.current_path
            assert link.is_symlink() and link.resolve().parent == link.parent
            assert stat.S_IMODE(link.resolve().stat().st_mode) == 0o600
            stored = store.load()
            assert stored is not None
            assert x509.load_pem_x509_certificate(stored[0]).serial_number in (
                second.serial_number, *([] if rotator.current is None
                                        else [rotator.current.serial_number]))
            # a restarted kubelet starts from the stored pair
            assert serving_rotator(api, NODE, store, context).current is not None
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await runner.cleanup()


async def test_the_client_certificate_is_renewed_into_the_kubeconfig(tmp_path: Path) -> None:
    async with cluster(tmp_path, dt.timedelta(hours=1)) as (api, ca_pem):
        first = issue_client_cert(create_ca(), f"system:node:{NODE}", ["system:nodes"])
        kubeconfig = tmp_path / "kubeconfig"
        write_kubeconfig(kubeconfig, api.server, ca_pem, first.cert_pem, first.key_pem,
                         f"system:node:{NODE}")
        doc = yaml.safe_load(kubeconfig.read_text())
        doc["preferences"] = {"colors": True}  # the rest of the file stays
        kubeconfig.write_text(yaml.safe_dump(doc))
        node_api = ApiClient(load_kubeconfig(kubeconfig))
        async with node_api:
            rotator = client_rotator(node_api, NODE, kubeconfig)
            assert rotator.current is not None
            assert rotator.current.serial_number == x509.load_pem_x509_certificate(
                first.cert_pem).serial_number

            async def watch() -> None:
                async for _ in node_api.watch(resource_path("nodes")):
                    pass

            watching = asyncio.create_task(watch())
            await asyncio.sleep(0.3)
            await rotator.rotate()
            # connections of the old certificate end, a watch on one too (to be resumed)
            with pytest.raises(ApiUnavailable, match="client certificate was rotated"):
                async with asyncio.timeout(10):
                    await watching
            renewed = load_kubeconfig(kubeconfig)
            assert renewed.client_cert_pem is not None
            cert = x509.load_pem_x509_certificate(renewed.client_cert_pem)
            assert cert.subject.rfc4514_string() == f"CN=system:node:{NODE},O=system:nodes"
            cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
            assert node_api.config.client_cert_pem == renewed.client_cert_pem
            assert node_api.config.client_key_pem == renewed.client_key_pem
            assert yaml.safe_load(kubeconfig.read_text())["preferences"] == {"colors": True}
            assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
            [csr] = (await api.list(CSRS))["items"]
            assert csr["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
            assert "subjectAltName" not in base64.b64decode(csr["spec"]["request"]).decode(
                errors="replace")
            await node_api.get("/version")  # the client still works


async def test_a_serving_certificate_is_renewed_at_once_when_the_addresses_change(
        tmp_path: Path) -> None:
    async with cluster(tmp_path, dt.timedelta(hours=1)) as (api, _):
        cert_file, key_file = ensure_self_signed(tmp_path / "root" / "pki", NODE)
        context = kubelet_ssl_context(cert_file, key_file, None)
        store = PemStore(tmp_path / "root" / "pki", "kubelet-server")
        rotator = serving_rotator(api, NODE, store, context, poll_interval=0.05,
                                  check_interval=0.1)
        task = asyncio.create_task(rotator.run())
        try:
            async with asyncio.timeout(30):
                while rotator.rotations < 1:
                    await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            assert rotator.rotations == 1  # an hour to go: nothing to do
            node = await api.get(resource_path("nodes", None, NODE))
            node["status"]["addresses"].append({"type": "ExternalIP", "address": "10.1.2.3"})
            await api.update(resource_path("nodes", None, NODE, "status"), node)
            async with asyncio.timeout(30):
                while rotator.rotations < 2:
                    await asyncio.sleep(0.05)
            assert rotator.current is not None
            names = rotator.current.extensions.get_extension_for_class(
                x509.SubjectAlternativeName).value
            assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == [
                "127.0.0.1", "10.1.2.3"]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
