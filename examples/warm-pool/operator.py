"""The warm-pool operator: WarmPools keep ready pods of a template; a Claim binds one of them
and has its Secret (and ConfigMaps) swapped in live through `pods/NAME/dynamic`.

Run: `kopf run --namespace NS examples/warm-pool/operator.py` (or `--all-namespaces`) with
KUBECONFIG set. kopf drives the handlers (watches, retries, the Claim finalizer); the calls the
operator makes itself go through `ephemera.client.ApiClient` (see README.md for why).

The state lives in the cluster, so a restarted operator carries on where it stopped:
- a pool pod is free until it carries the label `warmpool.ephemera.dev/claim=<claim uid>`;
  that label is set with the pod's resourceVersion as a precondition, so two binds can never
  take the same pod (the loser gets 409 and tries the next pod);
- only then are the claim's volumes added (`pods/NAME/dynamic`, containers with
  `dynamicVolumePolicy.restartPolicy: NotRequired`: mounted into the running containers);
- a released pod (Recycle) gets its claim volumes removed and is labelled free again only
  once its containers report the mounts gone and `status.volumeStatuses` no longer lists
  them (their teardown finished, so the names can be added again); with Replace it is
  deleted: no pod ever serves a second claim with the first one's secret;
- a pod labelled for a claim that no longer exists (the operator died between the label and
  the delete handler) is released by the pool's reconcile.
"""

from __future__ import annotations

import asyncio
import copy
import os
import sys
import time
from typing import Any

import kopf

from ephemera.api.errors import StatusError
from ephemera.client import ApiClient
from ephemera.client.api import resource_path
from ephemera.client.kubeconfig import load_kubeconfig

GROUP, VERSION = "warmpool.ephemera.dev", "v1alpha1"
POOL_LABEL = f"{GROUP}/pool"
CLAIM_LABEL = f"{GROUP}/claim"
SECRET_VOLUME = "claim-secret"
CONFIGMAP_VOLUME = "claim-configmap-{}"
NOT_REQUIRED = {"restartPolicy": "NotRequired"}
ACTUATION_TIMEOUT = 60.0
POLL = 0.05

# Test hook (see README.md, "Test hook"): WARM_POOL_PAUSE_AT=STEP makes the operator stop at
# that named step of a bind or a release, say so on stderr and wait there until it is killed.
PAUSE_AT = os.environ.get("WARM_POOL_PAUSE_AT", "")
STEPS = ("labelled", "swapped", "unswapped")
if PAUSE_AT not in ("", *STEPS):
    raise SystemExit(f"WARM_POOL_PAUSE_AT={PAUSE_AT}: not one of {', '.join(STEPS)}")

_api: ApiClient | None = None


async def _step(step: str, claim: str) -> None:
    """A named step of a bind or a release: where the test hook pauses."""
    if step == PAUSE_AT:
        print(f"warm-pool test hook: paused at {step} for claim {claim}", file=sys.stderr,
              flush=True)
        await asyncio.Event().wait()


def api() -> ApiClient:
    assert _api is not None, "the operator's client is made at startup"
    return _api


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    global _api
    settings.posting.level = 20  # INFO: bind and release events
    settings.watching.server_timeout = 60
    settings.watching.client_timeout = 70
    settings.batching.worker_limit = 32
    _api = ApiClient(load_kubeconfig(), user_agent="warm-pool-operator")


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    if _api is not None:
        await _api.close()


# --- pods ----------------------------------------------------------------------------------


def _pods_path(namespace: str, name: str | None = None, sub: str | None = None) -> str:
    return resource_path("pods", namespace, name, sub)


def _labels(pod: dict[str, Any]) -> dict[str, str]:
    return dict((pod.get("metadata") or {}).get("labels") or {})


def _ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    containers = status.get("containerStatuses") or []
    wanted = len((pod.get("spec") or {}).get("containers") or [])
    return len(containers) == wanted and all("running" in (c.get("state") or {})
                                              for c in containers)


