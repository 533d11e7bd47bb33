"""A running container whose spec names another image (`kubectl set image` on a pod) is
stopped and started again from it, as upstream's `containerChanged` restarts it (its hash
covers a container's name and image only), whatever the restart policy; until then the
status shows the image that runs. An image the node does not have is no reason to refuse the
update: the container is stopped for it all the same and goes `ErrImagePull` /
`ImagePullBackOff`, as upstream's. A real `Kubelet` on the fake runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubelet_harness import container_status, pod, running_kubelet

from ephemera.client import resource_path

POD = resource_path("pods", "default", "w")


def _running_from(image: str, restarts: int) -> Any:
    def check(p: dict[str, Any]) -> bool:
        statuses = p["status"].get("containerStatuses") or []
        if not statuses or "running" not in container_status(p)["state"]:
            return False
        status = container_status(p)
        return bool(status["image"] == image and status["restartCount"] == restarts)
    return check


async def test_a_new_image_restarts_the_running_container(tmp_path: Path) -> None:
    async with running_kubelet(tmp_path) as h:
        await h.create(pod("w", restartPolicy="Never"))
        first = await h.wait_pod("w", _running_from("busybox", 0))
        first_id = container_status(first)["containerID"]

        current = await h.api.get(POD)
        # the same image under another name: another spec, as upstream's hash sees it
        current["spec"]["containers"][0]["image"] = "docker.io/library/busybox:latest"
        await h.api.update(POD, current)

        after = await h.wait_pod("w", _running_from("docker.io/library/busybox:latest", 1),
                                 timeout=15)
        assert container_status(after)["containerID"] != first_id
        assert container_status(after)["lastState"]["terminated"]["containerID"] == first_id
        killing = [e["message"] for e in await h.events("w") if e["reason"] == "Killing"]
        assert killing == ["Container c definition changed, will be restarted"]
        failures = [e["message"] for e in await h.events("w")
                    if e["reason"] in ("Failed", "BackOff")]
        assert failures == []


async def test_a_new_image_the_node_does_not_have_is_pulled_and_backs_off(
        tmp_path: Path) -> None:
    """The update is allocated (no `FailedAllocation`) and actuated as upstream's: the
    container is stopped for it and its start goes `ErrImagePull` / `ImagePullBackOff`."""
    async with running_kubelet(tmp_path) as h:
        await h.create(pod("w"))
        first = await h.wait_pod("w", _running_from("busybox", 0))
        first_id = container_status(first)["containerID"]
        current = await h.api.get(POD)
        current["spec"]["containers"][0]["image"] = "registry.example/absent:1"
        await h.api.update(POD, current)
        backing_off = await h.wait_pod("w", lambda p: (
            container_status(p)["state"].get("waiting") or {}).get(
                "reason") == "ImagePullBackOff", timeout=15)
        assert container_status(backing_off)["lastState"]["terminated"]["containerID"] == \
            first_id
        reasons = [e["reason"] for e in await h.events("w")]
        assert "FailedAllocation" not in reasons
        assert "Killing" in reasons
