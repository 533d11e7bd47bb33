"""Node shutdown: what stopping the node does to its pods (`ephemera up` stopping, or
`ephemera kubelet --stop-pods-on-exit`), modelled on a node reboot.

A reboot ends every process and every mount and keeps the disk. So `shut_down_node`:

1. stops every running container (SIGTERM, then SIGKILL after `grace` seconds; all at once,
   as upstream's graceful node shutdown does within its grace period);
2. removes the containers and the pod sandboxes from the runtime (their namespaces, their
   `/dev/shm`, their writable layers, their pod network: CNI DEL), then the pod network's
   bridge: the runtime keeps no state across the shutdown, as a runtime whose state lives
   in `/run` after a reboot;
3. unmounts everything under `<root>/pods/`, deepest first: memory-backed volumes (emptyDir
   `medium: Memory`, secret, projected, downwardAPI tmpfs), image volumes and, with the
   loop-image accounting, the pod's image itself.

What stays: the pod directories with disk-backed emptyDirs and their contents, the loop
images' files, the container logs (`<root>/logs/pods/...`), the allocation checkpoint and,
in the API, the pods bound to the node. A kubelet started later on the same root finds the
pods bound to it, re-admits them from the checkpoint (dynamic volumes and containers
included), mounts their volumes again (memory-backed ones empty, disk ones as they were) and
starts their containers in new sandboxes; each container's `restartCount` goes on from its
log directory, as upstream's kubelet counts after a reboot (`calcRestartCountByLogDir`,
`ephemera.kubelet.podutil.restart_count_from_log_dir`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from ephemera.kubelet.runtime.base import ContainerState, RuntimeError_, RuntimeService
from ephemera.kubelet.volumes import mounts

__all__ = ["shut_down_node"]

log = logging.getLogger(__name__)


async def shut_down_node(runtime: RuntimeService, root_dir: Path, grace: float) -> None:
    """Stop the node's pods as a reboot does (see the module docstring). Errors are logged:
    a shutdown goes as far as it can."""
    try:
        containers = await runtime.list_containers()
        results = await asyncio.gather(
            *(runtime.stop_container(c.id, grace) for c in containers
              if c.state == ContainerState.RUNNING), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                log.warning("node shutdown: stopping a container: %s", result)
        for sandbox in await runtime.list_pod_sandboxes():
            with contextlib.suppress(RuntimeError_):
                await runtime.remove_pod_sandbox(sandbox.id)
        for container in await runtime.list_containers():  # any left without a sandbox
            with contextlib.suppress(RuntimeError_):
                await runtime.remove_container(container.id)
        await runtime.remove_pod_network()  # the bridge; kept while a sandbox holds on
    except RuntimeError_ as err:
        log.warning("node shutdown: %s", err)
    try:
        await asyncio.to_thread(mounts.unmount_all_under, root_dir / "pods")
    except OSError as err:
        log.warning("node shutdown: unmounting the pods' volumes: %s", err)
