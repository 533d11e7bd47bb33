"""The apiserver identity Lease (`ephemera.apiserver.identity`) and what clients learn from it
(`ephemera.client.apiservers`): created with upstream's labels and holder, renewed, deleted
on stop; a lease renewed within the 15 s TTL is a live endpoint, an older one is not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from apiserver_fixtures import Api

from ephemera.api.wellknown import APISERVER_URL_ANNOTATION
from ephemera.apiserver.app import REGISTRY
from ephemera.apiserver.identity import ApiserverIdentity, identity_name
from ephemera.client import ApiClient, ClientConfig, resource_path
from ephemera.client.apiservers import live_apiserver_urls, live_url

LEASES = resource_path("leases", "kube-system", group="coordination.k8s.io")


def test_identity_names_hash_host_and_port() -> None:
    one, other = identity_name("host-a", 6443), identity_name("host-a", 6444)
    assert one != other and one.startswith("apiserver-") and len(one) == len("apiserver-") + 26
    assert identity_name("host-a", 6443) == one  # a restart on the same port takes it over


def test_a_lease_is_live_within_the_ttl() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    lease = {"metadata": {"annotations": {APISERVER_URL_ANNOTATION: "https://10.0.0.1:6443"}},
             "spec": {"renewTime": "2026-01-01T11:59:50.123456Z"}}
    assert live_url(lease, now) == "https://10.0.0.1:6443"
    assert live_url(lease, now + timedelta(seconds=6)) is None  # renewed 16 s before
    assert live_url({"spec": lease["spec"]}, now) is None  # no URL: not ephemera's
    assert live_url({"metadata": lease["metadata"], "spec": {}}, now) is None


async def test_the_identity_lease_is_kept_and_removed_on_stop(api: Api) -> None:
    registry = api.app[REGISTRY]
    first = ApiserverIdentity(registry, "https://127.0.0.1:7001", 7001, hostname="Host-A")
    second = ApiserverIdentity(registry, "https://127.0.0.1:7002", 7002, hostname="host-a")
    await first.renew()
    await second.renew()
    url = str(api.client.server.make_url("")).rstrip("/")
    async with ApiClient(ClientConfig(server=url)) as client:
        lease = await client.get(f"{LEASES}/{first.name}")
        assert lease["metadata"]["labels"] == {
            "apiserver.kubernetes.io/identity": "kube-apiserver",
            "kubernetes.io/hostname": "host-a"}
        assert lease["spec"]["holderIdentity"] == first.holder
        assert first.holder.startswith(first.name + "_")
        assert lease["spec"]["leaseDurationSeconds"] == 3600
        renewed = lease["spec"]["renewTime"]
        await first.renew()
        again = await client.get(f"{LEASES}/{first.name}")
        assert again["spec"]["renewTime"] >= renewed
        assert again["spec"]["acquireTime"] == lease["spec"]["acquireTime"]
        assert sorted(await live_apiserver_urls(client)) == [
            "https://127.0.0.1:7001", "https://127.0.0.1:7002"]

        await first.stop()
        assert await live_apiserver_urls(client) == ["https://127.0.0.1:7002"]
        # A newer holder of the same name keeps its lease when an older one stops.
        taker = ApiserverIdentity(registry, "https://127.0.0.1:7002", 7002, hostname="host-a")
        await taker.renew()
        await second.stop()
        assert await live_apiserver_urls(client) == ["https://127.0.0.1:7002"]
        await taker.stop()
        assert await live_apiserver_urls(client) == []


async def test_expired_identity_leases_of_other_apiservers_are_collected(api: Api) -> None:
    registry = api.app[REGISTRY]
    url = str(api.client.server.make_url("")).rstrip("/")
    mine = ApiserverIdentity(registry, "https://127.0.0.1:7001", 7001, hostname="host-a")
    await mine.renew()
    two_hours_ago = (datetime.now(UTC) - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def lease(name: str, identity: bool) -> dict[str, object]:
        labels = {"apiserver.kubernetes.io/identity": "kube-apiserver"} if identity else {}
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "labels": labels},
                "spec": {"holderIdentity": f"{name}_x", "leaseDurationSeconds": 3600,
                         "renewTime": two_hours_ago}}

    async with ApiClient(ClientConfig(server=url)) as client:
        await client.create(LEASES, lease("apiserver-gone", True))
        await client.create(LEASES, lease("kube-scheduler", False))
        assert await mine.collect_expired() == ["apiserver-gone"]
        names = {item["metadata"]["name"] for item in (await client.list(LEASES))["items"]}
        assert names == {mine.name, "kube-scheduler"}  # its own and other leases stay
        # An hour from now its own lease would be expired too, but is never collected.
        later = datetime.now(UTC) + timedelta(hours=2)
        assert await mine.collect_expired(later) == []
