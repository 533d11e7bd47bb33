"""Image GC (the eviction manager's node-level reclaim) never deletes the image of an image
volume still mounted: a volume removed from a running pod (KEP-6395 `/dynamic`) whose
teardown waits for its in-use check keeps its image (its layers are the overlay's lower
dirs), on a kubelet on the fake runtime with a real image store and real mounts. Once torn
down, the image goes at the next GC."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from images_testing import entry, tar_of, write_layout
from kubelet_harness import pod, running_kubelet, wait_until

from ephemera.client import resource_path
from ephemera.kubelet.eviction.reclaim import UNUSED_IMAGES
from ephemera.kubelet.volumes import mounts

REF = "example.com/volume-data:1"


def _tags(store: Any) -> list[str]:
    return sorted(t for image in store.list() for t in image.repo_tags)


async def test_image_gc_keeps_the_image_of_a_volume_whose_teardown_waits(
        tmp_path: Path) -> None:
    try:
        async with running_kubelet(tmp_path) as h:
            write_layout(tmp_path / "layout", [tar_of([entry("lower", data=b"first")]),
                                               tar_of([entry("upper", data=b"second")])])
            h.kubelet.image_store.import_archive(tmp_path / "layout", name=REF)
            in_use = True

            async def in_use_check(uid: str, volume_name: str) -> bool:
                return in_use

            h.kubelet.volumes.set_in_use_checker(in_use_check)
            body = pod("w", argv=["sleep", "3600"],
                       volumes=[{"name": "data", "image": {"reference": REF}}])
            container = body["spec"]["containers"][0]
            container["dynamicVolumePolicy"] = {"restartPolicy": "RestartContainer"}
            container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
            created = await h.create(body)
            uid = created["metadata"]["uid"]
            host_dir = h.root / "pods" / uid / "volumes" / "kubernetes.io~image" / "data"
            await h.wait_pod("w", lambda p: p["status"].get("phase") == "Running")
            await wait_until(lambda: mounts.is_mountpoint(host_dir))
            # the volume leaves the pod; its teardown waits for the in-use check
            path = resource_path("pods", "default", "w") + "/dynamic"
            current = await h.api.get(path)
            current["spec"]["volumes"] = []
            current["spec"]["containers"][0]["volumeMounts"] = []
            await h.api.update(path, current)
            await wait_until(lambda: h.kubelet.allocation.get(uid)["spec"]  # type: ignore[index]
                             .get("volumes") in (None, []))
            assert mounts.is_mountpoint(host_dir)

            await h.kubelet.eviction_manager.reclaim_node_level_resources([UNUSED_IMAGES],
                                                         h.kubelet.known_pods() or [])
            assert REF in _tags(h.kubelet.image_store)
            assert (host_dir / "lower").read_bytes() == b"first"
            assert (host_dir / "upper").read_bytes() == b"second"

            in_use = False  # torn down now; a GC after the teardown removes the image
            await wait_until(lambda: not host_dir.exists())

            async def collected() -> bool:
                # the directory goes first, then the volume manager forgets the mount: a GC
                # run in between still keeps the image
                await h.kubelet.eviction_manager.reclaim_node_level_resources(
                    [UNUSED_IMAGES], h.kubelet.known_pods() or [])
                return REF not in _tags(h.kubelet.image_store)

            await wait_until(collected, timeout=30)
    finally:
        mounts.unmount_all_under(tmp_path)
