"""Pod defaulting, as the v1 defaulters (`SetObjectDefaults_Pod`) apply it on decode, in
upstream's order (reference/k8s-semantics.md section 3.3):

1. `SetDefaults_Pod`: container (and init container) requests copied from limits; with
   `PodLevelResources`, the pod-level hugepage limits, requests and limits (KEP-2837, and
   KEP-6386 for `ephemeral-storage` behind `PodLevelResourcesEphemeralStorage`);
   `enableServiceLinks: true`; host ports under `hostNetwork`.
2. `SetDefaults_PodSpec`: `dnsPolicy: ClusterFirst`, `restartPolicy: Always`,
   `securityContext: {}`, `terminationGracePeriodSeconds: 30`, `schedulerName`.
3. Volumes: a volume with no source becomes `emptyDir: {}`; image volumes' `pullPolicy` (gate
   `ImageVolume`); `defaultMode` 0644 (420) for secret, configMap, downwardAPI and projected;
   projected service account tokens expire after 3600 s; hostPath `type: ""`.
4. Containers (init, regular, ephemeral): `imagePullPolicy` (`Always` for `:latest` or no
   tag), `terminationMessagePath`/`Policy`, ports `protocol: TCP`, probe and handler
   defaults, `fieldRef.apiVersion: v1`; every resource list rounded up to milli scale.

`serviceAccountName` is NOT defaulted here (the ServiceAccount admission plugin does it); the
deprecated `serviceAccount` is kept in step with it, as the v1 conversion does.
`default_pull_policy` is the image-reference rule shared with the kubelet.
Pure: works in place on a JSON dict, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ephemera.api.featuregates import (
    DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES,
    IMAGE_VOLUME,
    POD_LEVEL_RESOURCES,
    gate_enabled,
)
from ephemera.api.meta import child_object
from ephemera.api.quantity import MILLI, Quantity, QuantityError, quantity_from_json
from ephemera.pods import resources
from ephemera.pods.validation import VOLUME_SOURCES

__all__ = [
    "DEFAULT_SCHEDULER_NAME",
    "DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS",
    "DEFAULT_VOLUME_MODE",
    "default_pod",
    "default_pull_policy",
    "drop_disabled_pod_fields",
    "parse_image_reference",
]

DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS = 30
DEFAULT_SCHEDULER_NAME = "default-scheduler"
DEFAULT_VOLUME_MODE = 0o644  # 420: Secret/ConfigMap/DownwardAPI/Projected VolumeSourceDefaultMode
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
SERVICE_ACCOUNT_TOKEN_EXPIRATION_SECONDS = 3600

_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def _dict(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


# --- image references ---------------------------------------------------------------------

# distribution/reference's grammar (ReferenceRegexp, anchored).
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN = rf"(?:{_DOMAIN_NAME}|{_IPV6})(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"({_NAME})(?::({_TAG}))?(?:@({_DIGEST}))?")
_IDENTIFIER = re.compile(r"[a-f0-9]{64}")
_DIGEST_HEX_LENGTH = {"sha256": 64, "sha384": 96, "sha512": 128}
_NAME_TOTAL_LENGTH_MAX = 255


def parse_image_reference(image: str) -> tuple[str, str, str] | None:
    """Upstream's `parsers.ParseImageName`: `(repository, tag, digest)` with the tag
    `latest` when neither a tag nor a digest is given, or None when the reference does not
    parse (`ParseNormalizedNamed` fails)."""
    if not image or _IDENTIFIER.fullmatch(image):
        return None
    first, slash, rest = image.partition("/")
    remote = image
    if slash and (any(c in first for c in ".:") or first == "localhost"
                  or first.lower() != first):
        remote = rest
    remote_name = remote.split("@", 1)[0]
    if ":" in remote_name:
        remote_name = remote_name.rsplit(":", 1)[0]
    if remote_name.lower() != remote_name:
        return None
    match = _REFERENCE.fullmatch(image)
    if match is None:
        return None
    name, tag, digest = match.group(1), match.group(2) or "", match.group(3) or ""
    if len(name) > _NAME_TOTAL_LENGTH_MAX:
        return None
    if digest:
        algorithm, _, hex_part = digest.partition(":")
        if _DIGEST_HEX_LENGTH.get(algorithm) != len(hex_part):
            return None
    if not tag and not digest:
        tag = "latest"
    return name, tag, digest


def default_pull_policy(image: str) -> str:
    """`Always` when the tag is `latest` (also implied by no tag and no digest), otherwise
    `IfNotPresent` (also when the reference does not parse)."""
    parsed = parse_image_reference(image if isinstance(image, str) else "")
    return "Always" if parsed is not None and parsed[1] == "latest" else "IfNotPresent"


# --- resources ----------------------------------------------------------------------------


def _requirements(c: dict[str, Any]) -> dict[str, Any] | None:
    return _dict(c.get("resources"))


def _default_requests_from_limits(containers: list[dict[str, Any]]) -> None:
    """If limits are specified but requests are not, a request defaults to its limit."""
    for c in containers:
        res = _requirements(c)
        if res is None:
            continue
        limits = _dict(res.get("limits"))
        if limits is None:
            continue
        requests = _dict(res.get("requests"))
        if requests is None:
            requests = res["requests"] = {}
        for name, value in limits.items():
            if name not in requests:
                requests[name] = value


def _quantity_map(raw: Any) -> dict[str, Quantity]:
    out: dict[str, Quantity] = {}
    for name, value in (raw or {}).items() if isinstance(raw, dict) else ():
        try:
            out[name] = quantity_from_json(value)
        except (QuantityError, TypeError):
            continue
    return out


def _default_hugepage_pod_limits(pod: dict[str, Any], gates: Mapping[str, bool]) -> None:
    """`defaultHugePagePodLimits`: with some pod-level requests or limits, an aggregated
    container hugepage limit becomes the pod limit when the pod sets neither a request nor a
    limit for it."""
    pod_res = _dict(pod["spec"].get("resources"))
    if pod_res is None or (not pod_res.get("limits") and not pod_res.get("requests")):
        return
    limits = _dict(pod_res.get("limits")) or {}
    requests = _dict(pod_res.get("requests")) or {}
    for name, aggregate in resources.aggregate_container_limits(pod).items():
        if not resources.is_supported_pod_level_resource(name, gates):
            continue
        if not resources.is_hugepages(name) or name in requests or name in limits:
            continue
        limits[name] = str(aggregate)
    if limits:
        pod_res["limits"] = limits


def _default_pod_requests(pod: dict[str, Any], gates: Mapping[str, bool]) -> None:
    """`defaultPodRequests`, only when pod-level limits are set: a supported, overcommittable
    resource that containers request gets the aggregated container request (sidecar formula);
    then each supported pod-level limit still without a request gives its value.
    KEP-6386 (PRR): a pod with pod-level requests but no pod-level limits also gets the
    aggregated container `ephemeral-storage` request, so that a pod valid before the gate was
    turned on (pod-level cpu, container-level ephemeral-storage) stays valid."""
    pod_res = _dict(pod["spec"].get("resources"))
    if pod_res is None:
        return
    if not pod_res.get("limits") or not isinstance(pod_res["limits"], dict):
        requests = _dict(pod_res.get("requests"))
        es = resources.RESOURCE_EPHEMERAL_STORAGE
        aggregate = resources.aggregate_container_requests(pod).get(es)
        if (requests and es not in requests and aggregate is not None
                and resources.is_pod_level_requests_set(pod, gates)
                and resources.is_supported_pod_level_resource(es, gates)):
            requests[es] = str(aggregate)
        return
    requests = _dict(pod_res.get("requests")) or {}
    for name, aggregate in resources.aggregate_container_requests(pod).items():
        if (name not in requests and resources.is_supported_pod_level_resource(name, gates)
                and resources.is_overcommit_allowed(name)):
            requests[name] = str(aggregate)
    for name, limit in pod_res["limits"].items():
        if name not in requests and resources.is_supported_pod_level_resource(name, gates):
            requests[name] = limit
    if requests:
        pod_res["requests"] = requests


def _default_pod_limits(pod: dict[str, Any], gates: Mapping[str, bool]) -> None:
    """`defaultPodLimits`: only when no supported pod-level limit is set but some supported
    pod-level request is; a supported, overcommittable resource that EVERY container limits
    gets the aggregated container limit."""
    spec = pod["spec"]
    if resources.is_pod_level_limits_set(pod, gates):
        return
    if not resources.is_pod_level_requests_set(pod, gates):
        return
    pod_res = spec.get("resources")
    if not isinstance(pod_res, dict):  # unreachable: requests are set
        return
    limits = _dict(pod_res.get("limits")) or {}
    for name, aggregate in resources.aggregate_container_limits(pod).items():
        if name in limits or not resources.is_supported_pod_level_resource(name, gates):
            continue
        if not resources.is_overcommit_allowed(name):
            continue
        if not resources.all_containers_have_limit_for_resource(pod, name):
            continue
        limits[name] = str(aggregate)
    if limits:
        pod_res["limits"] = limits


def _round_up_resource_list(raw: Any) -> None:
    """`SetDefaults_ResourceList`: every quantity rounded up to milli scale."""
    if not isinstance(raw, dict):
        return
    for name, value in list(raw.items()):
        try:
            q = quantity_from_json(value)
        except (QuantityError, TypeError):
            continue  # validation reports it
        text = str(q.round_up(MILLI))
        if text != value:
            raw[name] = text


def _round_requirements(res: Any) -> None:
    if isinstance(res, dict):
        _round_up_resource_list(res.get("limits"))
        _round_up_resource_list(res.get("requests"))


# --- volumes ------------------------------------------------------------------------------


def _default_field_selector(ref: Any) -> None:
    if isinstance(ref, dict) and not ref.get("apiVersion"):
        ref["apiVersion"] = "v1"


def _default_volume(volume: dict[str, Any], gates: Mapping[str, bool]) -> None:
    if all(volume.get(key) is None for key in VOLUME_SOURCES):
        for key in VOLUME_SOURCES:
            volume.pop(key, None)
        volume["emptyDir"] = {}
    image = _dict(volume.get("image"))
    if image is not None and gate_enabled(gates, IMAGE_VOLUME) and not image.get("pullPolicy"):
        image["pullPolicy"] = default_pull_policy(image.get("reference") or "")
    for key in ("secret", "configMap", "downwardAPI", "projected"):
        source = _dict(volume.get(key))
        if source is not None and source.get("defaultMode") is None:
            source["defaultMode"] = DEFAULT_VOLUME_MODE
    empty_dir = _dict(volume.get("emptyDir"))
    if empty_dir is not None and empty_dir.get("sizeLimit") is not None:
        try:  # a Quantity is stored in its canonical form
            empty_dir["sizeLimit"] = str(quantity_from_json(empty_dir["sizeLimit"]))
        except (QuantityError, TypeError):
            pass
    host_path = _dict(volume.get("hostPath"))
    if host_path is not None and host_path.get("type") is None:
        host_path["type"] = ""
    for item in _dicts((_dict(volume.get("downwardAPI")) or {}).get("items")):
        _default_field_selector(item.get("fieldRef"))
    for source in _dicts((_dict(volume.get("projected")) or {}).get("sources")):
        token = _dict(source.get("serviceAccountToken"))
        if token is not None and token.get("expirationSeconds") is None:
            token["expirationSeconds"] = SERVICE_ACCOUNT_TOKEN_EXPIRATION_SECONDS
        for item in _dicts((_dict(source.get("downwardAPI")) or {}).get("items")):
            _default_field_selector(item.get("fieldRef"))
    ephemeral = _dict(volume.get("ephemeral"))
    template = _dict((ephemeral or {}).get("volumeClaimTemplate"))
    claim_spec = _dict((template or {}).get("spec"))
    if claim_spec is not None:
        claim_spec.setdefault("volumeMode", "Filesystem")
        claim_res = _dict(claim_spec.get("resources"))
        if claim_res is not None:
            _round_requirements(claim_res)


# --- containers ---------------------------------------------------------------------------


def _default_handler(handler: Any) -> None:
    http_get = _dict(handler.get("httpGet")) if isinstance(handler, dict) else None
    if http_get is not None:
        if not http_get.get("path"):
            http_get["path"] = "/"
        if not http_get.get("scheme"):
            http_get["scheme"] = "HTTP"


def _default_probe(probe: Any) -> None:
    if not isinstance(probe, dict):
        return
    for key, value in (("timeoutSeconds", 1), ("periodSeconds", 10),
                       ("successThreshold", 1), ("failureThreshold", 3)):
        if not probe.get(key):
            probe[key] = value
    _default_handler(probe)


def _default_container(c: dict[str, Any]) -> None:
    """`SetDefaults_Container` and the container members' own defaults."""
    if not c.get("imagePullPolicy"):
        c["imagePullPolicy"] = default_pull_policy(c.get("image") or "")
    if not c.get("terminationMessagePath"):
        c["terminationMessagePath"] = TERMINATION_MESSAGE_PATH
    if not c.get("terminationMessagePolicy"):
        c["terminationMessagePolicy"] = "File"
    for port in _dicts(c.get("ports")):
        if not port.get("protocol"):
            port["protocol"] = "TCP"
    for env in _dicts(c.get("env")):
        _default_field_selector((_dict(env.get("valueFrom")) or {}).get("fieldRef"))
    if "resources" not in c:
        c["resources"] = {}
    _round_requirements(c.get("resources"))
    for key in ("livenessProbe", "readinessProbe", "startupProbe"):
        _default_probe(c.get(key))
    lifecycle = _dict(c.get("lifecycle"))
    if lifecycle is not None:
        _default_handler(lifecycle.get("postStart"))
        _default_handler(lifecycle.get("preStop"))


