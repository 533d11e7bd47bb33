"""Events the kubelet posts, with upstream's reasons and messages (`pkg/kubelet/events`).

`KubeletEvents(api, node_name)` wraps `ephemera.client.EventRecorder` (component `kubelet`,
source host the node name, repeats counted) and adds what the kubelet's events carry that
others' do not: `involvedObject.fieldPath` naming the container (`spec.containers{c1}`,
`spec.initContainers{i1}`), so `kubectl describe pod` shows them as upstream's do. The
constants are the reasons; the helpers build the exact upstream messages. Posting is best
effort: a failure is logged, never raised. Routine Normal events may be deferred until the
kubelet is quiet (`KubeletEvents`), so that they never compete with a sync or a status write.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.client import ApiClient, EventRecorder
from ephemera.client.eventcorrelator import EventCorrelator

__all__ = [
    "BACK_OFF",
    "CREATED",
    "FAILED",
    "FAILED_MOUNT",
    "FAILED_UNMOUNT",
    "KILLING",
    "NORMAL",
    "PULLED",
    "STARTED",
    "STARTING",
    "STARTING_MESSAGE",
    "SUCCESSFUL_ALLOCATION",
    "SUCCESSFUL_MOUNT_VOLUME",
    "SUCCESSFUL_UNMOUNT_VOLUME",
    "WARNING",
    "KubeletEvents",
    "container_field_path",
    "definition_changed_message",
]

NORMAL = "Normal"
WARNING = "Warning"

# Container events (pkg/kubelet/events/event.go).
CREATED = "Created"
STARTED = "Started"
FAILED = "Failed"
KILLING = "Killing"
BACK_OFF = "BackOff"
# Image events.
PULLING = "Pulling"
PULLED = "Pulled"
ERR_IMAGE_NEVER_PULL = "ErrImageNeverPull"
# Pod and volume events.
FAILED_MOUNT = "FailedMount"
FAILED_UNMOUNT = "FailedUnMount"
SUCCESSFUL_MOUNT_VOLUME = "SuccessfulMountVolume"  # `MountVolume.SetUp succeeded for volume "v"`
SUCCESSFUL_UNMOUNT_VOLUME = "SuccessfulUnMountVolume"  # `UnmountVolume.TearDown succeeded ...`
# KEP-6395: a pod change allocated (the Normal counterpart of `FailedAllocation`).
SUCCESSFUL_ALLOCATION = "SuccessfulAllocation"
FAILED_CREATE_POD_SANDBOX = "FailedCreatePodSandBox"
SANDBOX_CHANGED = "SandboxChanged"
OUT_OF_RESOURCE_PREFIX = "OutOf"
# Node events (the node status ones, `NodeReady` and the like, are `ephemera.kubelet.node`'s).
STARTING = "Starting"  # upstream's `BirthCry`, at every kubelet start
STARTING_MESSAGE = "Starting kubelet."


def definition_changed_message(container_name: str) -> str:
    """The `Killing` message of a container restarted because its spec changed (upstream's
    `computePodActions`)."""
    return f"Container {container_name} definition changed, will be restarted"


def container_field_path(container_name: str, *, init: bool = False) -> str:
    """`spec.containers{c1}` or `spec.initContainers{i1}`, as upstream's `GenerateContainerRef`."""
    return f"spec.{'initContainers' if init else 'containers'}{{{container_name}}}"


class _FieldPathRecorder(EventRecorder):
    """An `EventRecorder` whose events may name a field of the object (`fieldPath`)."""

    FIELD_PATH_KEY = "\x00fieldPath"
    ANNOTATIONS_KEY = "\x00annotations"

    def _event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str,
               action: str) -> dict[str, Any]:
        event = super()._event(obj, type_, reason, message, action)
        field_path = obj.get(self.FIELD_PATH_KEY)
        if field_path:
            event["involvedObject"]["fieldPath"] = field_path
        annotations = obj.get(self.ANNOTATIONS_KEY)
        if annotations:  # upstream's AnnotatedEventf
            event["metadata"]["annotations"] = dict(annotations)
        event["reportingInstance"] = self.host
        return event


# How long a deferred event may wait for the kubelet to be quiet (from when it was recorded).
DEFAULT_MAX_DEFER = 1.0


