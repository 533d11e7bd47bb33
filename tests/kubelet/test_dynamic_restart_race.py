"""A volume added to a `RestartContainer` container and removed again while the container
stops for the first change (within its grace period): the kubelet starts it once, with the
mounts the allocated spec has by then, without a failed start or a crash back-off (KEP-6395:
one restart using the latest allocated spec). A real `Kubelet` on the fake runtime, whose
`ignore-term` container takes its whole grace period to stop."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kubelet_harness import container_status, pod, running_kubelet

from ephemera.client import resource_path

DYNAMIC = resource_path("pods", "default", "w") + "/dynamic"


def _running(p: dict[str, Any]) -> bool:
    return bool(p["status"].get("containerStatuses")) and "running" in container_status(p)["state"]


async def test_a_volume_removed_while_its_restart_stops_the_container(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        body = pod("w", argv=["ignore-term"], terminationGracePeriodSeconds=2,
                   volumes=[{"name": "keep", "emptyDir": {}}])
        main = body["spec"]["containers"][0]
        main["dynamicVolumePolicy"] = {"restartPolicy": "RestartContainer"}
        main["volumeMounts"] = [{"name": "keep", "mountPath": "/keep"}]
        await h.create(body)
        first = await h.wait_pod("w", _running)
        started = container_status(first)["state"]["running"]["startedAt"]

        current = await h.api.get(DYNAMIC)
        current["spec"]["volumes"].append({"name": "v2", "emptyDir": {}})
        current["spec"]["containers"][0]["volumeMounts"].append(
            {"name": "v2", "mountPath": "/v2"})
        await h.api.update(DYNAMIC, current)
        # The container is stopping (2 s of grace); the new volume is set up meanwhile.
        await h.wait_pod("w", lambda p: any(v["name"] == "v2" and
                                            v["hostPhase"] == "HostMounted"
                                            for v in p["status"].get("volumeStatuses") or []))
        await asyncio.sleep(0.3)
        current = await h.api.get(DYNAMIC)
        current["spec"]["volumes"] = [v for v in current["spec"]["volumes"] if v["name"] != "v2"]
        current["spec"]["containers"][0]["volumeMounts"] = [{"name": "keep",
                                                             "mountPath": "/keep"}]
        await h.api.update(DYNAMIC, current)

        after = await h.wait_pod("w", lambda p: _running(p) and container_status(p)["state"]
                                 ["running"]["startedAt"] != started and
                                 not any(v["name"] == "v2" for v in
                                         p["status"].get("volumeStatuses") or []), timeout=15)
        status = container_status(after)
        assert [m["name"] for m in status.get("volumeMounts") or []] == ["keep"]
        assert status["restartCount"] == 1
        failures = [e["message"] for e in await h.events("w")
                    if e["reason"] in ("Failed", "BackOff")]
        assert failures == []