async def _pool_pods(namespace: str, pool: str) -> list[dict[str, Any]]:
    listed = await api().list(_pods_path(namespace), label_selector=f"{POOL_LABEL}={pool}")
    return [p for p in listed.get("items") or []
            if not (p.get("metadata") or {}).get("deletionTimestamp")]


def _claim_volumes(claim: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The volumes and mounts a claim adds to every container of its pod."""
    spec = claim.get("spec") or {}
    base = str(spec.get("mountPath") or "/var/run/claim").rstrip("/")
    volumes = [{"name": SECRET_VOLUME, "secret": {"secretName": spec["secretName"]}}]
    mounts = [{"name": SECRET_VOLUME, "mountPath": f"{base}/secret", "readOnly": True}]
    for i, name in enumerate(spec.get("configMapNames") or []):
        volumes.append({"name": CONFIGMAP_VOLUME.format(i), "configMap": {"name": name}})
        mounts.append({"name": CONFIGMAP_VOLUME.format(i),
                       "mountPath": f"{base}/configmaps/{name}", "readOnly": True})
    return volumes, mounts


def _is_claim_volume(name: str) -> bool:
    return name == SECRET_VOLUME or name.startswith(CONFIGMAP_VOLUME.format(""))


def _reported_mounts(pod: dict[str, Any]) -> set[str]:
    """The mount paths of claim volumes every running container reports as actuated."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    if not statuses:
        return set()
    per_container = [{m.get("mountPath") for m in s.get("volumeMounts") or []
                      if _is_claim_volume(str(m.get("name", "")))} for s in statuses]
    return set.intersection(*per_container) if per_container else set()


async def _set_claim_volumes(namespace: str, name: str,
                             claim: dict[str, Any] | None) -> set[str]:
    """Put the pod's claim volumes to `claim`'s (None: none) through `pods/NAME/dynamic`;
    the mount paths the containers must then report."""
    volumes, mounts = _claim_volumes(claim) if claim is not None else ([], [])
    while True:
        pod = await api().get(_pods_path(namespace, name, "dynamic"))
        spec = pod["spec"]
        new = copy.deepcopy(pod)
        nspec = new["spec"]
        nspec["volumes"] = [v for v in spec.get("volumes") or []
                            if not _is_claim_volume(str(v.get("name", "")))] + volumes
        for container in nspec["containers"]:
            container["volumeMounts"] = [
                m for m in container.get("volumeMounts") or []
                if not _is_claim_volume(str(m.get("name", "")))] + copy.deepcopy(mounts)
            container["dynamicVolumePolicy"] = dict(NOT_REQUIRED)
        if new == pod:
            break
        try:
            await api().update(_pods_path(namespace, name, "dynamic"), new)
            break
        except StatusError as err:
            if err.code != 409:
                raise
    return {m["mountPath"] for m in mounts}


def _torn_down(pod: dict[str, Any]) -> bool:
    """No claim volume is still listed in `status.volumeStatuses`: the kubelet finished tearing
    them down, and a volume of the same name can be added again."""
    statuses = (pod.get("status") or {}).get("volumeStatuses") or []
    return not any(_is_claim_volume(str(v.get("name", ""))) for v in statuses)


async def _wait_actuated(namespace: str, name: str, wanted: set[str]) -> dict[str, Any]:
    """Wait until the pod's containers report exactly `wanted` as their claim mounts (and, for
    a release, the removed volumes' teardown finished)."""
    deadline = time.monotonic() + ACTUATION_TIMEOUT
    while True:
        pod = await api().get(_pods_path(namespace, name))
        if _reported_mounts(pod) == wanted and (wanted or _torn_down(pod)):
            return pod
        if time.monotonic() > deadline:
            raise kopf.TemporaryError(f"pod {name}: the claim volumes are not actuated yet",
                                      delay=1)
        await asyncio.sleep(POLL)


async def _label(namespace: str, pod: dict[str, Any], claim_uid: str | None) -> bool:
    """Set (or with None remove) the pod's claim label, if the pod is still as read; False
    when another writer changed it first."""
    md = pod["metadata"]
    patch = {"metadata": {"resourceVersion": md["resourceVersion"],
                          "labels": {CLAIM_LABEL: claim_uid}}}
    try:
        await api().patch(_pods_path(namespace, md["name"]), patch, patch_type="merge")
    except StatusError as err:
        if err.code in (404, 409):
            return False
        raise
    return True


async def _release(namespace: str, pod: dict[str, Any], policy: str,
                   logger: Any, claim: str = "") -> None:
    """Swap a bound pod's claim volumes out and return it to the pool, or delete it."""
    name = pod["metadata"]["name"]
    if policy == "Replace":
        try:
            await api().delete(_pods_path(namespace, name), {"gracePeriodSeconds": 1})
        except StatusError as err:
            if err.code != 404:
                raise
        logger.info(f"released pod {name}: deleted")
        return
    await _set_claim_volumes(namespace, name, None)
    fresh = await _wait_actuated(namespace, name, set())
    await _step("unswapped", claim)
    while not await _label(namespace, fresh, None):
        fresh = await api().get(_pods_path(namespace, name))
    logger.info(f"released pod {name}: back in the pool")


# --- pools ---------------------------------------------------------------------------------


def _pool_pod(pool: dict[str, Any]) -> dict[str, Any]:
    md, spec = pool["metadata"], pool["spec"]
    template = copy.deepcopy(spec.get("template") or {})
    labels = {**((template.get("metadata") or {}).get("labels") or {}),
              POOL_LABEL: md["name"]}
    pod_spec = template.get("spec") or {}
    for container in pod_spec.get("containers") or []:
        container["dynamicVolumePolicy"] = dict(NOT_REQUIRED)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": f"{md['name']}-", "labels": labels,
                         "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}",
                                              "kind": "WarmPool", "name": md["name"],
                                              "uid": md["uid"], "controller": True}]},
            "spec": pod_spec}


