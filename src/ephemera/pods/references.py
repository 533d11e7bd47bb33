"""What a pod references, as upstream's `podutil.VisitPodSecretNames` /
`VisitPodConfigmapNames` and the Node authorizer's `Graph.AddPod` visit it:
`imagePullSecrets`; in every container, init container and ephemeral container
`env[].valueFrom.{secretKeyRef,configMapKeyRef}` and `envFrom[].{secretRef,configMapRef}`;
`serviceAccountName`; and per volume its `secret`, `configMap`, `projected` sources,
`persistentVolumeClaim` (an `ephemeral` volume's claim is `<pod>-<volume>`) and the Secrets of
the network volume types. References are `(kind, namespace, name)` with kind one of `SECRET`,
`CONFIGMAP`, `SERVICEACCOUNT`, `PVC`.

KEP-6395 (`pods/dynamic`): `held_volume_names` are the volumes the kubelet still holds (named
in `status.volumeStatuses` or in a container status's `volumeMounts`);
`pod_volume_references` carries the references of a volume that left the spec over for as
long as it is held, from what the caller remembers of the pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SECRET = "secret"
CONFIGMAP = "configmap"
SERVICEACCOUNT = "serviceaccount"
PVC = "persistentvolumeclaim"

# (kind, namespace, name) of an object a pod references.
Ref = tuple[str, str, str]

# Volume types whose `secretRef` (or the named field) names a Secret, as upstream visits them.
_VOLUME_SECRET_REFS: tuple[tuple[str, str], ...] = (
    ("cephfs", "secretRef"), ("cinder", "secretRef"), ("flexVolume", "secretRef"),
    ("rbd", "secretRef"), ("scaleIO", "secretRef"), ("iscsi", "secretRef"),
    ("storageos", "secretRef"), ("csi", "nodePublishSecretRef"),
)
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _name(value: Any, key: str = "name") -> str:
    name = _dict(value).get(key)
    return name if isinstance(name, str) else ""


def volume_references(volume: Mapping[str, Any], pod_name: str, namespace: str
                      ) -> frozenset[Ref]:
    """The objects one `spec.volumes[]` entry references."""
    refs: set[tuple[str, str]] = set()
    if "secret" in volume:
        refs.add((SECRET, _name(volume["secret"], "secretName")))
    if "configMap" in volume:
        refs.add((CONFIGMAP, _name(volume["configMap"])))
    for source in _list(_dict(volume.get("projected")).get("sources")):
        source = _dict(source)
        if "secret" in source:
            refs.add((SECRET, _name(source["secret"])))
        if "configMap" in source:
            refs.add((CONFIGMAP, _name(source["configMap"])))
    if "azureFile" in volume:
        refs.add((SECRET, _name(volume["azureFile"], "secretName")))
    for kind, field in _VOLUME_SECRET_REFS:
        if kind in volume:
            refs.add((SECRET, _name(_dict(volume[kind]).get(field))))
    if "persistentVolumeClaim" in volume:
        refs.add((PVC, _name(volume["persistentVolumeClaim"], "claimName")))
    if "ephemeral" in volume:
        refs.add((PVC, f"{pod_name}-{_name(volume)}"))
    return frozenset((kind, namespace, name) for kind, name in refs if name)


def pod_level_references(pod: Mapping[str, Any]) -> frozenset[Ref]:
    """What a pod references outside its volumes: pull secrets, env, envFrom, its
    ServiceAccount."""
    md = _dict(pod.get("metadata"))
    spec = _dict(pod.get("spec"))
    namespace = str(md.get("namespace") or "")
    refs: set[tuple[str, str]] = set()
    for secret in _list(spec.get("imagePullSecrets")):
        refs.add((SECRET, _name(secret)))
    for field in _CONTAINER_LISTS:
        for container in _list(spec.get(field)):
            container = _dict(container)
            for env in _list(container.get("env")):
                source = _dict(_dict(env).get("valueFrom"))
                if "secretKeyRef" in source:
                    refs.add((SECRET, _name(source["secretKeyRef"])))
                if "configMapKeyRef" in source:
                    refs.add((CONFIGMAP, _name(source["configMapKeyRef"])))
            for env_from in _list(container.get("envFrom")):
                env_from = _dict(env_from)
                if "secretRef" in env_from:
                    refs.add((SECRET, _name(env_from["secretRef"])))
                if "configMapRef" in env_from:
                    refs.add((CONFIGMAP, _name(env_from["configMapRef"])))
    service_account = spec.get("serviceAccountName")
    if isinstance(service_account, str) and service_account:
        refs.add((SERVICEACCOUNT, service_account))
    return frozenset((kind, namespace, name) for kind, name in refs if name)


def held_volume_names(pod: Mapping[str, Any]) -> frozenset[str]:
    """Volumes the kubelet still holds: named in `status.volumeStatuses` or in a container
    status's `volumeMounts`."""
    status = _dict(pod.get("status"))
    names = {_name(entry) for entry in _list(status.get("volumeStatuses"))}
    for field in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for container in _list(status.get(field)):
            names.update(_name(m) for m in _list(_dict(container).get("volumeMounts")))
    names.discard("")
    return frozenset(names)


def pod_volume_references(pod: Mapping[str, Any],
                          remembered: Mapping[str, frozenset[Ref]] | None = None
                          ) -> dict[str, frozenset[Ref]]:
    """Volume name -> references: the volumes in the spec, plus those of `remembered` (the
    same pod's volumes as last seen) that left the spec but are still held (see the module
    docstring)."""
    md = _dict(pod.get("metadata"))
    pod_name = str(md.get("name") or "")
    namespace = str(md.get("namespace") or "")
    volumes: dict[str, frozenset[Ref]] = {}
    for volume in _list(_dict(pod.get("spec")).get("volumes")):
        volume = _dict(volume)
        volumes[_name(volume)] = volume_references(volume, pod_name, namespace)
    if remembered:
        held = held_volume_names(pod)
        for name, refs in remembered.items():
            if name not in volumes and name in held:
                volumes[name] = refs
    return volumes