class KubeletEvents:
    """The kubelet's event recorder. Events are posted one at a time, in the order they were
    recorded (as upstream's broadcaster feeds its sink from one queue): a burst of them
    (a container restart makes five) then never crowds out the pod status write that the
    status manager sends meanwhile.

    An event recorded with `deferred=True` (the routine Normal events of a start, a restart
    or a volume change, always posted in the background) first waits until the kubelet is
    quiet (`quiet`: no pod worker in a sync, no pod status waiting to be written), at most
    `max_defer` seconds from when it was recorded: the sync and its status write, which a
    client is waiting for, get the apiserver and the CPUs first. Upstream's recorder is
    asynchronous too (a queue and a sink of its own) and promises no delivery time."""

    def __init__(self, api: ApiClient, node_name: str, *,
                 quiet: Callable[[], Awaitable[None]] | None = None,
                 is_quiet: Callable[[], bool] | None = None,
                 max_defer: float = DEFAULT_MAX_DEFER,
                 correlator: EventCorrelator | None = None,
                 limit: asyncio.Semaphore | None = None) -> None:
        """`limit`: bounds the background posts of `node_soon` (shared by many simulated
        nodes, so that their registration events do not all hit the API at once)."""
        self.node_name = node_name
        self._recorder = _FieldPathRecorder(api, "kubelet", host=node_name,
                                            correlator=correlator)
        self._posting = asyncio.Lock()  # FIFO: one post in flight
        # Node events posted in the background (`node_soon`), and what bounds them.
        self._background: set[asyncio.Task[None]] = set()
        self.limit = limit
        self.quiet = quiet
        self.is_quiet = is_quiet
        self.max_defer = max_defer

    async def _record(self, ref: Mapping[str, Any], type_: str, reason: str,
                      message: str, deferred: bool = False) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_defer
        while True:
            if deferred and self.quiet is not None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(deadline):
                        await self.quiet()
            async with self._posting:
                # Its turn came after others' posts: if a sync began meanwhile, wait again.
                if not deferred or self.is_quiet is None or self.is_quiet() or \
                        loop.time() >= deadline:
                    await self._recorder.record(ref, type_, reason, message)
                    return

    async def pod(self, pod: Mapping[str, Any], type_: str, reason: str, message: str, *,
                  annotations: Mapping[str, str] | None = None, deferred: bool = False) -> None:
        """An event about the pod as a whole (with `annotations` on the Event, as the
        eviction manager's `Evicted` events carry)."""
        ref = _ref(pod)
        if annotations:
            ref[_FieldPathRecorder.ANNOTATIONS_KEY] = dict(annotations)
        await self._record(ref, type_, reason, message, deferred)

    async def container(self, pod: Mapping[str, Any], container_name: str, type_: str,
                        reason: str, message: str, *, init: bool = False,
                        deferred: bool = False) -> None:
        """An event about one container of the pod (`fieldPath` names it)."""
        ref = _ref(pod)
        ref[_FieldPathRecorder.FIELD_PATH_KEY] = container_field_path(container_name, init=init)
        await self._record(ref, type_, reason, message, deferred)

    async def node(self, node: Mapping[str, Any], type_: str, reason: str,
                   message: str) -> None:
        """An event about the node (upstream names the node by its name as the uid)."""
        md = node.get("metadata") or {}
        ref = {"kind": "Node", "apiVersion": "v1",
               "metadata": {"name": md.get("name") or self.node_name,
                            "uid": md.get("name") or self.node_name}}
        await self._record(ref, type_, reason, message)


    def node_soon(self, type_: str, reason: str, message: str) -> None:
        """An event about this node, posted in the background (upstream's recorder is
        asynchronous): the node status code records them without waiting for the post."""
        task = asyncio.get_running_loop().create_task(
            self._node_limited(type_, reason, message), name=f"{self.node_name}-event")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _node_limited(self, type_: str, reason: str, message: str) -> None:
        if self.limit is None:
            await self.node({}, type_, reason, message)
            return
        async with self.limit:
            await self.node({}, type_, reason, message)

    async def close(self) -> None:
        """Stop the background posts still waiting."""
        await cancel_and_wait(*self._background)


def _ref(pod: Mapping[str, Any]) -> dict[str, Any]:
    md = pod.get("metadata") or {}
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": md.get("name"), "namespace": md.get("namespace"),
                         "uid": md.get("uid"), "resourceVersion": md.get("resourceVersion")}}