@kopf.timer(GROUP, VERSION, "warmpools", interval=0.5, initial_delay=0)
async def reconcile_pool(body: Any, namespace: str | None, name: str, logger: Any,
                         **_: Any) -> None:
    assert namespace is not None, "WarmPools are namespaced"
    pool = dict(body)
    spec = pool.get("spec") or {}
    pods = await _pool_pods(namespace, name)
    claims = await api().list(resource_path("claims", namespace, group=GROUP,
                                            version=VERSION))
    live = {c["metadata"]["uid"] for c in claims.get("items") or []}
    free = [p for p in pods if not _labels(p).get(CLAIM_LABEL)]
    bound = [p for p in pods if _labels(p).get(CLAIM_LABEL)]
    for pod in bound:
        if _labels(pod)[CLAIM_LABEL] not in live:  # a claim deleted while we were away
            await _release(namespace, pod, str(spec.get("releasePolicy") or "Recycle"),
                           logger, _labels(pod)[CLAIM_LABEL])
    wanted = int(spec.get("replicas") or 0)
    for _missing in range(wanted - len(free)):
        await api().create(_pods_path(namespace), _pool_pod(pool))
    if len(free) > wanted:
        # as a ReplicaSet scales down: the not-ready first, then the youngest
        youngest_first = sorted(free, key=lambda p: p["metadata"]["creationTimestamp"],
                                reverse=True)
        extra = sorted(youngest_first, key=_ready)[:len(free) - wanted]
        for pod in extra:
            md = pod["metadata"]
            try:  # only as listed: a bind that took it meanwhile wins (409)
                await api().delete(_pods_path(namespace, md["name"]), {
                    "gracePeriodSeconds": 1,
                    "preconditions": {"resourceVersion": md["resourceVersion"]}})
            except StatusError as err:
                if err.code not in (404, 409):
                    raise
    status = {"available": sum(1 for p in free if _ready(p)), "bound": len(bound)}
    if (pool.get("status") or {}).get("available") != status["available"] or \
            (pool.get("status") or {}).get("bound") != status["bound"]:
        await api().patch(resource_path("warmpools", namespace, name, "status", group=GROUP,
                                        version=VERSION), {"status": status},
                          patch_type="merge")