def _default_host_network_ports(containers: list[dict[str, Any]]) -> None:
    for c in containers:
        for port in _dicts(c.get("ports")):
            if not port.get("hostPort"):
                port["hostPort"] = port.get("containerPort") or 0


# --- the pod ------------------------------------------------------------------------------


def default_pod(pod: dict[str, Any], gates: Mapping[str, bool]) -> None:
    """Apply upstream's v1 pod defaults to `pod` in place (see the module docstring for
    the order). `gates` maps feature-gate names to their state; a missing gate takes
    ephemera's default."""
    spec = child_object(pod, "spec")  # a struct value: missing or null is `{}`, defaulted
    containers = _dicts(spec.get("containers"))
    init_containers = _dicts(spec.get("initContainers"))

    # SetDefaults_Pod
    _default_requests_from_limits(containers)
    _default_requests_from_limits(init_containers)
    if gate_enabled(gates, POD_LEVEL_RESOURCES):
        _default_hugepage_pod_limits(pod, gates)
        _default_pod_requests(pod, gates)
        _default_pod_limits(pod, gates)
    if spec.get("enableServiceLinks") is None:
        spec["enableServiceLinks"] = True
    if spec.get("hostNetwork"):
        _default_host_network_ports(containers)
        _default_host_network_ports(init_containers)

    default_pod_spec(spec, gates)


