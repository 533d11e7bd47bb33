"""The kubelet's service account token manager (cache, upstream's refresh rule, failed
refreshes) and the projected volume's `serviceAccountToken` source."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from ephemera.api.errors import StatusError
from ephemera.api.meta import rfc3339
from ephemera.kubelet.tokens import TokenManager, requires_refresh
from ephemera.kubelet.volumes.projected import ProjectedPlugin

START = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


class FakeApi:
    """Answers TokenRequests with numbered tokens issued at the fake clock's time."""

    def __init__(self, clock: list[dt.datetime]) -> None:
        self.clock = clock
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail = False

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((path, body))
        if self.fail:
            raise StatusError(503, "ServiceUnavailable", "apiserver down")
        seconds = body["spec"]["expirationSeconds"]
        expires = self.clock[0] + dt.timedelta(seconds=seconds)
        return {**body, "status": {"token": f"token-{len(self.calls)}",
                                   "expirationTimestamp": rfc3339(expires)}}


def request(seconds: int = 3600, uid: str = "pod-1") -> dict[str, Any]:
    return {"spec": {"audiences": [], "expirationSeconds": seconds,
                     "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p",
                                        "uid": uid}}}


def test_refresh_rule() -> None:
    issued = {"spec": {"expirationSeconds": 3600},
              "status": {"expirationTimestamp": rfc3339(START + dt.timedelta(hours=1))}}
    assert not requires_refresh(issued, START + dt.timedelta(minutes=47))
    assert requires_refresh(issued, START + dt.timedelta(minutes=48, seconds=1))
    assert requires_refresh(issued, START + dt.timedelta(minutes=47, seconds=55), jitter=10)
    day = {"spec": {"expirationSeconds": 7 * 86400},
           "status": {"expirationTimestamp": rfc3339(START + dt.timedelta(days=7))}}
    assert not requires_refresh(day, START + dt.timedelta(hours=23))
    assert requires_refresh(day, START + dt.timedelta(hours=24, seconds=1))


async def test_tokens_are_cached_rotated_and_kept_through_failures() -> None:
    clock = [START]
    api = FakeApi(clock)
    manager = TokenManager(api, clock=lambda: clock[0], jitter=lambda: 0.0)  # type: ignore[arg-type]
    first = await manager.get_service_account_token("ns", "sa", request())
    assert first["status"]["token"] == "token-1"
    assert api.calls[0][0] == "/api/v1/namespaces/ns/serviceaccounts/sa/token"
    assert api.calls[0][1]["kind"] == "TokenRequest"
    clock[0] = START + dt.timedelta(minutes=40)
    assert (await manager.get_service_account_token("ns", "sa", request())) is first
    other = await manager.get_service_account_token("ns", "sa", request(uid="pod-2"))
    assert other["status"]["token"] == "token-2"  # another pod, another token
    clock[0] = START + dt.timedelta(minutes=50)  # past 80% of the first one's hour
    rotated = await manager.get_service_account_token("ns", "sa", request())
    assert rotated["status"]["token"] == "token-3"
    clock[0] = START + dt.timedelta(minutes=50 + 49)
    api.fail = True
    kept = await manager.get_service_account_token("ns", "sa", request())
    assert kept is rotated  # refresh failed; the valid token stays
    clock[0] = START + dt.timedelta(minutes=50 + 61)
    with pytest.raises(StatusError) as err:
        await manager.get_service_account_token("ns", "sa", request())
    assert err.value.message == "failed to fetch token: apiserver down"  # expired, dropped
    api.fail = False
    await manager.get_service_account_token("ns", "sa", request(uid="pod-3"))
    manager.forget_pod("pod-3")
    calls = len(api.calls)
    await manager.get_service_account_token("ns", "sa", request(uid="pod-3"))
    assert len(api.calls) == calls + 1


class TokenHost:
    node_name = "n1"
    node_allocatable_memory = 1 << 30
    image_store = None

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, dict[str, Any]]] = []

    async def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    async def get_service_account_token(self, namespace: str, name: str,
                                        req: dict[str, Any]) -> dict[str, Any]:
        self.asked.append((namespace, name, req))
        return {"status": {"token": "the-token"}}


async def test_projected_service_account_token_source() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
           "spec": {"serviceAccountName": "builder"}}
    volume = {"name": "v", "projected": {"defaultMode": 0o600, "sources": [
        {"serviceAccountToken": {"path": "tok", "audience": "vault",
                                 "expirationSeconds": 900}}]}}
    host = TokenHost()
    payload = await ProjectedPlugin().collect(pod, volume, host)
    assert payload["tok"].data == b"the-token" and payload["tok"].mode == 0o600
    assert host.asked == [("ns", "builder", {"spec": {
        "audiences": ["vault"], "expirationSeconds": 900,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"}}})]
