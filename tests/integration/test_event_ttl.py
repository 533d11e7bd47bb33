"""`--event-ttl`: Events expire as upstream's event storage makes them (a TTL on create and
on every update); no other kind does."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from apiserver_fixtures import Api, configmap, eventually, serve

from ephemera.cli.main import build_parser
from ephemera.store import open_store


def event(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"kind": "ConfigMap", "namespace": "default", "name": "cm"},
            "reason": "Tested", "message": "an event", "type": "Normal", "count": 1}


async def test_events_expire_after_the_event_ttl_and_other_objects_stay(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path)
    try:
        async for api in serve(store, event_ttl=1):
            status, _ = await api.post("/api/v1/namespaces/default/configmaps", configmap("cm"))
            assert status == 201
            status, created = await api.post("/api/v1/namespaces/default/events", event("e1"))
            assert status == 201
            rv = created["metadata"]["resourceVersion"]
            watch = await api.client.get(
                "/api/v1/namespaces/default/events",
                params={"watch": "true", "resourceVersion": rv})
            path = "/api/v1/namespaces/default/events/e1"

            async def gone(api: Api = api, path: str = path) -> bool:
                status, _ = await api.get(path)
                return status == 404

            await eventually(gone, timeout=15)
            line = await watch.content.readline()
            assert b'"type":"DELETED"' in line and b'"name":"e1"' in line
            watch.close()
            status, _ = await api.get("/api/v1/namespaces/default/configmaps/cm")
            assert status == 200
    finally:
        await store.close()


def test_the_event_ttl_flag_takes_a_go_duration_in_whole_seconds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def parse(argv: list[str]) -> argparse.Namespace:
        return build_parser().parse_args([*argv, "--data-dir", str(tmp_path)])

    assert parse(["apiserver"]).event_ttl == 3600  # upstream's 1h
    assert parse(["apiserver", "--event-ttl", "30m"]).event_ttl == 1800
    assert parse(["apiserver", "--event-ttl", "1.5s"]).event_ttl == 1
    assert parse(["apiserver", "--event-ttl", "0"]).event_ttl == 0
    with pytest.raises(SystemExit):
        parse(["apiserver", "--event-ttl=-1s"])
    assert "a duration of 0 or more" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse(["apiserver", "--event-ttl", "1d"])
    assert 'time: unknown unit "d" in duration "1d"' in capsys.readouterr().err