def default_pod_template(template: dict[str, Any], gates: Mapping[str, bool]) -> None:
    """The defaults of a pod template's spec (a workload's `spec.template`): upstream
    defaults a PodTemplateSpec with `SetDefaults_PodSpec` and the container and volume
    defaults, not with the Pod-only `SetDefaults_Pod`."""
    default_pod_spec(child_object(template, "spec"), gates)


def default_pod_spec(spec: dict[str, Any], gates: Mapping[str, bool]) -> None:
    """`SetDefaults_PodSpec`, then the volumes' and containers' defaults."""
    if not spec.get("dnsPolicy"):
        spec["dnsPolicy"] = "ClusterFirst"
    if not spec.get("restartPolicy"):
        spec["restartPolicy"] = "Always"
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    if spec.get("terminationGracePeriodSeconds") is None:
        spec["terminationGracePeriodSeconds"] = DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS
    if not spec.get("schedulerName"):
        spec["schedulerName"] = DEFAULT_SCHEDULER_NAME

    # the v1 <-> internal conversion keeps the deprecated serviceAccount in step
    if spec.get("serviceAccountName"):
        spec["serviceAccount"] = spec["serviceAccountName"]
    elif spec.get("serviceAccount"):
        spec["serviceAccountName"] = spec["serviceAccount"]

    for volume in _dicts(spec.get("volumes")):
        _default_volume(volume, gates)
    for key in _CONTAINER_LISTS:
        for c in _dicts(spec.get(key)):
            _default_container(c)
    _round_up_resource_list(spec.get("overhead"))
    _round_requirements(spec.get("resources"))


