"""Learning every apiserver of the control plane, as k3s' agent learns them from the
`kubernetes` Service's endpoints.

ephemera serves no Services; each apiserver's identity Lease (`kube-system/apiserver-<hash>`,
label `apiserver.kubernetes.io/identity=kube-apiserver`, see `ephemera.apiserver.identity`)
carries its URL in the annotation `ephemera.io/apiserver-url`, and one renewed within the
lease endpoint reconciler's TTL (15 s) is live. `live_apiserver_urls(api)` lists them;
`discover_apiservers(api)` adds them to the client's `EndpointPicker` every 10 s (URLs are
only added: a dead one is marked failed when a connection to it fails and is tried last).
A component that may not read those leases (403) stops looking and keeps the URLs it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.api.errors import StatusError
from ephemera.api.meta import parse_time
from ephemera.api.wellknown import (
    APISERVER_ENDPOINT_TTL_SECONDS,
    APISERVER_IDENTITY_LABEL,
    APISERVER_IDENTITY_NAMESPACE,
    APISERVER_IDENTITY_RENEW_SECONDS,
    APISERVER_IDENTITY_VALUE,
    APISERVER_URL_ANNOTATION,
)
from ephemera.client.api import ApiClient, ApiUnavailable, resource_path

__all__ = ["discover_apiservers", "discovering", "live_apiserver_urls", "live_url"]

log = logging.getLogger("ephemera.client.apiservers")

LEASES = resource_path("leases", APISERVER_IDENTITY_NAMESPACE, group="coordination.k8s.io")
SELECTOR = f"{APISERVER_IDENTITY_LABEL}={APISERVER_IDENTITY_VALUE}"


def live_url(lease: Mapping[str, Any], now: datetime) -> str | None:
    """The URL of the apiserver holding `lease` when it renewed it within the TTL."""
    url = ((lease.get("metadata") or {}).get("annotations") or {}).get(APISERVER_URL_ANNOTATION)
    renewed = parse_time((lease.get("spec") or {}).get("renewTime"))
    if not url or renewed is None:
        return None
    if now - renewed > timedelta(seconds=APISERVER_ENDPOINT_TTL_SECONDS):
        return None
    return str(url)


async def live_apiserver_urls(api: ApiClient) -> list[str]:
    """The URLs of the live apiservers, by lease name (a stable order)."""
    listed = await api.list(LEASES, label_selector=SELECTOR)
    now = datetime.now(UTC)
    items = sorted(listed.get("items") or [],
                   key=lambda lease: str((lease.get("metadata") or {}).get("name")))
    return [url for url in (live_url(lease, now) for lease in items) if url]


async def discover_apiservers(api: ApiClient,
                              interval: float = APISERVER_IDENTITY_RENEW_SECONDS) -> None:
    """Add the live apiservers to `api`'s endpoints now and every `interval` seconds, until
    cancelled (or forbidden to read them)."""
    while True:
        try:
            added = api.endpoints.add(await live_apiserver_urls(api))
        except StatusError as err:
            if err.code == 403:
                log.info("not learning other apiservers: %s", err.message)
                return
            log.warning("learning other apiservers failed: %s", err.message)
        except ApiUnavailable as err:
            log.warning("learning other apiservers failed: %s", err)
        else:
            if added:
                log.info("learned apiservers %s (now using %s)", ", ".join(added), api.server)
        await asyncio.sleep(interval)


@contextlib.asynccontextmanager
async def discovering(api: ApiClient) -> AsyncIterator[ApiClient]:
    """`discover_apiservers(api)` in the background for the duration of the block."""
    task = asyncio.get_running_loop().create_task(discover_apiservers(api),
                                                  name="apiserver-discovery")
    try:
        yield api
    finally:
        await cancel_and_wait(task)