# --- claims --------------------------------------------------------------------------------


def _claim_path(namespace: str, name: str, sub: str | None = None) -> str:
    return resource_path("claims", namespace, name, sub, group=GROUP, version=VERSION)


async def _claim_status(namespace: str, name: str, status: dict[str, Any]) -> None:
    await api().patch(_claim_path(namespace, name, "status"), {"status": status},
                      patch_type="merge")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@kopf.on.create(GROUP, VERSION, "claims")
async def bind(body: Any, namespace: str | None, name: str, uid: str, logger: Any,
               runtime: Any, **_: Any) -> None:
    """Bind the claim to a ready pod of its pool and swap its volumes in; queued (retried)
    while the pool has none. The time reported runs from the first attempt (kopf's
    `runtime`), so a queued claim's wait counts."""
    assert namespace is not None, "Claims are namespaced"
    claim = dict(body)
    status = claim.get("status") or {}
    if status.get("podName") or (claim.get("metadata") or {}).get("deletionTimestamp"):
        return
    started = time.monotonic()
    pool = claim["spec"]["poolName"]
    pods = await _pool_pods(namespace, pool)
    pod = next((p for p in pods if _labels(p).get(CLAIM_LABEL) == uid), None)
    if pod is None:  # not bound before a restart: take a free ready pod
        for candidate in pods:
            if not _labels(candidate).get(CLAIM_LABEL) and _ready(candidate) and \
                    await _label(namespace, candidate, uid):
                pod = candidate
                break
    if pod is None:
        if status.get("phase") != "Pending":
            await _claim_status(namespace, name, {
                "phase": "Pending",
                "conditions": [{"type": "Ready", "status": "False",
                                "reason": "NoPodAvailable", "lastTransitionTime": _now(),
                                "message": f"no ready pod in pool {pool}; queued"}]})
        raise kopf.TemporaryError(f"no ready pod in pool {pool}", delay=0.2)
    pod_name = pod["metadata"]["name"]
    await _step("labelled", name)
    wanted = await _set_claim_volumes(namespace, pod_name, claim)
    await _step("swapped", name)
    live = await _wait_actuated(namespace, pod_name, wanted)
    took = runtime.total_seconds() + (time.monotonic() - started)
    await _claim_status(namespace, name, {
        "phase": "Bound", "podName": pod_name,
        "podIP": (live.get("status") or {}).get("podIP"),
        "bindMilliseconds": round(took * 1000),
        "conditions": [{"type": "Ready", "status": "True", "reason": "Bound",
                        "lastTransitionTime": _now(),
                        "message": f"pod {pod_name} serves this claim"}]})
    kopf.info(body, reason="Bound", message=f"pod {pod_name} in {took * 1000:.0f} ms")


@kopf.on.delete(GROUP, VERSION, "claims")
async def release(body: Any, namespace: str | None, name: str, uid: str, logger: Any,
                  **_: Any) -> None:
    assert namespace is not None, "Claims are namespaced"
    pool_name = body["spec"]["poolName"]
    try:
        pool = await api().get(resource_path("warmpools", namespace, pool_name, group=GROUP,
                                             version=VERSION))
        policy = str((pool.get("spec") or {}).get("releasePolicy") or "Recycle")
    except StatusError as err:
        if err.code != 404:
            raise
        policy = "Replace"  # no pool to return the pod to
    for pod in await _pool_pods(namespace, pool_name):
        if _labels(pod).get(CLAIM_LABEL) == uid:
            await _release(namespace, pod, policy, logger, name)
