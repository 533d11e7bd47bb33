"""A kubelet on the fake runtime against an in-process apiserver (sqlite in a tmp dir), for
fast tests of the agent: `async with running_kubelet(tmp_path) as h: ...`.

`Harness` gives the API client (`h.api`), the kubelet (`h.kubelet`), its fake runtime
(`h.runtime`), helpers to create bound pods and wait for what the API shows, and `restart()`
(a new kubelet and a new fake runtime on the same root dir, as after a crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestServer

from ephemera.api.errors import StatusError
from ephemera.apiserver.app import ApiserverConfig, create_app
from ephemera.client import ApiClient, ClientConfig, resource_path
from ephemera.kubelet.agent import Kubelet, KubeletConfig
from ephemera.kubelet.backoff import BackOffPolicy
from ephemera.kubelet.images import ImageStore
from ephemera.kubelet.runtime.fake import FakeRuntime
from ephemera.kubelet.stats.loopimage import PodImages
from ephemera.kubelet.volumes import mounts
from ephemera.kubelet.workerdeps import WorkerSettings
from ephemera.store import open_store

NODE = "fake-node"
FAST = WorkerSettings(backoff=BackOffPolicy(0.3, 1.2), image_backoff=BackOffPolicy(0.3, 1.2),
                      mount_timeout=1.0, mount_wait_slice=0.2, resync_period=0.5,
                      relist_period=0.1, retry_delay=0.2, minimum_grace_period=0.0)

_BASE_IMAGES: dict[str, Path] = {}


def pod(name: str, *, argv: list[str] | None = None, node: str = NODE,
        image: str = "busybox", **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": image}
    if argv is not None:
        container["command"] = argv
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                            "spec": {"containers": [container], "nodeName": node, **spec}}
    return body


def container_status(p: dict[str, Any], name: str = "c") -> dict[str, Any]:
    """The status of container `name` in Pod `p` (it must be reported)."""
    found: dict[str, Any] = next(
        s for s in p["status"].get("containerStatuses") or [] if s["name"] == name)
    return found


@dataclass
class Harness:
    root: Path
    api: ApiClient
    kubelet: Kubelet
    runtime: FakeRuntime
    settings: WorkerSettings
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    async def create(self, body: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
        return await self.api.create(resource_path("pods", namespace), body)

    async def get(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        try:
            return await self.api.get(resource_path("pods", namespace, name))
        except StatusError as err:
            if err.code == 404:
                return None
            raise

    async def wait_pod(self, name: str, check: Callable[[dict[str, Any]], bool],
                       timeout: float = 10.0, namespace: str = "default") -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout
        last: dict[str, Any] | None = None
        while True:
            last = await self.get(name, namespace)
            if last is not None and check(last):
                return last
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"pod {name} never matched; last: {last}")
            await asyncio.sleep(0.05)

    async def wait_gone(self, name: str, timeout: float = 10.0,
                        namespace: str = "default") -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while await self.get(name, namespace) is not None:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"pod {name} was not deleted")
            await asyncio.sleep(0.05)

    async def events(self, name: str, namespace: str = "default") -> list[dict[str, Any]]:
        listed = await self.api.list(resource_path("events", namespace),
                                     field_selector=f"involvedObject.name={name}")
        return list(listed["items"])

    async def wait_event(self, name: str, check: Callable[[dict[str, Any]], bool],
                         timeout: float = 10.0) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            for event in await self.events(name):
                if check(event):
                    return event
            if asyncio.get_running_loop().time() > deadline:
                seen = [(e["reason"], e["message"]) for e in await self.events(name)]
                raise AssertionError(f"no matching event for {name}: {seen}")
            await asyncio.sleep(0.05)

    def start(self) -> None:
        self.stop = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self.kubelet.run(self.stop))

    async def shutdown(self) -> None:
        self.stop.set()
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self.task, 10)
            self.task = None

    async def restart(self) -> None:
        """Stop this kubelet and start a new one (new fake runtime) on the same root."""
        await self.shutdown()
        self.runtime = FakeRuntime(self.root, NODE)
        self.kubelet = _kubelet(self.root, self.api, self.runtime, self.settings)
        self.start()
        await wait_until(lambda: self.kubelet._initial_done)


async def wait_until(check: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition never became true")
        await asyncio.sleep(0.05)


def slowed(obj: object, method: str, seconds: float) -> None:
    """Make the async `method` of `obj` wait `seconds` before it runs (as a real runtime's
    call takes a while), so something else lands meanwhile."""
    real = getattr(obj, method)

    async def slow(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(seconds)
        return await real(*args, **kwargs)

    setattr(obj, method, slow)


async def running_worker(h: Harness, *, sidecar: bool = False) -> dict[str, Any]:
    """Create Pod `w` (container `c` with `dynamicVolumePolicy: RestartContainer` and an
    emptyDir `keep` at /keep; with `sidecar`, a container `side` too) and wait until all its
    containers run; the pod then."""
    body = pod("w", volumes=[{"name": "keep", "emptyDir": {}}])
    main = body["spec"]["containers"][0]
    main["dynamicVolumePolicy"] = {"restartPolicy": "RestartContainer"}
    main["volumeMounts"] = [{"name": "keep", "mountPath": "/keep"}]
    if sidecar:
        body["spec"]["containers"].append({"name": "side", "image": "busybox"})
    await h.create(body)
    return await h.wait_pod("w", lambda p: p["status"].get("phase") == "Running" and all(
        "running" in s["state"] for s in p["status"]["containerStatuses"]))


def _kubelet(root: Path, api: ApiClient, runtime: FakeRuntime,
             settings: WorkerSettings) -> Kubelet:
    config = KubeletConfig(node_name=NODE, root_dir=root, port=0, settings=settings,
                           node_status_interval=0.5, lease_renew_interval=0.5,
                           housekeeping_interval=0.3, register_retry_interval=0.1)
    return Kubelet(config, api, runtime, ImageStore(root))


@contextlib.asynccontextmanager
async def running_kubelet(tmp_path: Path, settings: WorkerSettings = FAST
                          ) -> AsyncIterator[Harness]:
    store = open_store("sqlite", data_dir=tmp_path / "data")
    app = create_app(store, ApiserverConfig(watch_bookmark_interval=0.2,
                                            namespace_retry_interval=0.05,
                                            kubelet_scheme="http"))
    server = TestServer(app)
    await server.start_server()
    root = tmp_path / "kubelet"
    try:
        url = str(server.make_url("")).rstrip("/")
        async with ApiClient(ClientConfig(server=url), user_agent="kubelet-test") as api:
            runtime = FakeRuntime(root, NODE)
            harness = Harness(root, api, _kubelet(root, api, runtime, settings), runtime,
                              settings)
            harness.start()
            await wait_until(lambda: harness.kubelet._initial_done)
            try:
                yield harness
            finally:
                await harness.shutdown()
    finally:
        await server.close()
        await store.close()


def du(path: Path, *args: str) -> int:
    """`du -s -x ARGS PATH`'s first number (blocks, bytes with `-B1`, inodes with `--inodes`)."""
    out = subprocess.run(["du", "-s", "-x", *args, str(path)], check=True,
                         capture_output=True, text=True).stdout
    return int(out.split()[0])


def write(path: Path, size: int) -> None:
    """A file of `size` bytes at `path` (parents made), synced to disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"x" * size)
        f.flush()
        os.fsync(f.fileno())


def log_dir(root: Path, p: dict[str, Any]) -> Path:
    """Pod `p`'s log directory under the kubelet root `root`."""
    md = p["metadata"]
    return root / "logs" / "pods" / f"{md['namespace']}_{md['name']}_{md['uid']}"


def release_images(root: Path) -> None:
    """Never leave a pod image mounted (nor what is mounted inside it) or its loop device
    attached, whatever the test did."""
    images = PodImages(root)
    images.adopt()
    for uid in images.image_uids():
        mounts.unmount_all_under(images.mount_point(uid))
    images.release_orphans(set())
