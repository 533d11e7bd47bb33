"""The apiserver's identity Lease (KEP-1965), which also lists it among the control plane's
endpoints.

Every apiserver keeps a Lease `kube-system/apiserver-<hash>` labelled
`apiserver.kubernetes.io/identity=kube-apiserver` and `kubernetes.io/hostname=<host>`, held
by `apiserver-<hash>_<uuid>` for 3600 s and renewed every 10 s, as upstream's. Upstream
hashes the host name alone; ephemera hashes `<host>:<port>`, because several members of one
control plane may run on one machine (a restart on the same port takes its lease over, as a
restart on the same host does upstream).

The `kubernetes` Service's endpoints, which upstream's lease endpoint reconciler keeps to the
live apiservers, are derived from these leases (`ephemera.apiserver.kubernetesservice`): the
lease carries the URL clients reach the apiserver at (annotation
`ephemera.io/apiserver-url`), and a lease renewed within the reconciler's TTL (15 s) is a
live endpoint (`ephemera.client.apiservers`, which clients read directly). On a graceful
stop the apiserver deletes its lease, as the reconciler removes a stopping apiserver's
endpoint; a killed one drops out after the TTL, and its lease is deleted by a live apiserver
once it has expired (its 3600 s past the last renewal), checked at start and every hour, as
upstream's identity lease garbage collector.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import socket
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.api import errors
from ephemera.api.errors import StatusError
from ephemera.api.meta import parse_time
from ephemera.api.wellknown import (
    APISERVER_IDENTITY_LABEL,
    APISERVER_IDENTITY_LEASE_SECONDS,
    APISERVER_IDENTITY_NAMESPACE,
    APISERVER_IDENTITY_RENEW_SECONDS,
    APISERVER_IDENTITY_VALUE,
    APISERVER_URL_ANNOTATION,
    HOSTNAME_LABEL,
)
from ephemera.apiserver.registry import DeleteOptions, Registry
from ephemera.apiserver.resources import lookup

__all__ = ["ApiserverIdentity", "identity_name"]

log = logging.getLogger(__name__)

_LEASES = lookup("coordination.k8s.io", "v1", "leases")
# upstream's identity lease garbage collector runs hourly.
GC_PERIOD_SECONDS = 3600.0


def identity_name(hostname: str, port: int) -> str:
    """`apiserver-` and 26 hex digits of the SHA-256 of `<hostname>:<port>`."""
    return "apiserver-" + hashlib.sha256(f"{hostname}:{port}".encode()).hexdigest()[:26]


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ApiserverIdentity:
    """Creates, renews and (on `stop`) deletes one apiserver's identity Lease."""

    def __init__(self, registry: Registry, url: str, port: int, *,
                 hostname: str | None = None,
                 renew_interval: float = APISERVER_IDENTITY_RENEW_SECONDS) -> None:
        assert _LEASES is not None
        self.registry = registry
        self.url = url
        self.hostname = (hostname or socket.gethostname()).lower()
        self.name = identity_name(self.hostname, port)
        self.holder = f"{self.name}_{uuid.uuid4()}"
        self.renew_interval = renew_interval
        self._task: asyncio.Task[None] | None = None

    def _lease(self, current: dict[str, Any] | None) -> dict[str, Any]:
        now = _micro_now()
        spec = dict((current or {}).get("spec") or {})
        if spec.get("holderIdentity") != self.holder:
            spec["acquireTime"] = now
        spec.update(holderIdentity=self.holder,
                    leaseDurationSeconds=APISERVER_IDENTITY_LEASE_SECONDS, renewTime=now)
        md = dict((current or {}).get("metadata") or {})
        md.update(name=self.name, namespace=APISERVER_IDENTITY_NAMESPACE)
        md["labels"] = {**(md.get("labels") or {}),
                        APISERVER_IDENTITY_LABEL: APISERVER_IDENTITY_VALUE,
                        HOSTNAME_LABEL: self.hostname}
        md["annotations"] = {**(md.get("annotations") or {}),
                             APISERVER_URL_ANNOTATION: self.url}
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": md,
                "spec": spec}

    async def renew(self) -> None:
        """Create or renew the lease now."""
        assert _LEASES is not None
        leases = _LEASES

        async def apply(current: dict[str, Any] | None) -> dict[str, Any]:
            if current is None:
                raise errors.not_found(leases.plural, self.name, leases.group)
            return await self.registry.prepare_update(leases, self._lease(current), current)

        try:
            await self.registry.update(leases, APISERVER_IDENTITY_NAMESPACE, self.name, apply)
        except StatusError as err:
            if err.code != 404:
                raise
            try:
                await self.registry.create(leases, self._lease(None))
            except StatusError as again:
                if again.code != 409:  # another member created it meanwhile: renewed next
                    raise

    async def collect_expired(self, now: datetime | None = None) -> list[str]:
        """Delete the other apiservers' identity leases that expired; their names."""
        assert _LEASES is not None
        now = now or datetime.now(UTC)
        page = await self.registry.list(_LEASES, APISERVER_IDENTITY_NAMESPACE)
        codec = self.registry.codec(_LEASES)
        gone: list[str] = []
        for kv, obj in zip(page.kvs, page.objects, strict=True):
            lease = obj if obj is not None else codec.decode(kv)
            md, spec = lease.get("metadata") or {}, lease.get("spec") or {}
            if ((md.get("labels") or {}).get(APISERVER_IDENTITY_LABEL)
                    != APISERVER_IDENTITY_VALUE or md.get("name") == self.name):
                continue
            renewed = parse_time(spec.get("renewTime"))
            duration = spec.get("leaseDurationSeconds")
            if renewed is None or not isinstance(duration, int):
                continue
            if renewed + timedelta(seconds=duration) >= now:
                continue
            with contextlib.suppress(StatusError):  # another member collected it first
                await self.registry.delete(_LEASES, APISERVER_IDENTITY_NAMESPACE,
                                           str(md.get("name")), DeleteOptions(
                                               precondition_resource_version=str(
                                                   kv.mod_revision)))
                gone.append(str(md.get("name")))
        if gone:
            log.info("deleted expired apiserver identity leases %s", ", ".join(gone))
        return gone

    async def _run(self) -> None:
        collected_at: float | None = None
        loop = asyncio.get_running_loop()
        while True:
            try:
                await self.renew()
                if collected_at is None or loop.time() - collected_at >= GC_PERIOD_SECONDS:
                    collected_at = loop.time()
                    await self.collect_expired()
            except Exception as err:  # the store may be away: next time
                log.warning("renewing the apiserver identity lease %s failed: %s",
                            self.name, err)
            await asyncio.sleep(self.renew_interval)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                name="apiserver-identity")

    async def stop(self) -> None:
        """Stop renewing and delete the lease (when it is still ours)."""
        assert _LEASES is not None
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
        try:
            current = await self.registry.get(_LEASES, APISERVER_IDENTITY_NAMESPACE, self.name)
            if (current.get("spec") or {}).get("holderIdentity") == self.holder:
                await self.registry.delete(_LEASES, APISERVER_IDENTITY_NAMESPACE, self.name,
                                           DeleteOptions())
        except Exception as err:  # best effort on the way out
            log.info("deleting the apiserver identity lease %s: %s", self.name, err)