# --- fields of disabled features ------------------------------------------------------------


def _uses_image_volumes(spec: Mapping[str, Any]) -> bool:
    return any(v.get("image") is not None for v in _dicts(spec.get("volumes")))


def _uses_dynamic_volume_policy(spec: Mapping[str, Any]) -> bool:
    return any(c.get("dynamicVolumePolicy") is not None
               for key in _CONTAINER_LISTS for c in _dicts(spec.get(key)))


def drop_disabled_pod_fields(pod: dict[str, Any], old_pod: Mapping[str, Any] | None,
                             gates: Mapping[str, bool]) -> None:
    """Upstream's `DropDisabledPodFields`, for the gates whose fields are dropped rather than
    rejected: with a gate off, a field it owns is removed on create, and on update unless
    the old pod already uses it. `PodLevelResources` owns `spec.resources`; `ImageVolume`
    owns image volumes (and the mounts of them); `DynamicNodeLocalEphemeralVolumes` owns
    `containers[].dynamicVolumePolicy` and `status.volumeStatuses`. Pod-level
    `ephemeral-storage` with its gate off is not dropped: validation rejects it (KEP-6386)."""
    spec = _dict(pod.get("spec"))
    if spec is None:
        return
    old_spec = _dict((old_pod or {}).get("spec")) or {}
    if not gate_enabled(gates, POD_LEVEL_RESOURCES) and old_spec.get("resources") is None:
        spec.pop("resources", None)
    if not gate_enabled(gates, IMAGE_VOLUME) and not _uses_image_volumes(old_spec):
        dropped = {_volume_name(v) for v in _dicts(spec.get("volumes")) if v.get("image")
                   is not None}
        if dropped and isinstance(spec.get("volumes"), list):
            spec["volumes"] = [v for v in spec["volumes"]
                               if not (isinstance(v, dict) and _volume_name(v) in dropped)]
            for key in _CONTAINER_LISTS:
                for c in _dicts(spec.get(key)):
                    if isinstance(c.get("volumeMounts"), list):
                        c["volumeMounts"] = [m for m in c["volumeMounts"] if not (
                            isinstance(m, dict) and m.get("name") in dropped)]
    if not gate_enabled(gates, DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES) and \
            not _uses_dynamic_volume_policy(old_spec):
        for key in _CONTAINER_LISTS:
            for c in _dicts(spec.get(key)):
                c.pop("dynamicVolumePolicy", None)
    status = _dict(pod.get("status"))
    old_status = _dict((old_pod or {}).get("status")) or {}
    if status is not None and not gate_enabled(gates, DYNAMIC_NODE_LOCAL_EPHEMERAL_VOLUMES) \
            and old_status.get("volumeStatuses") is None:
        status.pop("volumeStatuses", None)  # upstream's dropDisabledPodStatusFields


def _volume_name(volume: Mapping[str, Any]) -> str:
    name = volume.get("name")
    return name if isinstance(name, str) else ""
