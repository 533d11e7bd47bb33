"""Helpers for the runtime tests: build a busybox image layer by hand (a directory with
Debian busybox-static's /bin/busybox and a symlink per applet; the image store is not used),
pod and container configs, and a complete teardown of a runtime root."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from pathlib import Path

from ephemera.kubelet.runtime.base import (
    ContainerConfig,
    ContainerState,
    ContainerStatus,
    Mount,
    RuntimeService,
    SandboxConfig,
)
from ephemera.kubelet.runtime.oci import OciRuntime, mounts_under

BUSYBOX = "/bin/busybox"


def build_busybox_layer(layer: Path) -> Path:
    """An unpacked image layer: /bin/busybox plus a symlink per applet, /etc/passwd."""
    (layer / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, layer / "bin" / "busybox")
    applets = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True,
                             check=True).stdout.split()
    for applet in applets:
        if applet != "busybox":
            (layer / "bin" / applet).symlink_to("busybox")
    for name in ("etc", "tmp", "proc", "sys", "dev", "root", "var"):
        (layer / name).mkdir()
    (layer / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (layer / "etc" / "group").write_text("root:x:0:\n")
    return layer


def sandbox_config(name: str = "pod", host_network: bool = False) -> SandboxConfig:
    return SandboxConfig(pod_uid=str(uuid.uuid4()), namespace="default", name=name,
                         hostname=name, host_network=host_network)


def container_config(layer: Path, name: str, script: str, *, attempt: int = 0,
                     log_path: Path | None = None, mounts: tuple[Mount, ...] = (),
                     stdin: bool = False, tty: bool = False, memory_limit_bytes: int = 0,
                     env: tuple[tuple[str, str], ...] = ()) -> ContainerConfig:
    return ContainerConfig(
        name=name, attempt=attempt, image="busybox:latest", image_id="sha256:" + "0" * 64,
        rootfs_layers=(layer,), argv=("/bin/sh", "-c", script), env=env, log_path=log_path,
        mounts=mounts, stdin=stdin, tty=tty, memory_limit_bytes=memory_limit_bytes)


async def wait_exited(runtime: RuntimeService, container_id: str,
                      timeout: float = 20) -> ContainerStatus:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        status = await runtime.container_status(container_id)
        if status.state == ContainerState.EXITED:
            return status
        assert loop.time() < deadline, f"container still {status.state}: {status}"
        await asyncio.sleep(0.02)


async def wait_for_file_text(path: Path, text: str, timeout: float = 20) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        assert loop.time() < deadline, f"{text!r} never appeared in {path}: {content!r}"
        await asyncio.sleep(0.02)


async def teardown_runtime(runtime: OciRuntime) -> None:
    """Remove everything the runtime holds; a lazy unmount of anything left is a safety net
    (the tests that care assert there is nothing)."""
    try:
        for sandbox in await runtime.list_pod_sandboxes():
            await runtime.remove_pod_sandbox(sandbox.id)
        for container in await runtime.list_containers():
            await runtime.remove_container(container.id)
    finally:
        for point in mounts_under(runtime.root):
            subprocess.run(["umount", "-l", point], check=False)
        await runtime.close()


def host_namespace(kind: str) -> str:
    return os.readlink(f"/proc/self/ns/{kind}")
