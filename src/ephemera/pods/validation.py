"""Pod validation as upstream's `pkg/apis/core/validation` does it, with its exact messages and
field paths: `validate_pod_create` (`ValidatePodCreate`), `validate_pod_update`
(`ValidatePodUpdate`, the immutability of `spec` on a plain update) and
`validate_pod_status_update` (`ValidatePodStatusUpdate`, kept small).

Covered: metadata, volumes (names, exactly one source, the sources ephemera serves), containers
of every kind (names unique across regular, init and ephemeral containers, image, ports, env,
volume mounts and devices, pull policy, resources, probes, lifecycle, security context, the
KEP-6395 `dynamicVolumePolicy`), sidecar init containers, pod-level resources (KEP-2837 and
KEP-6386: supported names behind `PodLevelResourcesEphemeralStorage`, request <= limit,
aggregated container requests <= pod request, each container limit <= pod limit), restart and
DNS policy, tolerations, scheduling gates and the other `PodSpec` scalars.

Functions take the feature gates as a mapping so they stay pure; a missing gate takes its
ephemera default. The pod is a JSON dict that went through `default_pod` first, as upstream
validates the defaulted object. Errors come in upstream's order; map entries (resource lists,
labels) in the object's own key order.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ephemera.api import field, meta
from ephemera.api import validation as v
from ephemera.api.featuregates import (
    DEFAULTS,
    DYNAMIC_VOLUME_HOT_PLUG,
    POD_LEVEL_RESOURCES,
    POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE,
    gate_enabled,
)
from ephemera.api.field import FieldError, Path
from ephemera.api.goformat import go_quote, go_string_map
from ephemera.api.jsoncopy import same_json
from ephemera.api.quantity import Quantity, QuantityError, quantity_from_json
from ephemera.pods import resources
from ephemera.pods.specdiff import spec_diff

__all__ = [
    "DYNAMIC_VOLUME_NOT_REQUIRED",
    "DYNAMIC_VOLUME_RESTART_CONTAINER",
    "DYNAMIC_VOLUME_RESTART_POLICIES",
    "UPDATABLE_POD_SPEC_FIELDS",
    "VOLUME_HOST_PHASES",
    "VOLUME_SOURCES",
    "is_extended_resource_name",
    "validate_container_resource_name",
    "validate_pod_create",
    "validate_pod_spec",
    "validate_pod_status_update",
    "validate_pod_update",
    "validate_resource_name",
    "validate_resource_quantity_value",
]

# KEP-6395's `dynamicVolumePolicy.restartPolicy`: "RestartContainer" (the KEP's only value);
# "NotRequired" (mounts are attached to the running container; the KEP's next milestone,
# ephemera's preview behind its own gate DynamicVolumeHotPlug).
DYNAMIC_VOLUME_NOT_REQUIRED = "NotRequired"
DYNAMIC_VOLUME_RESTART_CONTAINER = "RestartContainer"
DYNAMIC_VOLUME_RESTART_POLICIES = (DYNAMIC_VOLUME_NOT_REQUIRED, DYNAMIC_VOLUME_RESTART_CONTAINER)

# Every `VolumeSource` member, in the order upstream checks them.
VOLUME_SOURCES = (
    "emptyDir", "hostPath", "gitRepo", "gcePersistentDisk", "awsElasticBlockStore", "secret",
    "nfs", "iscsi", "glusterfs", "flocker", "persistentVolumeClaim", "rbd", "cinder", "cephfs",
    "quobyte", "downwardAPI", "fc", "flexVolume", "configMap", "azureFile", "vsphereVolume",
    "photonPersistentDisk", "portworxVolume", "azureDisk", "storageos", "projected", "scaleIO",
    "csi", "ephemeral", "image",
)  # fmt: skip
# The path upstream names in "may not specify more than 1 volume type", typos included.
_VOLUME_FORBIDDEN_PATH = {"downwardAPI": "downwarAPI", "cephfs": "cephFS"}

UPDATABLE_POD_SPEC_FIELDS = (
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously "
    "negative)",
)

VOLUME_HOST_PHASES = ("ErrorMounting", "HostMounted", "Pending", "Unmounting")  # KEP-6395

_FILE_MODE_ERROR = "must be a number between 0 and 0777 (octal), both inclusive"
_NOT_INTEGER = "must be an integer"
_MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
_POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
_RESTARTABLE_ONLY = "may not be set for init containers without restartPolicy=Always"

# k/k pkg/apis/core/helper resource-name sets.
_STANDARD_RESOURCES = frozenset({
    "cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory",
    "requests.ephemeral-storage", "limits.cpu", "limits.memory", "limits.ephemeral-storage",
    "pods", "resourcequotas", "services", "replicationcontrollers", "secrets", "configmaps",
    "persistentvolumeclaims", "storage", "requests.storage", "services.nodeports",
    "services.loadbalancers",
})
_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_INTEGER_RESOURCES = frozenset({
    "pods", "resourcequotas", "services", "replicationcontrollers", "secrets", "configmaps",
    "persistentvolumeclaims", "services.nodeports", "services.loadbalancers",
})
_HUGEPAGES = "hugepages-"
_QOS_RESOURCES = ("cpu", "memory")

_ENV_FIELD_PATHS = frozenset({
    "metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
    "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP",
    "status.podIPs",
})
_VOLUME_FIELD_PATHS = frozenset({
    "metadata.name", "metadata.namespace", "metadata.labels", "metadata.annotations",
    "metadata.uid",
})
_DOWNWARD_API_LABELS = frozenset({
    "metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace",
    "metadata.uid", "spec.nodeName", "spec.restartPolicy", "spec.serviceAccountName",
    "spec.schedulerName", "status.phase", "status.hostIP", "status.hostIPs", "status.podIP",
    "status.podIPs",
})
_RESOURCE_FIELD_PATHS = frozenset({
    "limits.cpu", "limits.memory", "limits.ephemeral-storage", "requests.cpu",
    "requests.memory", "requests.ephemeral-storage",
})
_BYTE_DIVISORS = frozenset({
    "1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei",
})
_SUBSCRIPTED = re.compile(r"(.+)\['(.*)'\]")


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield i, item if isinstance(item, dict) else {}


def _s(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _sorted(values: Iterator[str] | frozenset[str] | set[str] | list[str]) -> list[str]:
    return sorted(values)


# --- resource names (k/k pkg/apis/core/helper) -------------------------------------------


def is_extended_resource_name(name: str) -> bool:
    """`IsExtendedResourceName`: fully qualified outside `kubernetes.io`, and a valid quota
    name once `requests.` is put in front."""
    if resources.is_native_resource(name) or name.startswith("requests."):
        return False
    return not meta.qualified_name_errors("requests." + name)


def _is_standard_resource_name(name: str) -> bool:
    return (name in _STANDARD_RESOURCES or name.startswith(_HUGEPAGES)
            or name.startswith("requests." + _HUGEPAGES))


def validate_resource_name(name: str, path: Path) -> list[FieldError]:
    """`ValidateResourceName`: a qualified name, and either fully qualified (`example.com/gpu`)
    or one of the standard resource names (`cpu`, `requests.memory`, `pods`, `hugepages-*`,
    ...). `ResourceQuota` and `LimitRange` validation build on it."""
    errs = v.validate_qualified_name(name, path)
    if errs:
        return errs
    if "/" not in name and not _is_standard_resource_name(name):
        return [field.invalid(path, name, "must be a standard resource type or fully qualified")]
    return []


def validate_container_resource_name(name: str, path: Path) -> list[FieldError]:
    """`validateContainerResourceName`: `validate_resource_name`, then a name a container may
    request (`cpu`, `memory`, `ephemeral-storage`, `hugepages-*`, or a native or extended
    resource when fully qualified). Used for container and pod resources, pod overhead and
    the `Pod` and `Container` items of a `LimitRange`."""
    errs = validate_resource_name(name, path)
    if "/" not in name:
        if name not in _STANDARD_CONTAINER_RESOURCES and not resources.is_hugepages(name):
            errs.append(field.invalid(path, name, "must be a standard resource for containers"))
    elif not resources.is_native_resource(name) and not is_extended_resource_name(name):
        errs.append(field.invalid(path, name, "doesn't follow extended resource name standard"))
    return errs


# --- the options one validation runs with -------------------------------------------------


@dataclass(frozen=True)
class _Options:
    gates: Mapping[str, bool]
    pod_level_resources: bool

    @classmethod
    def of(cls, gates: Mapping[str, bool], old: Mapping[str, Any] | None = None) -> _Options:
        """Upstream's `GetValidationOptionsFromPodSpecAndMeta`: a feature in use by the old
        pod stays valid on update when its gate is off."""
        effective = {name: gate_enabled(gates, name) for name in DEFAULTS}
        effective.update({k: bool(x) for k, x in gates.items()})
        old_spec = _d((old or {}).get("spec"))
        if any(_d(c.get("dynamicVolumePolicy")).get("restartPolicy")
               == DYNAMIC_VOLUME_NOT_REQUIRED
               for key in ("containers", "initContainers", "ephemeralContainers")
               for _, c in _items(old_spec.get(key))):
            effective[DYNAMIC_VOLUME_HOT_PLUG] = True
        old_res = _d(old_spec.get("resources"))
        if old_res.get("requests") or old_res.get("limits"):
            effective[POD_LEVEL_RESOURCES] = True
            if "ephemeral-storage" in _d(old_res.get("requests")) or \
                    "ephemeral-storage" in _d(old_res.get("limits")):
                effective[POD_LEVEL_RESOURCES_EPHEMERAL_STORAGE] = True
        return cls(effective, effective[POD_LEVEL_RESOURCES])


# --- quantities ---------------------------------------------------------------------------


def _quantity(raw: Any, path: Path, errs: list[FieldError]) -> Quantity | None:
    try:
        return quantity_from_json(raw)
    except (QuantityError, TypeError) as err:
        errs.append(field.invalid(path, raw, str(err)))
        return None


def validate_resource_quantity_value(name: str, q: Quantity, path: Path) -> list[FieldError]:
    """`ValidateResourceQuantityValue`: the quantity `q` of resource `name` is not negative,
    and whole for the resources counted in units (object counts, extended resources)."""
    errs: list[FieldError] = []
    if q.sign() < 0:
        errs.append(field.invalid(path, str(q), v.IS_NEGATIVE))
    if (name in _INTEGER_RESOURCES or is_extended_resource_name(name)) and \
            q.milli_value() % 1000 != 0:
        errs.append(field.invalid(path, str(q), _NOT_INTEGER))
    return errs


def _hugepage_value_error(name: str, q: Quantity) -> str | None:
    """`validateResourceQuantityHugePageValue`: a positive whole number of pages."""
    try:
        page = quantity_from_json(name[len(_HUGEPAGES):])
    except QuantityError:
        page = None
    divisible = (page is not None and page.sign() > 0 and page.milli_value() % 1000 == 0
                 and q.value() % page.value() == 0)
    return None if divisible else f"{q} is not positive integer multiple of {name}"


NameCheck = Callable[[str, Path], list[FieldError]]


def _validate_resource_requirements(
    req: Mapping[str, Any], name_check: NameCheck, claim_names: set[str], path: Path
) -> list[FieldError]:
    """`validateResourceRequirements`: names, quantities, request <= limit (error on the
    `requests` map's path), hugepages, claims."""
    errs: list[FieldError] = []
    lim_path, req_path = path.child("limits"), path.child("requests")
    limits: dict[str, Quantity] = {}
    lim_qos = req_qos = lim_huge = req_huge = False
    for name, raw in _d(req.get("limits")).items():
        p = lim_path.key(name)
        errs.extend(name_check(name, p))
        q = _quantity(raw, p, errs)
        if q is None:
            continue
        limits[name] = q
        errs.extend(validate_resource_quantity_value(name, q, p))
        if resources.is_hugepages(name):
            lim_huge = True
            message = _hugepage_value_error(name, q)
            if message:
                errs.append(field.invalid(p, str(q), message))
        lim_qos = lim_qos or name in _QOS_RESOURCES
    for name, raw in _d(req.get("requests")).items():
        p = req_path.key(name)
        errs.extend(name_check(name, p))
        q = _quantity(raw, p, errs)
        if q is None:
            continue
        errs.extend(validate_resource_quantity_value(name, q, p))
        limit = limits.get(name)
        if limit is not None:
            if q.cmp(limit) != 0 and not resources.is_overcommit_allowed(name):
                errs.append(field.invalid(req_path, str(q),
                                          f"must be equal to {name} limit of {limit}"))
            elif q.cmp(limit) > 0:
                errs.append(field.invalid(
                    req_path, str(q), f"must be less than or equal to {name} limit of {limit}"))
        elif name not in _d(req.get("limits")) and not resources.is_overcommit_allowed(name):
            errs.append(field.required(lim_path,
                                       "Limit must be set for non overcommitable resources"))
        if resources.is_hugepages(name):
            req_huge = True
            message = _hugepage_value_error(name, q)
            if message:
                errs.append(field.invalid(p, str(q), message))
        req_qos = req_qos or name in _QOS_RESOURCES
    if not lim_qos and not req_qos and (req_huge or lim_huge):
        errs.append(field.forbidden(path, "HugePages require cpu or memory"))
    errs.extend(_validate_claim_names(req.get("claims"), claim_names, path.child("claims")))
    return errs


def _validate_claim_names(claims: Any, pod_claims: set[str], path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, claim in _items(claims):
        name = _s(claim.get("name"))
        if not name:
            errs.append(field.required(path.index(i)))
            continue
        key = name + ("/" + claim["request"] if _s(claim.get("request")) else "")
        if name in seen or key in seen:
            errs.append(field.duplicate(path.index(i), key if key in seen else name))
        seen.add(key)
        if name not in pod_claims:
            detail = "must be one of the names in pod.spec.resourceClaims"
            detail += (": " + ", ".join(sorted(pod_claims))) if pod_claims else " which is empty"
            errs.append(field.FieldError("NotFound", str(path.index(i)), detail, name))
    return errs


# --- pod-level resources (KEP-2837, KEP-6386) ---------------------------------------------


def _pod_resource_name_check(gates: Mapping[str, bool]) -> NameCheck:
    def check(name: str, path: Path) -> list[FieldError]:
        errs = validate_resource_name(name, path)
        if errs:
            return errs
        if not resources.is_supported_pod_level_resource(name, gates):
            return [field.not_supported(
                path, name, _sorted(resources.supported_pod_level_resources(gates)))]
        return []
    return check


def _validate_pod_resources(spec: Mapping[str, Any], claim_names: set[str], path: Path,
                            opts: _Options) -> list[FieldError]:
    """`validatePodResources`: only with PodLevelResources and a `spec.resources`."""
    pod_res = spec.get("resources")
    if not isinstance(pod_res, dict):
        return []
    errs: list[FieldError] = []
    if pod_res.get("claims") is not None:
        errs.append(field.forbidden(path.child("claims"),
                                    "claims cannot be set for Resources at pod-level"))
    errs.extend(_validate_resource_requirements(
        pod_res, _pod_resource_name_check(opts.gates), claim_names, path))
    errs.extend(_validate_pod_resource_consistency(spec, path, opts))
    return errs


def _validate_pod_resource_consistency(spec: Mapping[str, Any], path: Path,
                                       opts: _Options) -> list[FieldError]:
    """`validatePodResourceConsistency`: for every supported pod-level resource the
    containers request (sidecar formula), the pod request (a missing one reads "0") must
    cover the aggregate; no regular container's limit may exceed the pod limit. The sum of
    container limits may exceed the pod limit."""
    errs: list[FieldError] = []
    pod_res = _d(spec.get("resources"))
    pod_requests = resources.resource_list(pod_res.get("requests"))
    pod_limits = resources.resource_list(pod_res.get("limits"))
    req_path = path.child("requests")
    aggregate = resources.aggregate_container_requests({"spec": spec})
    for name, total in aggregate.items():
        if not resources.is_supported_pod_level_resource(name, opts.gates):
            continue
        pod_request = pod_requests.get(name, Quantity())
        if total.cmp(pod_request) > 0:
            errs.append(field.invalid(
                req_path.key(name), str(pod_request),
                f"must be greater than or equal to aggregate container requests of {total}"))
    for i, c in _items(spec.get("containers")):
        for name, limit in resources.resource_list(_d(c.get("resources")).get("limits")).items():
            pod_limit = pod_limits.get(name)
            if pod_limit is not None and limit.cmp(pod_limit) > 0:
                errs.append(field.invalid(
                    path.child("containers").index(i).key(name).child("limits"), str(limit),
                    f"must be less than or equal to pod limits of {pod_limit}"))
    return errs


# --- volumes ------------------------------------------------------------------------------


def _path_no_backsteps(target: str, path: Path) -> list[FieldError]:
    if ".." in target.replace("\\", "/").split("/"):
        return [field.invalid(path, target, "must not contain '..'")]
    return []


def _local_descending_path(target: str, path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    if target.startswith("/"):
        errs.append(field.invalid(path, target, "must be a relative path"))
    errs.extend(_path_no_backsteps(target, path))
    return errs


def _local_non_reserved_path(target: str, path: Path) -> list[FieldError]:
    errs = _local_descending_path(target, path)
    if target.startswith("..") and not target.startswith("../"):
        errs.append(field.invalid(path, target, "must not start with '..'"))
    return errs


def _file_mode(value: Any, path: Path) -> list[FieldError]:
    mode = _int(value)
    if mode is not None and (mode > 0o777 or mode < 0):
        return [field.invalid(path, mode, _FILE_MODE_ERROR)]
    return []


def _key_to_path(item: Mapping[str, Any], path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    if not _s(item.get("key")):
        errs.append(field.required(path.child("key")))
    target = _s(item.get("path"))
    if not target:
        errs.append(field.required(path.child("path")))
    errs.extend(_local_non_reserved_path(target, path.child("path")))
    errs.extend(_file_mode(item.get("mode"), path.child("mode")))
    return errs


def _object_field_selector(ref: Mapping[str, Any], expressions: frozenset[str],
                           path: Path) -> list[FieldError]:
    api_version, field_path = _s(ref.get("apiVersion")), _s(ref.get("fieldPath"))
    if not api_version:
        return [field.required(path.child("apiVersion"))]
    if not field_path:
        return [field.required(path.child("fieldPath"))]
    problem = None
    subscripted = _SUBSCRIPTED.fullmatch(field_path)
    if api_version != "v1":
        problem = f"unsupported pod version: {api_version}"
    elif subscripted:
        if subscripted.group(1) not in ("metadata.annotations", "metadata.labels"):
            problem = f"field label does not support subscript: {field_path}"
    elif field_path not in _DOWNWARD_API_LABELS and field_path != "spec.host":
        problem = f"field label not supported: {field_path}"
    if problem:
        return [field.invalid(path.child("fieldPath"), field_path,
                              f"error converting fieldPath: {problem}")]
    if subscripted:
        base, key = subscripted.group(1), subscripted.group(2)
        if base == "metadata.annotations":
            return v.validate_qualified_name(key.lower(), path)
        return v.validate_qualified_name(key, path)
    internal = "spec.nodeName" if field_path == "spec.host" else field_path
    if internal not in expressions:
        return [field.not_supported(path.child("fieldPath"), internal, _sorted(expressions))]
    return []


def _resource_field_selector(ref: Mapping[str, Any], path: Path,
                             volume: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    resource = _s(ref.get("resource"))
    if volume and not _s(ref.get("containerName")):
        errs.append(field.required(path.child("containerName")))
    elif not resource:
        errs.append(field.required(path.child("resource")))
    elif resource not in _RESOURCE_FIELD_PATHS and not resource.startswith(
            ("requests.hugepages-", "limits.hugepages-")):
        errs.append(field.not_supported(path.child("resource"), resource,
                                        _sorted(_RESOURCE_FIELD_PATHS)))
    divisor_raw = ref.get("divisor")
    if divisor_raw is not None:
        try:
            divisor = quantity_from_json(divisor_raw)
        except (QuantityError, TypeError):
            return errs
        if not divisor.is_zero():
            text = str(divisor)
            kind = resource.split(".", 1)[-1] if "." in resource else ""
            allowed = {"1m", "1"} if kind == "cpu" else _BYTE_DIVISORS
            names = {"cpu": "the cpu resource", "memory": "the memory resource",
                     "ephemeral-storage": "the local ephemeral storage resource"}
            target = names.get(kind, "the hugepages resource" if kind.startswith(
                "hugepages-") else "")
            if target and text not in allowed:
                values = ("1m and 1" if kind == "cpu" else
                          "1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei")
                errs.append(field.invalid(
                    path.child("divisor"), resource,
                    f"only divisor's values {values} are supported with {target}"))
    return errs


def _downward_api_file(item: Mapping[str, Any], path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    target = _s(item.get("path"))
    if not target:
        errs.append(field.required(path.child("path")))
    errs.extend(_local_non_reserved_path(target, path.child("path")))
    field_ref, resource_ref = item.get("fieldRef"), item.get("resourceFieldRef")
    if isinstance(field_ref, dict):
        errs.extend(_object_field_selector(field_ref, _VOLUME_FIELD_PATHS,
                                           path.child("fieldRef")))
        if resource_ref is not None:
            errs.append(field.invalid(path, "resource",
                                      "fieldRef and resourceFieldRef can not be specified "
                                      "simultaneously"))
    elif isinstance(resource_ref, dict):
        errs.extend(_resource_field_selector(resource_ref, path.child("resourceFieldRef"), True))
    else:
        errs.append(field.required(path, "one of fieldRef and resourceFieldRef is required"))
    errs.extend(_file_mode(item.get("mode"), path.child("mode")))
    return errs


def _projected(source: Mapping[str, Any], path: Path) -> list[FieldError]:
    errs = _file_mode(source.get("defaultMode"), path.child("defaultMode"))
    all_paths: set[str] = set()

    def claim(target: str, bad_value: Any) -> None:
        if target in all_paths:
            errs.append(field.invalid(path, bad_value, "conflicting duplicate paths"))
        all_paths.add(target)

    for i, src in _items(source.get("sources")):
        count = 0
        src_path = path.child("sources").index(i)
        for kind in ("secret", "configMap"):
            ref = src.get(kind)
            if not isinstance(ref, dict):
                continue
            count += 1
            if not _s(ref.get("name")):
                errs.append(field.required(src_path.child(kind).child("name")))
            for j, item in _items(ref.get("items")):
                errs.extend(_key_to_path(item, src_path.child(kind).child("items").index(j)))
                if _s(item.get("path")):
                    claim(item["path"], _s(ref.get("name")))
        downward = src.get("downwardAPI")
        if isinstance(downward, dict):
            count += 1
            for _, item in _items(downward.get("items")):
                errs.extend(_downward_api_file(item, src_path.child("downwardAPI")))
                if _s(item.get("path")):
                    claim(item["path"], item["path"])
        token = src.get("serviceAccountToken")
        if isinstance(token, dict):
            count += 1
            token_path = src_path.child("serviceAccountToken")
            seconds = _int(token.get("expirationSeconds"))
            if seconds is not None and seconds < 600:
                errs.append(field.invalid(token_path.child("expirationSeconds"), seconds,
                                          "may not specify a duration less than 10 minutes"))
            if seconds is not None and seconds > 1 << 32:
                errs.append(field.invalid(token_path.child("expirationSeconds"), seconds,
                                          "may not specify a duration larger than 2^32 seconds"))
            if not _s(token.get("path")):
                errs.append(field.required(path.child("path")))
            else:
                errs.extend(_local_non_reserved_path(token["path"], path.child("path")))
        bundle = src.get("clusterTrustBundle")
        if isinstance(bundle, dict):
            count += 1
            bundle_path = src_path.child("clusterTrustBundle")
            if not _s(bundle.get("path")):
                errs.append(field.required(bundle_path.child("path")))
            errs.extend(_local_non_reserved_path(_s(bundle.get("path")),
                                                 bundle_path.child("path")))
            claim(_s(bundle.get("path")), _s(bundle.get("path")))
        if isinstance(src.get("podCertificate"), dict):
            count += 1
        if count > 1:
            errs.append(field.forbidden(src_path,
                                        "may not specify more than 1 volume type per source"))
    return errs


_HOST_PATH_TYPES = ("", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File",
                    "FileOrCreate", "Socket")


def _volume_source(kind: str, source: Mapping[str, Any], path: Path, volume_name: str,
                   pod_name: str) -> list[FieldError]:
    """The per-source checks of `validateVolumeSource` (a missing required member is
    `Required value`)."""
    errs: list[FieldError] = []

    def need(*members: str) -> None:
        for member in members:
            if not source.get(member):
                errs.append(field.required(path.child(member)))

    if kind == "emptyDir":
        limit = source.get("sizeLimit")
        if limit is not None:
            try:
                negative = quantity_from_json(limit).sign() < 0
            except (QuantityError, TypeError):
                negative = True
            if negative:
                errs.append(field.forbidden(path.child("sizeLimit"),
                                            "SizeLimit field must be a valid resource quantity"))
    elif kind == "hostPath":
        target = _s(source.get("path"))
        if not target:
            return [field.required(path.child("path"))]
        errs.extend(_path_no_backsteps(target, path.child("path")))
        kind_value = source.get("type")
        if kind_value is not None and kind_value not in _HOST_PATH_TYPES:
            errs.append(field.not_supported(path.child("type"), kind_value,
                                            list(_HOST_PATH_TYPES)))
    elif kind == "gitRepo":
        need("repository")
        errs.extend(_local_descending_path(_s(source.get("directory")), path.child("directory")))
    elif kind in ("secret", "configMap"):
        need("secretName" if kind == "secret" else "name")
        errs.extend(_file_mode(source.get("defaultMode"), path.child("defaultMode")))
        for i, item in _items(source.get("items")):
            errs.extend(_key_to_path(item, path.child("items").index(i)))
    elif kind == "nfs":
        need("server", "path")
        if not _s(source.get("path")).startswith("/"):
            errs.append(field.invalid(path.child("path"), _s(source.get("path")),
                                      "must be an absolute path"))
    elif kind == "persistentVolumeClaim":
        need("claimName")
    elif kind == "downwardAPI":
        errs.extend(_file_mode(source.get("defaultMode"), path.child("defaultMode")))
        for _, item in _items(source.get("items")):
            errs.extend(_downward_api_file(item, path))
    elif kind == "projected":
        errs.extend(_projected(source, path))
    elif kind == "csi":
        driver = _s(source.get("driver"))
        driver_path = path.child("driver")
        if not driver:
            errs.append(field.required(driver_path))
        if len(driver) > 63:
            errs.append(field.too_long(driver_path, 63))
        errs.extend(field.invalid(driver_path, driver, m)
                    for m in meta.dns1123_subdomain_errors(driver.lower()))
    elif kind == "ephemeral":
        if not isinstance(source.get("volumeClaimTemplate"), dict):
            errs.append(field.required(path.child("volumeClaimTemplate")))
        elif pod_name and volume_name:
            claim = f"{pod_name}-{volume_name}"
            errs.extend(field.invalid(path.child("name"), volume_name,
                                      f'PVC name {go_quote(claim)}: {m}')
                        for m in meta.dns1123_subdomain_errors(claim))
    elif kind == "image":
        if not _s(source.get("reference")):
            errs.append(field.required(path.child("reference")))
        errs.extend(_pull_policy(source.get("pullPolicy"), path.child("pullPolicy")))
    elif kind == "gcePersistentDisk":
        need("pdName")
    elif kind in ("awsElasticBlockStore", "cinder", "portworxVolume"):
        need("volumeID")
    return errs


def _validate_volumes(volumes: Any, pod_name: str,
                      path: Path) -> tuple[dict[str, dict[str, Any]], list[FieldError]]:
    """`ValidateVolumes`: returns the valid volumes by name (mounts may refer only to those)
    and the errors."""
    errs: list[FieldError] = []
    valid: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for i, volume in _items(volumes):
        item_path = path.index(i)
        name_path = item_path.child("name")
        name = _s(volume.get("name"))
        item_errs: list[FieldError] = []
        count = 0
        for kind in VOLUME_SOURCES:
            source = volume.get(kind)
            if source is None:
                continue
            if count > 0:
                item_errs.append(field.forbidden(item_path.child(
                    _VOLUME_FORBIDDEN_PATH.get(kind, kind)), "may not specify more than 1 "
                    "volume type"))
                continue
            count += 1
            item_errs.extend(_volume_source(kind, _d(source), item_path.child(kind), name,
                                            pod_name))
        if count == 0:
            item_errs.append(field.required(item_path, "must specify a volume type"))
        if not name:
            item_errs.append(field.required(name_path))
        else:
            item_errs.extend(v.validate_dns1123_label(name, name_path))
        if name in seen:
            item_errs.append(field.duplicate(name_path, name))
        if item_errs:
            errs.extend(item_errs)
        else:
            seen.add(name)
            valid[name] = volume
    return valid, errs


# --- containers ---------------------------------------------------------------------------


def _pull_policy(policy: Any, path: Path) -> list[FieldError]:
    if policy in ("Always", "IfNotPresent", "Never"):
        return []
    if not policy:
        return [field.required(path)]
    return [field.not_supported(path, policy, ["Always", "IfNotPresent", "Never"])]


def _validate_ports(ports: Any, path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    names: set[str] = set()
    for i, port in _items(ports):
        p = path.index(i)
        name = _s(port.get("name"))
        if name:
            messages = v.port_name_errors(name)
            if messages:
                errs.extend(field.invalid(p.child("name"), name, m) for m in messages)
            elif name in names:
                errs.append(field.duplicate(p.child("name"), name))
            else:
                names.add(name)
        container_port = _int(port.get("containerPort")) or 0
        if container_port == 0:
            errs.append(field.required(p.child("containerPort")))
        else:
            errs.extend(field.invalid(p.child("containerPort"), container_port, m)
                        for m in v.port_num_errors(container_port))
        host_port = _int(port.get("hostPort")) or 0
        if host_port:
            errs.extend(field.invalid(p.child("hostPort"), host_port, m)
                        for m in v.port_num_errors(host_port))
        protocol = port.get("protocol")
        if not protocol:
            errs.append(field.required(p.child("protocol")))
        elif protocol not in ("TCP", "UDP", "SCTP"):
            errs.append(field.not_supported(p.child("protocol"), protocol,
                                            ["SCTP", "TCP", "UDP"]))
    return errs


def _key_selector(ref: Mapping[str, Any], path: Path) -> list[FieldError]:
    errs = [field.invalid(path.child("name"), _s(ref.get("name")), m)
            for m in meta.name_errors(_s(ref.get("name")))]
    key = _s(ref.get("key"))
    if not key:
        errs.append(field.required(path.child("key")))
    else:
        errs.extend(field.invalid(path.child("key"), key, m) for m in v.config_map_key_errors(key))
    return errs


def _validate_env(env: Any, path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, var in _items(env):
        p = path.index(i)
        name = _s(var.get("name"))
        if not name:
            errs.append(field.required(p.child("name")))
        else:
            errs.extend(field.invalid(p.child("name"), name, m)
                        for m in v.env_var_name_errors(name))
        value_from = var.get("valueFrom")
        if not isinstance(value_from, dict):
            continue
        vf_path = p.child("valueFrom")
        count = 0
        if isinstance(value_from.get("fieldRef"), dict):
            count += 1
            errs.extend(_object_field_selector(value_from["fieldRef"], _ENV_FIELD_PATHS,
                                               vf_path.child("fieldRef")))
        if isinstance(value_from.get("resourceFieldRef"), dict):
            count += 1
            errs.extend(_resource_field_selector(value_from["resourceFieldRef"],
                                                 vf_path.child("resourceFieldRef"), False))
        for kind in ("configMapKeyRef", "secretKeyRef"):
            if isinstance(value_from.get(kind), dict):
                count += 1
                errs.extend(_key_selector(value_from[kind], vf_path.child(kind)))
        if isinstance(value_from.get("fileKeyRef"), dict):
            count += 1
        if count == 0:
            errs.append(field.invalid(vf_path, "", "must specify one of: `fieldRef`, "
                                      "`resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"))
        elif _s(var.get("value")):
            errs.append(field.invalid(vf_path, "",
                                      "may not be specified when `value` is not empty"))
        elif count > 1:
            errs.append(field.invalid(vf_path, "",
                                      "may not have more than one field specified at a time"))
    return errs


def _validate_env_from(env_from: Any, path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, source in _items(env_from):
        p = path.index(i)
        prefix = _s(source.get("prefix"))
        if prefix:
            errs.extend(field.invalid(p.child("prefix"), prefix, m)
                        for m in v.env_var_name_errors(prefix))
        count = 0
        for kind in ("configMapRef", "secretRef"):
            ref = source.get(kind)
            if not isinstance(ref, dict):
                continue
            count += 1
            name = _s(ref.get("name"))
            if not name:
                errs.append(field.required(p.child(kind).child("name")))
            else:
                errs.extend(field.invalid(p.child(kind).child("name"), name, m)
                            for m in meta.name_errors(name, prefix=True))
        if count == 0:
            errs.append(field.invalid(path, "", "must specify one of: `configMapRef` or "
                                      "`secretRef`"))
        elif count > 1:
            errs.append(field.invalid(path, "",
                                      "may not have more than one field specified at a time"))
    return errs


def _privileged(c: Mapping[str, Any]) -> bool:
    return _d(c.get("securityContext")).get("privileged") is True


def _validate_volume_mounts(c: Mapping[str, Any], volumes: Mapping[str, Any],
                            path: Path) -> list[FieldError]:
    """`ValidateVolumeMounts`; the subPath, subPathExpr, mountPropagation and
    recursiveReadOnly errors sit on the list's path without an index, as upstream's do."""
    errs: list[FieldError] = []
    devices = {_s(d.get("name")): _s(d.get("devicePath"))
               for _, d in _items(c.get("volumeDevices"))}
    mount_points: set[str] = set()
    for i, mount in _items(c.get("volumeMounts")):
        p = path.index(i)
        name, mount_path = _s(mount.get("name")), _s(mount.get("mountPath"))
        if not name:
            errs.append(field.required(p.child("name")))
        if name not in volumes:
            errs.append(field.not_found(p.child("name"), name))
        if not mount_path:
            errs.append(field.required(p.child("mountPath")))
        if mount_path in mount_points:
            errs.append(field.invalid(p.child("mountPath"), mount_path, "must be unique"))
        mount_points.add(mount_path)
        if name in devices:
            errs.append(field.invalid(p.child("name"), name,
                                      "must not already exist in volumeDevices"))
        if mount_path in devices.values():
            errs.append(field.invalid(p.child("mountPath"), mount_path,
                                      "must not already exist as a path in volumeDevices"))
        sub_path, sub_path_expr = _s(mount.get("subPath")), _s(mount.get("subPathExpr"))
        if sub_path:
            errs.extend(_local_descending_path(sub_path, path.child("subPath")))
        if sub_path_expr:
            if sub_path:
                errs.append(field.invalid(p.child("subPathExpr"), sub_path_expr,
                                          "subPathExpr and subPath are mutually exclusive"))
            errs.extend(_local_descending_path(sub_path_expr, path.child("subPathExpr")))
        propagation = mount.get("mountPropagation")
        if propagation is not None:
            prop_path = path.child("mountPropagation")
            if propagation not in ("Bidirectional", "HostToContainer", "None"):
                errs.append(field.not_supported(prop_path, propagation,
                                                ["Bidirectional", "HostToContainer", "None"]))
            if propagation == "Bidirectional" and not _privileged(c):
                errs.append(field.forbidden(prop_path, "Bidirectional mount propagation is "
                                            "available only to privileged containers"))
        rro = mount.get("recursiveReadOnly")
        if rro is not None and rro != "Disabled":
            rro_path = path.child("recursiveReadOnly")
            if rro in ("Enabled", "IfPossible"):
                if mount.get("readOnly") is not True:
                    errs.append(field.forbidden(rro_path,
                                                "may only be specified when readOnly is true"))
                if propagation not in (None, "None"):
                    errs.append(field.forbidden(rro_path, "may only be specified when "
                                                "mountPropagation is None or not specified"))
            else:
                errs.append(field.not_supported(rro_path, rro,
                                                ["Disabled", "Enabled", "IfPossible"]))
    return errs


def _validate_volume_devices(c: Mapping[str, Any], volumes: Mapping[str, Any],
                             path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    mounts = {_s(m.get("name")): _s(m.get("mountPath")) for _, m in _items(c.get("volumeMounts"))}
    device_paths: set[str] = set()
    device_names: set[str] = set()
    for i, device in _items(c.get("volumeDevices")):
        p = path.index(i)
        name, device_path = _s(device.get("name")), _s(device.get("devicePath"))
        volume = volumes.get(name)
        if not name:
            errs.append(field.required(p.child("name")))
        if name in device_names:
            errs.append(field.invalid(p.child("name"), name, "must be unique"))
        if volume is not None and volume.get("persistentVolumeClaim") is None and \
                volume.get("ephemeral") is None:
            errs.append(field.invalid(p.child("name"), name, "can only use volume source type "
                                      "of PersistentVolumeClaim or Ephemeral for block mode"))
        if volume is None:
            errs.append(field.not_found(p.child("name"), name))
        if not device_path:
            errs.append(field.required(p.child("devicePath")))
        if device_path in device_paths:
            errs.append(field.invalid(p.child("devicePath"), device_path, "must be unique"))
        if device_path and _path_no_backsteps(device_path, p):
            errs.append(field.invalid(p.child("devicePath"), device_path,
                                      "can not contain backsteps ('..')"))
        else:
            device_paths.add(device_path)
        if name in mounts:
            errs.append(field.invalid(p.child("name"), name,
                                      "must not already exist in volumeMounts"))
        if device_path in mounts.values():
            errs.append(field.invalid(p.child("devicePath"), device_path,
                                      "must not already exist as a path in volumeMounts"))
        if name:
            device_names.add(name)
    return errs


def _validate_resize_policy(policies: Any, path: Path, restart_policy: str) -> list[FieldError]:
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, policy in _items(policies):
        name, restart = _s(policy.get("resourceName")), _s(policy.get("restartPolicy"))
        if name in seen:
            errs.append(field.duplicate(path.index(i), name))
        seen.add(name)
        if not name:
            errs.append(field.required(path))
        elif name not in _QOS_RESOURCES:
            errs.append(field.not_supported(path, name, ["cpu", "memory"]))
        if not restart:
            errs.append(field.required(path))
        elif restart not in ("NotRequired", "RestartContainer"):
            errs.append(field.not_supported(path, restart, ["NotRequired", "RestartContainer"]))
        if restart_policy == "Never" and restart != "NotRequired":
            errs.append(field.invalid(path, restart,
                                      "must be 'NotRequired' when `restartPolicy` is 'Never'"))
    return errs


def _seccomp(profile: Any, path: Path) -> list[FieldError]:
    if not isinstance(profile, dict):
        return []
    kind = _s(profile.get("type"))
    errs: list[FieldError] = []
    if kind == "Localhost":
        if not _s(profile.get("localhostProfile")):
            errs.append(field.required(path.child("localhostProfile"),
                                       "must be set when seccomp type is Localhost"))
    elif kind in ("RuntimeDefault", "Unconfined"):
        if profile.get("localhostProfile") is not None:
            errs.append(field.invalid(path.child("localhostProfile"),
                                      profile["localhostProfile"],
                                      "can only be set when seccomp type is Localhost"))
    elif not kind:
        errs.append(field.required(path.child("type"), "type is required when seccompProfile "
                                   "is set"))
    else:
        errs.append(field.not_supported(path.child("type"), kind,
                                        ["Localhost", "RuntimeDefault", "Unconfined"]))
    return errs


def _id_range(value: Any, path: Path) -> list[FieldError]:
    number = _int(value)
    if number is not None and not 0 <= number <= 0xFFFFFFFF:
        return [field.invalid(path, number, v.inclusive_range_error(0, 0xFFFFFFFF))]
    return []


def _validate_security_context(sc: Any, path: Path, host_users: bool) -> list[FieldError]:
    """`ValidateSecurityContext` (a container's)."""
    if not isinstance(sc, dict):
        return []
    errs = _id_range(sc.get("runAsUser"), path.child("runAsUser"))
    errs.extend(_id_range(sc.get("runAsGroup"), path.child("runAsGroup")))
    proc_mount = sc.get("procMount")
    if proc_mount is not None:
        if proc_mount not in ("Default", "Unmasked"):
            errs.append(field.not_supported(path.child("procMount"), proc_mount,
                                            ["Default", "Unmasked"]))
        if host_users and proc_mount == "Unmasked":
            errs.append(field.invalid(path.child("procMount"), proc_mount,
                                      "`hostUsers` must be false to use `Unmasked`"))
    errs.extend(_seccomp(sc.get("seccompProfile"), path.child("seccompProfile")))
    if sc.get("allowPrivilegeEscalation") is False:
        if sc.get("privileged") is True:
            errs.append(field.invalid(path, sc, "cannot set `allowPrivilegeEscalation` to false "
                                      "and `privileged` to true"))
        for cap in _d(sc.get("capabilities")).get("add") or []:
            if cap == "CAP_SYS_ADMIN":
                errs.append(field.invalid(path, sc, "cannot set `allowPrivilegeEscalation` to "
                                          "false and `capabilities.Add` CAP_SYS_ADMIN"))
    return errs


def _validate_handler(handler: Mapping[str, Any], grace: int | None, path: Path,
                      probe: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    count = 0
    kinds = ("exec", "httpGet", "tcpSocket", "grpc") if probe else \
        ("exec", "httpGet", "tcpSocket", "sleep")
    for kind in kinds:
        action = handler.get(kind)
        if not isinstance(action, dict):
            continue
        if count > 0:
            errs.append(field.forbidden(path.child(kind),
                                        "may not specify more than 1 handler type"))
            continue
        count += 1
        p = path.child(kind)
        if kind == "exec" and not action.get("command"):
            errs.append(field.required(p.child("command")))
        elif kind == "httpGet":
            if not _s(action.get("path")):
                errs.append(field.required(p.child("path")))
            errs.extend(_port_num_or_name(action.get("port"), p.child("port")))
            scheme = action.get("scheme")
            if scheme not in ("HTTP", "HTTPS"):
                errs.append(field.not_supported(p.child("scheme"), scheme or "",
                                                ["HTTP", "HTTPS"]))
        elif kind == "tcpSocket":
            errs.extend(_port_num_or_name(action.get("port"), p.child("port")))
        elif kind == "grpc":
            errs.extend(_port_num_or_name(_int(action.get("port")) or 0, p.child("port")))
        elif kind == "sleep":
            seconds = _int(action.get("seconds")) or 0
            if grace is not None and (seconds < 0 or seconds > grace):
                errs.append(field.invalid(p, seconds, "must be non-negative and less than "
                                          f"terminationGracePeriodSeconds ({grace})"))
    if count == 0:
        errs.append(field.required(path, "must specify a handler type"))
    return errs


def _port_num_or_name(port: Any, path: Path) -> list[FieldError]:
    if isinstance(port, str):
        return [field.invalid(path, port, m) for m in v.port_name_errors(port)]
    number = _int(port) or 0
    return [field.invalid(path, number, m) for m in v.port_num_errors(number)]


def _validate_probe(probe: Any, grace: int | None, path: Path, kind: str) -> list[FieldError]:
    if not isinstance(probe, dict):
        return []
    errs = _validate_handler(probe, grace, path, probe=True)
    for key in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold",
                "failureThreshold"):
        errs.extend(v.validate_nonnegative_field(_int(probe.get(key)) or 0, path.child(key)))
    tgps = _int(probe.get("terminationGracePeriodSeconds"))
    if tgps is not None and tgps <= 0:
        errs.append(field.invalid(path.child("terminationGracePeriodSeconds"), tgps,
                                  "must be greater than 0"))
    if kind in ("livenessProbe", "startupProbe") and probe.get("successThreshold", 1) != 1:
        errs.append(field.invalid(path.child("successThreshold"), probe.get("successThreshold"),
                                  "must be 1"))
    if kind == "readinessProbe" and tgps is not None:
        errs.append(field.invalid(path.child("terminationGracePeriodSeconds"), tgps,
                                  "must not be set for readinessProbes"))
    return errs


def _validate_lifecycle_and_probes(c: Mapping[str, Any], grace: int | None,
                                   path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    lifecycle = c.get("lifecycle")
    if isinstance(lifecycle, dict):
        for hook in ("postStart", "preStop"):
            if isinstance(lifecycle.get(hook), dict):
                errs.extend(_validate_handler(lifecycle[hook], grace,
                                              path.child("lifecycle").child(hook), probe=False))
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        errs.extend(_validate_probe(c.get(kind), grace, path.child(kind), kind))
    return errs


def _validate_container_common(c: Mapping[str, Any], volumes: Mapping[str, Any],
                               claim_names: set[str], path: Path, restart_policy: str,
                               host_users: bool, hot_plug: bool = False) -> list[FieldError]:
    """`validateContainerCommon`: what every kind of container must satisfy."""
    errs: list[FieldError] = []
    name = _s(c.get("name"))
    if not name:
        errs.append(field.required(path.child("name")))
    else:
        errs.extend(v.validate_dns1123_label(name, path.child("name")))
    if not _s(c.get("image")):
        errs.append(field.required(path.child("image")))
    policy = c.get("terminationMessagePolicy")
    if not policy:
        errs.append(field.required(path.child("terminationMessagePolicy")))
    elif policy not in ("File", "FallbackToLogsOnError"):
        errs.append(field.not_supported(path.child("terminationMessagePolicy"), policy,
                                        ["File", "FallbackToLogsOnError"]))
    errs.extend(_validate_ports(c.get("ports"), path.child("ports")))
    errs.extend(_validate_env(c.get("env"), path.child("env")))
    errs.extend(_validate_env_from(c.get("envFrom"), path.child("envFrom")))
    errs.extend(_validate_volume_mounts(c, volumes, path.child("volumeMounts")))
    errs.extend(_validate_volume_devices(c, volumes, path.child("volumeDevices")))
    errs.extend(_pull_policy(c.get("imagePullPolicy"), path.child("imagePullPolicy")))
    errs.extend(_validate_resource_requirements(
        _d(c.get("resources")), validate_container_resource_name, claim_names,
        path.child("resources")))
    errs.extend(_validate_resize_policy(c.get("resizePolicy"), path.child("resizePolicy"),
                                        restart_policy))
    errs.extend(_validate_security_context(c.get("securityContext"),
                                           path.child("securityContext"), host_users))
    dynamic = c.get("dynamicVolumePolicy")
    if isinstance(dynamic, dict):  # KEP-6395 (NotRequired: ephemera's DynamicVolumeHotPlug)
        restart = dynamic.get("restartPolicy")
        supported = list(DYNAMIC_VOLUME_RESTART_POLICIES if hot_plug
                         else (DYNAMIC_VOLUME_RESTART_CONTAINER,))
        if restart not in (None, "", *supported):
            errs.append(field.not_supported(path.child("dynamicVolumePolicy", "restartPolicy"),
                                            restart, supported))
    return errs


@dataclass
class _PodContext:
    volumes: Mapping[str, Any]
    claim_names: set[str]
    grace: int | None
    restart_policy: str
    host_users: bool
    hot_plug: bool = False  # DynamicVolumeHotPlug: dynamicVolumePolicy may be NotRequired


def _validate_containers(containers: Any, ctx: _PodContext, path: Path) -> list[FieldError]:
    if not containers or not isinstance(containers, list):
        return [field.required(path)]
    errs: list[FieldError] = []
    names: set[str] = set()
    for i, c in _items(containers):
        p = path.index(i)
        errs.extend(_validate_container_common(c, ctx.volumes, ctx.claim_names, p,
                                               ctx.restart_policy, ctx.host_users,
                                               ctx.hot_plug))
        name = _s(c.get("name"))
        if name in names:
            errs.append(field.duplicate(p.child("name"), name))
        else:
            names.add(name)
        errs.extend(_validate_lifecycle_and_probes(c, ctx.grace, p))
        if c.get("restartPolicy") is not None:
            errs.append(field.forbidden(p.child("restartPolicy"),
                                        "may not be set for non-init containers"))
    errs.extend(_host_port_conflicts(list(_items(containers)), path))
    return errs


def _host_port_conflicts(containers: list[tuple[int, dict[str, Any]]],
                         path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, c in containers:
        for j, port in _items(c.get("ports")):
            host_port = _int(port.get("hostPort")) or 0
            if not host_port:
                continue
            key = f"{_s(port.get('protocol'))}/{_s(port.get('hostIP'))}/{host_port}"
            if key in seen:
                errs.append(field.duplicate(path.index(i).child("ports").index(j)
                                            .child("hostPort"), key))
            seen.add(key)
    return errs


def _validate_init_containers(init: Any, containers: Any, ctx: _PodContext,
                              path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    names = {_s(c.get("name")) for _, c in _items(containers)}
    for i, c in _items(init):
        p = path.index(i)
        errs.extend(_validate_container_common(c, ctx.volumes, ctx.claim_names, p,
                                               ctx.restart_policy, ctx.host_users,
                                               ctx.hot_plug))
        restart_always = False
        restart = c.get("restartPolicy")
        if restart is not None:
            if restart != "Always":
                errs.append(field.not_supported(p.child("restartPolicy"), restart, ["Always"]))
            restart_always = restart == "Always"
        name = _s(c.get("name"))
        if name in names:
            errs.append(field.duplicate(p.child("name"), name))
        elif name:
            names.add(name)
        errs.extend(_host_port_conflicts([(i, c)], path))
        if restart_always:
            errs.extend(_validate_lifecycle_and_probes(c, ctx.grace, p))
        else:
            for key in ("lifecycle", "livenessProbe", "readinessProbe", "startupProbe"):
                if c.get(key) is not None:
                    errs.append(field.forbidden(p.child(key), _RESTARTABLE_ONLY))
    return errs


_EPHEMERAL_ALLOWED = frozenset({
    "name", "image", "command", "args", "workingDir", "envFrom", "env", "volumeMounts",
    "volumeDevices", "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy",
    "securityContext", "stdin", "stdinOnce", "tty", "targetContainerName",
})
_EPHEMERAL_ORDER = ("ports", "resources", "resizePolicy", "restartPolicy", "restartPolicyRules",
                    "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
                    "dynamicVolumePolicy")


def _validate_ephemeral_containers(ephemeral: Any, containers: Any, init: Any, ctx: _PodContext,
                                   path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    if not ephemeral:
        return errs
    other = {_s(c.get("name")) for _, c in _items(containers)} | \
        {_s(c.get("name")) for _, c in _items(init)}
    names = set(other)
    for i, c in _items(ephemeral):
        p = path.index(i)
        errs.extend(_validate_container_common(c, ctx.volumes, ctx.claim_names, p,
                                               ctx.restart_policy, ctx.host_users,
                                               ctx.hot_plug))
        errs.extend(_container_only_for_pod(c, p))
        name = _s(c.get("name"))
        if name in names:
            errs.append(field.duplicate(p.child("name"), name))
        else:
            names.add(name)
        target = _s(c.get("targetContainerName"))
        if target and target not in other:
            errs.append(field.not_found(p.child("targetContainerName"), target))
        for key in _EPHEMERAL_ORDER:
            value = c.get(key)
            if value not in (None, {}, [], "", False, 0):
                errs.append(field.forbidden(p.child(key),
                                            "cannot be set for an Ephemeral Container"))
        for j, mount in _items(c.get("volumeMounts")):
            for key in ("subPath", "subPathExpr"):
                if _s(mount.get(key)):
                    errs.append(field.forbidden(p.child("volumeMounts").index(j).child(key),
                                                "cannot be set for an Ephemeral Container"))
    return errs


def _container_only_for_pod(c: Mapping[str, Any], path: Path) -> list[FieldError]:
    image = _s(c.get("image"))
    if image != image.strip():
        return [field.invalid(path.child("image"), image,
                              "must not have leading or trailing whitespace")]
    return []


# --- the pod spec -------------------------------------------------------------------------


def _validate_tolerations(tolerations: Any, path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, t in _items(tolerations):
        p = path.index(i)
        key, operator = _s(t.get("key")), _s(t.get("operator"))
        value, effect = _s(t.get("value")), _s(t.get("effect"))
        if key:
            errs.extend(v.validate_label_name(key, p.child("key")))
        if not key and operator != "Exists":
            errs.append(field.invalid(p.child("operator"), operator, "operator must be Exists "
                                      'when `key` is empty, which means "match all values and '
                                      'all keys"'))
        if t.get("tolerationSeconds") is not None and effect != "NoExecute":
            errs.append(field.invalid(p.child("effect"), effect,
                                      "effect must be 'NoExecute' when `tolerationSeconds` is set"))
        if operator in ("Equal", ""):
            messages = meta.label_value_errors(value)
            if messages:
                errs.append(field.invalid(p.child("operator"), value, ";".join(messages)))
        elif operator == "Exists":
            if value:
                errs.append(field.invalid(p.child("operator"), value,
                                          "value must be empty when `operator` is 'Exists'"))
        else:
            errs.append(field.not_supported(p.child("operator"), operator, ["Equal", "Exists"]))
        if effect and effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            errs.append(field.not_supported(p.child("effect"), effect,
                                            ["NoSchedule", "PreferNoSchedule", "NoExecute"]))
    return errs


def _ip_errors(value: str, path: Path) -> list[FieldError]:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return [field.invalid(path, value,
                              "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)")]
    return []


def _validate_dns_config(spec: Mapping[str, Any], path: Path) -> list[FieldError]:
    config, policy = spec.get("dnsConfig"), spec.get("dnsPolicy")
    if policy == "None":
        if not isinstance(config, dict):
            return [field.required(path, "must provide `dnsConfig` when `dnsPolicy` is None")]
        if not config.get("nameservers"):
            return [field.required(path.child("nameservers"), "must provide at least one DNS "
                                   "nameserver when `dnsPolicy` is None")]
    if not isinstance(config, dict):
        return []
    errs: list[FieldError] = []
    nameservers = [_s(n) for n in config.get("nameservers") or []]
    if len(nameservers) > 3:
        errs.append(field.invalid(path.child("nameservers"), nameservers,
                                  "must not have more than 3 nameservers"))
    for i, server in enumerate(nameservers):
        errs.extend(_ip_errors(server, path.child("nameservers").index(i)))
    searches = [_s(s) for s in config.get("searches") or []]
    if len(searches) > 32:
        errs.append(field.invalid(path.child("searches"), searches,
                                  "must not have more than 32 search paths"))
    if len(" ".join(searches)) > 2048:
        errs.append(field.invalid(path.child("searches"), searches, "must not have more than "
                                  "2048 characters (including spaces) in the search list"))
    for i, search in enumerate(searches):
        if search != ".":
            search = search.removesuffix(".")
            errs.extend(field.invalid(path.child("searches").index(i), search, m)
                        for m in _dns_subdomain_with_underscore(search))
    for i, option in _items(config.get("options")):
        if not _s(option.get("name")):
            errs.append(field.required(path.child("options").index(i), "must not be empty"))
    return errs


_SUBDOMAIN_UNDERSCORE_FMT = r"_?[a-z0-9]([-_a-z0-9]*[a-z0-9])?(\._?[a-z0-9]([-_a-z0-9]*[a-z0-9])?)*"


def _dns_subdomain_with_underscore(value: str) -> list[str]:
    errs: list[str] = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not re.fullmatch(_SUBDOMAIN_UNDERSCORE_FMT, value):
        errs.append(meta.regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'_', '-' or '.', and must start and end with an alphanumeric character",
            _SUBDOMAIN_UNDERSCORE_FMT, "example.com"))
    return errs


def _validate_pod_security_context(spec: Mapping[str, Any], path: Path) -> list[FieldError]:
    sc = spec.get("securityContext")
    if not isinstance(sc, dict):
        return []
    errs = _id_range(sc.get("fsGroup"), path.child("fsGroup"))
    errs.extend(_id_range(sc.get("runAsUser"), path.child("runAsUser")))
    errs.extend(_id_range(sc.get("runAsGroup"), path.child("runAsGroup")))
    for i, gid in enumerate(sc.get("supplementalGroups") or []):
        errs.extend(_id_range(gid, path.child("supplementalGroups").index(i)))
    if spec.get("shareProcessNamespace") is True and spec.get("hostPID") is True:
        errs.append(field.invalid(path.child("shareProcessNamespace"), True,
                                  "ShareProcessNamespace and HostPID cannot both be enabled"))
    seen: set[str] = set()
    for i, sysctl in _items(sc.get("sysctls")):
        name = _s(sysctl.get("name"))
        p = path.child("sysctls").index(i).child("name")
        if not name:
            errs.append(field.required(p))
        elif name in seen:
            errs.append(field.duplicate(p, name))
        seen.add(name)
    for key, allowed in (("fsGroupChangePolicy", ["Always", "OnRootMismatch"]),
                         ("supplementalGroupsPolicy", ["Merge", "Strict"]),
                         ("seLinuxChangePolicy", ["MountOption", "Recursive"])):
        value = sc.get(key)
        if value is not None and value not in allowed:
            errs.append(field.not_supported(path.child(key), value, allowed))
    errs.extend(_seccomp(sc.get("seccompProfile"), path.child("seccompProfile")))
    return errs


def _name_field(value: Any, path: Path, *, label: bool = False) -> list[FieldError]:
    text = _s(value)
    if not text:
        return []
    messages = meta.dns1123_label_errors(text) if label else meta.name_errors(text)
    return [field.invalid(path, text, m) for m in messages]


def validate_pod_spec(spec: Mapping[str, Any], md: Mapping[str, Any], path: Path,
                      gates: Mapping[str, bool]) -> list[FieldError]:
    """`ValidatePodSpec` for a pod (the defaulted spec)."""
    return _validate_pod_spec(spec, md, path, _Options.of(gates))


def _validate_pod_spec(spec: Mapping[str, Any], md: Mapping[str, Any], path: Path,
                       opts: _Options) -> list[FieldError]:
    errs: list[FieldError] = []
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is None:
        errs.append(field.required(path.child("terminationGracePeriodSeconds")))
    elif _int(grace) is not None:
        errs.extend(v.validate_nonnegative_field(grace,
                                                 path.child("terminationGracePeriodSeconds")))
    host_users = spec.get("hostUsers") is not False
    volumes, volume_errs = _validate_volumes(spec.get("volumes"), _s(md.get("name")),
                                             path.child("volumes"))
    errs.extend(volume_errs)
    claim_names = {_s(c.get("name")) for _, c in _items(spec.get("resourceClaims"))
                   if _s(c.get("name"))}
    errs.extend(_validate_pod_resource_claims(spec.get("resourceClaims"),
                                              path.child("resourceClaims")))
    restart_policy = _s(spec.get("restartPolicy"))
    ctx = _PodContext(volumes, claim_names, _int(grace), restart_policy, host_users,
                      opts.gates[DYNAMIC_VOLUME_HOT_PLUG])
    errs.extend(_validate_containers(spec.get("containers"), ctx, path.child("containers")))
    errs.extend(_validate_init_containers(spec.get("initContainers"), spec.get("containers"),
                                          ctx, path.child("initContainers")))
    errs.extend(_validate_ephemeral_containers(
        spec.get("ephemeralContainers"), spec.get("containers"), spec.get("initContainers"),
        ctx, path.child("ephemeralContainers")))
    if opts.pod_level_resources:
        errs.extend(_validate_pod_resources(spec, claim_names, path.child("resources"), opts))
    if spec.get("hostNetwork") is True:
        for i, c in _items(spec.get("containers")):
            for j, port in _items(c.get("ports")):
                host_port = _int(port.get("hostPort")) or 0
                if host_port != (_int(port.get("containerPort")) or 0):
                    errs.append(field.invalid(
                        path.child("containers").index(i).child("ports").index(j)
                        .child("hostPort"), host_port,
                        "must match `containerPort` when `hostNetwork` is true"))
    if restart_policy not in ("Always", "OnFailure", "Never"):
        errs.append(field.required(path.child("restartPolicy")) if not restart_policy else
                    field.not_supported(path.child("restartPolicy"), restart_policy,
                                        ["Always", "OnFailure", "Never"]))
    dns_policy = _s(spec.get("dnsPolicy"))
    if dns_policy not in ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"):
        errs.append(field.required(path.child("dnsPolicy")) if not dns_policy else
                    field.not_supported(path.child("dnsPolicy"), dns_policy,
                                        ["ClusterFirstWithHostNet", "ClusterFirst", "Default",
                                         "None"]))
    errs.extend(v.validate_labels(spec.get("nodeSelector"), path.child("nodeSelector")))
    errs.extend(_validate_pod_security_context(spec, path.child("securityContext")))
    for i, secret in _items(spec.get("imagePullSecrets")):
        if set(secret) - {"name"}:
            errs.append(field.invalid(path.child("imagePullSecrets").index(i), secret,
                                      "only name may be set"))
    errs.extend(_validate_dns_config(spec, path.child("dnsConfig")))
    for i, gate in _items(spec.get("readinessGates")):
        errs.extend(v.validate_qualified_name(
            _s(gate.get("conditionType")), path.child("readinessGates").index(i)
            .child("conditionType")))
    seen_gates: set[str] = set()
    for i, gate in _items(spec.get("schedulingGates")):
        name = _s(gate.get("name"))
        errs.extend(v.validate_qualified_name(name, path.child("schedulingGates").index(i)))
        if name in seen_gates:
            errs.append(field.duplicate(path.child("schedulingGates").index(i), name))
        seen_gates.add(name)
    if not host_users:
        for key, name in (("hostNetwork", "hostNetwork"), ("hostPID", "HostPID"),
                          ("hostIPC", "HostIPC")):
            if spec.get(key) is True:
                errs.append(field.forbidden(path.child(name),
                                            "when `pod.Spec.HostUsers` is false"))
    errs.extend(_name_field(spec.get("serviceAccountName"), path.child("serviceAccountName")))
    errs.extend(_name_field(spec.get("nodeName"), path.child("nodeName")))
    deadline = _int(spec.get("activeDeadlineSeconds"))
    if deadline is not None and not 1 <= deadline <= v.MAX_INT32:
        errs.append(field.invalid(path.child("activeDeadlineSeconds"), deadline,
                                  v.inclusive_range_error(1, v.MAX_INT32)))
    errs.extend(_name_field(spec.get("hostname"), path.child("hostname"), label=True))
    errs.extend(_name_field(spec.get("subdomain"), path.child("subdomain"), label=True))
    errs.extend(_validate_tolerations(spec.get("tolerations"), path.child("tolerations")))
    for i, alias in _items(spec.get("hostAliases")):
        p = path.child("hostAliases").index(i)
        errs.extend(_ip_errors(_s(alias.get("ip")), p.child("ip")))
        for j, hostname in enumerate(alias.get("hostnames") or []):
            errs.extend(v.validate_dns1123_subdomain(_s(hostname),
                                                     p.child("hostnames").index(j)))
    errs.extend(_name_field(spec.get("priorityClassName"), path.child("priorityClassName")))
    if spec.get("runtimeClassName") is not None:
        errs.extend(field.invalid(path.child("runtimeClassName"), spec["runtimeClassName"], m)
                    for m in meta.name_errors(_s(spec["runtimeClassName"])))
    preemption = spec.get("preemptionPolicy")
    if preemption is not None and preemption not in ("PreemptLowerPriority", "Never"):
        errs.append(field.required(path.child("preemptionPolicy")) if not preemption else
                    field.not_supported(path.child("preemptionPolicy"), preemption,
                                        ["PreemptLowerPriority", "Never"]))
    if spec.get("overhead") is not None:
        errs.extend(_validate_resource_requirements(
            {"limits": spec["overhead"]}, validate_container_resource_name, set(),
            path.child("overhead")))
    os_spec = spec.get("os")
    if isinstance(os_spec, dict):
        os_name = _s(os_spec.get("name"))
        if not os_name:
            errs.append(field.required(path.child("os").child("name")))
        elif os_name not in ("linux", "windows"):
            errs.append(field.not_supported(path.child("os").child("name"), os_name,
                                            ["linux", "windows"]))
    return errs


def _validate_pod_resource_claims(claims: Any, path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, claim in _items(claims):
        p = path.index(i)
        name = _s(claim.get("name"))
        if not name:
            errs.append(field.required(p.child("name")))
        elif name in seen:
            errs.append(field.duplicate(p.child("name"), name))
        else:
            errs.extend(v.validate_dns1123_label(name, p.child("name")))
            seen.add(name)
    return errs


# --- the pod ------------------------------------------------------------------------------


def _md(pod: Mapping[str, Any]) -> dict[str, Any]:
    return _d(pod.get("metadata"))


def _spec(pod: Mapping[str, Any]) -> dict[str, Any]:
    return _d(pod.get("spec"))


def _validate_pod_annotations(md: Mapping[str, Any], spec: Mapping[str, Any],
                              path: Path) -> list[FieldError]:
    """`ValidatePodSpecificAnnotations` (mirror pods and the deletion cost)."""
    errs: list[FieldError] = []
    annotations = _d(md.get("annotations"))
    if _MIRROR_POD_ANNOTATION in annotations and not _s(spec.get("nodeName")):
        errs.append(field.invalid(path.key(_MIRROR_POD_ANNOTATION),
                                  annotations[_MIRROR_POD_ANNOTATION],
                                  "must set spec.nodeName if mirror pod annotation is set"))
    if _POD_DELETION_COST in annotations:
        cost = _s(annotations[_POD_DELETION_COST])
        valid = re.fullmatch(r"[+-]?[0-9]+", cost) is not None and \
            -(2**31) <= int(cost) <= v.MAX_INT32
        if not valid:
            errs.append(field.invalid(path.key(_POD_DELETION_COST), cost,
                                      "must be a 32bit integer"))
    return errs


def _validate_pod_metadata_and_spec(pod: Mapping[str, Any], opts: _Options) -> list[FieldError]:
    md, spec = _md(pod), _spec(pod)
    meta_path, spec_path = Path("metadata"), Path("spec")
    errs = v.validate_object_meta(md, namespaced=True)
    errs.extend(_validate_pod_annotations(md, spec, meta_path.child("annotations")))
    errs.extend(_validate_pod_spec(spec, md, spec_path, opts))
    if not _s(spec.get("serviceAccountName")):
        for i, volume in _items(spec.get("volumes")):
            for j, source in _items(_d(volume.get("projected")).get("sources")):
                if source.get("serviceAccountToken") is not None:
                    errs.append(field.forbidden(
                        spec_path.child("volumes").index(i).child("projected", "sources")
                        .index(j).child("serviceAccountToken"),
                        "must not be specified when serviceAccountName is not set"))
    for key in ("containers", "initContainers"):
        for i, c in _items(spec.get(key)):
            errs.extend(_container_only_for_pod(c, spec_path.child(key).index(i)))
    return errs


def validate_pod_create(pod: Mapping[str, Any], gates: Mapping[str, bool]) -> list[FieldError]:
    """`ValidatePodCreate` on a defaulted pod."""
    opts = _Options.of(gates)
    errs = _validate_pod_metadata_and_spec(pod, opts)
    spec = _spec(pod)
    if spec.get("ephemeralContainers"):
        errs.append(field.forbidden(Path("spec", "ephemeralContainers"),
                                    "cannot be set on create"))
    if _s(spec.get("nodeName")) and spec.get("schedulingGates"):
        errs.append(field.forbidden(Path("spec", "nodeName"),
                                    "cannot be set until all schedulingGates have been cleared"))
    return errs


def validate_pod_template_spec(template: Mapping[str, Any], path: Path,
                               gates: Mapping[str, bool],
                               old: Mapping[str, Any] | None = None) -> list[FieldError]:
    """`ValidatePodTemplateSpec` on a defaulted template (`spec.template` of the workload
    kinds): labels and annotations on the template's own path (`<path>.labels`), the pod's
    annotation rules, the pod spec with the same rules as a pod's (both KEPs' fields
    included; a feature the old template uses stays valid with its gate off) and no
    ephemeral containers."""
    md, spec = _md(template), _spec(template)
    opts = _Options.of(gates, old)
    errs = v.validate_labels(md.get("labels"), path.child("labels"))
    errs.extend(v.validate_annotations(md.get("annotations"), path.child("annotations")))
    errs.extend(_validate_pod_annotations(md, spec, path.child("annotations")))
    errs.extend(_validate_pod_spec(spec, md, path.child("spec"), opts))
    if spec.get("ephemeralContainers"):
        errs.append(field.forbidden(path.child("spec", "ephemeralContainers"),
                                    "ephemeral containers not allowed in pod template"))
    return errs


# --- updates ------------------------------------------------------------------------------

# Pointer fields of the Go types: for these an explicit zero value is not the same as unset.
_POINTER_FIELDS = frozenset({
    "terminationGracePeriodSeconds", "activeDeadlineSeconds", "priority",
    "automountServiceAccountToken", "shareProcessNamespace", "setHostnameAsFQDN",
    "enableServiceLinks", "hostUsers", "runAsUser", "runAsGroup", "runAsNonRoot", "fsGroup",
    "privileged", "readOnlyRootFilesystem", "allowPrivilegeEscalation", "defaultMode", "mode",
    "optional", "expirationSeconds", "tolerationSeconds", "readOnly", "sizeLimit",
    "restartPolicy", "preemptionPolicy", "runtimeClassName", "procMount", "recursiveReadOnly",
    "mountPropagation",
})
_QUANTITY_MAPS = frozenset({"limits", "requests", "overhead"})
_QUANTITY_FIELDS = frozenset({"sizeLimit", "divisor"})


_MAP_FIELDS = frozenset({"nodeSelector", "labels", "annotations", "matchLabels",
                         "volumeAttributes", "options"})


def _semantic(value: Any, key: str = "") -> Any:
    """A form of `value` that compares like `apiequality.Semantic.DeepEqual` on the Go
    types: empty and missing are the same, a zero scalar is the same as a missing one except
    for pointer fields, quantities compare by value, map entries are kept as they are."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, item in value.items():
            if key in _QUANTITY_MAPS or k in _QUANTITY_FIELDS:
                norm = _quantity_value(item)
            elif key in _MAP_FIELDS:
                norm = item
            else:
                norm = _semantic(item, k)
            if norm is _ABSENT or (_is_zero(norm) and k not in _POINTER_FIELDS
                                   and key not in _MAP_FIELDS):
                continue
            out[k] = norm
        return out if out else _ABSENT
    if isinstance(value, list):
        return tuple(_semantic(x) for x in value) if value else _ABSENT
    if value is None:
        return _ABSENT
    return value


_ABSENT: Any = object()


def _is_zero(value: Any) -> bool:
    return value is False or value == "" or (isinstance(value, int) and value == 0)


def _quantity_value(raw: Any) -> Any:
    if raw is None:
        return _ABSENT
    try:
        return ("quantity", quantity_from_json(raw).as_fraction())
    except (QuantityError, TypeError):
        return raw


def _semantic_equal(a: Any, b: Any) -> bool:
    """`apiequality.Semantic.DeepEqual` (`_semantic`). The same JSON value, types included
    (`same_json`), is equal without the walk: on a `/dynamic` update the spec compared is
    mostly the stored one's own subtrees."""
    if same_json(a, b):
        return True
    return bool(_freeze(_semantic(a)) == _freeze(_semantic(b)))


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in value.items()))
    if isinstance(value, tuple):
        return tuple(_freeze(x) for x in value)
    if value is _ABSENT:
        return "<absent>"
    if isinstance(value, Fraction):
        return ("fraction", value.numerator, value.denominator)
    return value


def _validate_container_updates(new: Any, old: Any, path: Path) -> tuple[list[FieldError], bool]:
    new_list = new if isinstance(new, list) else []
    old_list = old if isinstance(old, list) else []
    if len(new_list) != len(old_list):
        return [field.forbidden(path, "pod updates may not add or remove containers")], True
    errs: list[FieldError] = []
    for i, c in _items(new_list):
        image = _s(c.get("image"))
        if not image:
            errs.append(field.required(path.index(i).child("image")))
        if image != image.strip():
            errs.append(field.invalid(path.index(i).child("image"), image,
                                      "must not have leading or trailing whitespace"))
    return errs, False


def _tolerations_only_added(new: Any, old: Any, path: Path) -> list[FieldError]:
    new_list = [t for _, t in _items(new)]
    for _, previous in _items(old):
        wanted = {k: x for k, x in previous.items() if k != "tolerationSeconds"}
        if not any(_semantic_equal(wanted, {k: x for k, x in t.items()
                                            if k != "tolerationSeconds"}) for t in new_list):
            return [field.forbidden(path, "existing toleration can not be modified except its "
                                    "tolerationSeconds")]
    return _validate_tolerations(new, path)


def _scheduling_gates_only_deleted(new: Any, old: Any, path: Path) -> list[FieldError]:
    old_names = {_s(g.get("name")) for _, g in _items(old)}
    added: dict[str, int] = {}
    for i, gate in _items(new):
        added[_s(gate.get("name"))] = i
    return [field.forbidden(path.index(i).child("name"),
                            f"only deletion is allowed, but found new scheduling gate '{name}'")
            for name, i in added.items() if name not in old_names]


def _node_affinity(spec: Mapping[str, Any]) -> Any:
    return _d(spec.get("affinity")).get("nodeAffinity")


def _required_terms(affinity: Any) -> list[Any] | None:
    required = _d(affinity).get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, dict):
        return None
    terms = required.get("nodeSelectorTerms")
    return terms if isinstance(terms, list) else []


def _node_affinity_mutation(new: Any, old: Any, path: Path) -> list[FieldError]:
    old_terms = _required_terms(old)
    if old_terms is None:
        return []
    new_terms = _required_terms(new) or []
    terms_path = path.child("requiredDuringSchedulingIgnoredDuringExecution",
                            "nodeSelectorTerms")
    if old_terms and len(old_terms) != len(new_terms):
        return [field.invalid(terms_path, new_terms, "no additions/deletions to non-empty "
                              "NodeSelectorTerms list are allowed")]
    errs: list[FieldError] = []
    for i, old_term in enumerate(old_terms):
        new_term = new_terms[i]
        if not _term_only_additions(_d(new_term), _d(old_term)):
            errs.append(field.invalid(terms_path.index(i), new_term,
                                      "only additions are allowed (no mutations or deletions)"))
    return errs


def _term_only_additions(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    old_exprs, old_fields = old.get("matchExpressions") or [], old.get("matchFields") or []
    new_exprs, new_fields = new.get("matchExpressions") or [], new.get("matchFields") or []
    if not old_exprs and not old_fields and (new_exprs or new_fields):
        return False
    for old_list, new_list in ((old_exprs, new_exprs), (old_fields, new_fields)):
        if old_list and (len(new_list) < len(old_list)
                         or not _semantic_equal(new_list[:len(old_list)], old_list)):
            return False
    return True


def validate_pod_update(new: Mapping[str, Any], old: Mapping[str, Any],
                        gates: Mapping[str, bool],
                        stored: Mapping[str, Any] | None = None) -> list[FieldError]:
    """`ValidatePodUpdate`: a plain update (not `/status`, `/resize` or `/dynamic`) may
    change only container and init container images, `activeDeadlineSeconds` (set or
    lowered), toleration additions, a negative `terminationGracePeriodSeconds` to 1 and the
    removal of scheduling gates (plus nodeSelector and node affinity additions while the pod
    is gated); anything else is `spec: Forbidden: pod updates may not change fields other
    than ...` followed by a diff. `stored` (default `old`) is the pod as stored, whose
    features in use stay valid with their gates off (`/dynamic` passes a base pod as `old`)."""
    opts = _Options.of(gates, old if stored is None else stored)
    meta_path, spec_path = Path("metadata"), Path("spec")
    errs = v.validate_object_meta_update(_md(new), _md(old))
    errs.extend(_validate_pod_metadata_and_spec(new, opts))
    errs.extend(_validate_annotation_updates(_md(new), _md(old), meta_path.child("annotations")))
    new_spec, old_spec = _spec(new), _spec(old)
    for key in ("containers", "initContainers"):
        container_errs, stop = _validate_container_updates(new_spec.get(key), old_spec.get(key),
                                                           spec_path.child(key))
        errs.extend(container_errs)
        if stop:
            return errs
    new_deadline, old_deadline = new_spec.get("activeDeadlineSeconds"), \
        old_spec.get("activeDeadlineSeconds")
    deadline_path = spec_path.child("activeDeadlineSeconds")
    if new_deadline is not None:
        if _int(new_deadline) is not None and not 0 <= new_deadline <= v.MAX_INT32:
            errs.append(field.invalid(deadline_path, new_deadline,
                                      v.inclusive_range_error(0, v.MAX_INT32)))
            return errs
        if _int(old_deadline) is not None and _int(new_deadline) is not None and \
                old_deadline < new_deadline:
            errs.append(field.invalid(deadline_path, new_deadline,
                                      "must be less than or equal to previous value"))
            return errs
    elif old_deadline is not None:
        errs.append(field.invalid(deadline_path, None,
                                  "must not update from a positive integer to nil value"))
    errs.extend(_tolerations_only_added(new_spec.get("tolerations"),
                                        old_spec.get("tolerations"),
                                        spec_path.child("tolerations")))
    errs.extend(_scheduling_gates_only_deleted(new_spec.get("schedulingGates"),
                                               old_spec.get("schedulingGates"),
                                               spec_path.child("schedulingGates")))
    if _semantic_equal(new_spec, old_spec):
        return errs
    munged = json.loads(json.dumps(new_spec))
    for key in ("containers", "initContainers"):
        for (_, c), (_, previous) in zip(_items(munged.get(key)), _items(old_spec.get(key)),
                                         strict=False):
            _restore(c, previous, "image")
    _restore(munged, old_spec, "activeDeadlineSeconds")
    _restore(munged, old_spec, "schedulingGates")
    _restore(munged, old_spec, "tolerations")
    old_grace, new_grace = _int(old_spec.get("terminationGracePeriodSeconds")), \
        _int(munged.get("terminationGracePeriodSeconds"))
    if old_grace is not None and old_grace < 0 and new_grace == 1:
        munged["terminationGracePeriodSeconds"] = old_grace
    if old_spec.get("schedulingGates"):
        errs.extend(_gated_pod_mutations(munged, old_spec, spec_path))
    if not _semantic_equal(munged, old_spec):
        errs.append(field.forbidden(
            spec_path, "pod updates may not change fields other than "
            + ",".join(UPDATABLE_POD_SPEC_FIELDS) + "\n" + spec_diff(old_spec, munged)))
    return errs


def _restore(target: dict[str, Any], source: Mapping[str, Any], key: str) -> None:
    if key in source:
        target[key] = json.loads(json.dumps(source[key]))
    else:
        target.pop(key, None)


def _gated_pod_mutations(munged: dict[str, Any], old_spec: Mapping[str, Any],
                         spec_path: Path) -> list[FieldError]:
    """While the pod is gated, nodeSelector and required node affinity may gain entries."""
    errs: list[FieldError] = []
    new_selector, old_selector = _d(munged.get("nodeSelector")), _d(old_spec.get("nodeSelector"))
    if not _semantic_equal(new_selector, old_selector):
        for key, value in old_selector.items():
            if new_selector.get(key) != value:
                errs.append(field.invalid(spec_path.child("nodeSelector"),
                                          go_string_map(new_selector),
                                          "only additions to spec.nodeSelector are allowed (no "
                                          "mutations or deletions)"))
                break
        _restore(munged, old_spec, "nodeSelector")
    old_affinity, new_affinity = _node_affinity(old_spec), _node_affinity(munged)
    if not _semantic_equal(old_affinity, new_affinity):
        errs.extend(_node_affinity_mutation(new_affinity, old_affinity,
                                            spec_path.child("affinity", "nodeAffinity")))
        affinity = munged.get("affinity")
        if not isinstance(affinity, dict):
            if old_affinity is not None:
                munged["affinity"] = {"nodeAffinity": old_affinity}
        elif old_spec.get("affinity") is None and not affinity.get("podAffinity") and \
                not affinity.get("podAntiAffinity"):
            munged.pop("affinity", None)
        elif old_affinity is None:
            affinity.pop("nodeAffinity", None)
        else:
            affinity["nodeAffinity"] = old_affinity
    return errs


def _validate_annotation_updates(new: Mapping[str, Any], old: Mapping[str, Any],
                                 path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    new_ann, old_ann = _d(new.get("annotations")), _d(old.get("annotations"))
    if old_ann.get(_MIRROR_POD_ANNOTATION) != new_ann.get(_MIRROR_POD_ANNOTATION):
        if _MIRROR_POD_ANNOTATION in old_ann:
            errs.append(field.forbidden(path.key(_MIRROR_POD_ANNOTATION),
                                        "may not remove or update mirror pod annotation"))
        else:
            errs.append(field.forbidden(path.key(_MIRROR_POD_ANNOTATION),
                                        "may not add mirror pod annotation"))
    return errs


# --- status -------------------------------------------------------------------------------

_SYSTEM_CONDITIONS = frozenset({"PodScheduled", "Ready", "Initialized"})


def validate_pod_status_update(new: Mapping[str, Any],
                               old: Mapping[str, Any]) -> list[FieldError]:
    """`ValidatePodStatusUpdate`, kept to what a status writer can get wrong: metadata,
    condition types, `status.nodeName` (spec.nodeName) unchanged, the QoS class immutable,
    no terminated container revived against the restart policy, pod and host IPs, and the
    KEP-6395 `status.volumeStatuses`."""
    errs = v.validate_object_meta_update(_md(new), _md(old))
    errs.extend(_validate_annotation_updates(_md(new), _md(old),
                                             Path("metadata", "annotations")))
    status, old_status = _d(new.get("status")), _d(old.get("status"))
    for i, condition in _items(status.get("conditions")):
        kind = _s(condition.get("type"))
        if kind not in _SYSTEM_CONDITIONS:
            errs.extend(v.validate_qualified_name(
                kind, Path("metadata", "conditions").index(i).child("Type")))
    path = Path("status")
    if _s(_spec(new).get("nodeName")) != _s(_spec(old).get("nodeName")):
        errs.append(field.forbidden(path.child("nodeName"), "may not be changed directly"))
    nominated = _s(status.get("nominatedNodeName"))
    if nominated and nominated != _s(old_status.get("nominatedNodeName")):
        errs.extend(field.invalid(path.child("nominatedNodeName"), nominated, m)
                    for m in meta.name_errors(nominated))
    errs.extend(v.validate_immutable_field(_s(status.get("qosClass")),
                                           _s(old_status.get("qosClass")),
                                           path.child("qosClass")))
    restart = _s(_spec(old).get("restartPolicy"))
    errs.extend(_state_transitions(status.get("containerStatuses"),
                                   old_status.get("containerStatuses"),
                                   path.child("containerStatuses"), restart, set()))
    sidecars = {_s(c.get("name")) for _, c in _items(_spec(old).get("initContainers"))
                if c.get("restartPolicy") == "Always"}
    errs.extend(_state_transitions(status.get("initContainerStatuses"),
                                   old_status.get("initContainerStatuses"),
                                   path.child("initContainerStatuses"), restart, sidecars))
    errs.extend(_state_transitions(status.get("ephemeralContainerStatuses"),
                                   old_status.get("ephemeralContainerStatuses"),
                                   path.child("ephemeralContainerStatuses"), "Never", set()))
    errs.extend(_validate_ips(status.get("podIPs"), path.child("podIPs")))
    host_ips = status.get("hostIPs")
    if isinstance(host_ips, list) and host_ips:
        first = _s(_d(host_ips[0]).get("ip"))
        if _s(status.get("hostIP")) != first:
            errs.append(field.invalid(path.child("hostIPs").index(0).child("ip"), first,
                                      "must be equal to `hostIP`"))
        errs.extend(_validate_ips(host_ips, path.child("hostIPs")))
    errs.extend(_validate_volume_statuses(status.get("volumeStatuses"),
                                          path.child("volumeStatuses")))
    return errs


def _state_transitions(new: Any, old: Any, path: Path, restart_policy: str,
                       restartable: set[str]) -> list[FieldError]:
    if restart_policy == "Always":
        return []
    errs: list[FieldError] = []
    for i, previous in _items(old):
        terminated = _d(_d(previous.get("state")).get("terminated"))
        if not _d(previous.get("state")).get("terminated"):
            continue
        if (_int(terminated.get("exitCode")) or 0) != 0 and restart_policy == "OnFailure":
            continue
        name = _s(previous.get("name"))
        if name in restartable:
            continue
        for _, current in _items(new):
            if _s(current.get("name")) == name and \
                    not _d(current.get("state")).get("terminated"):
                errs.append(field.forbidden(path.index(i).child("state"),
                                            "may not be transitioned to non-terminated state"))
    return errs


def _validate_ips(ips: Any, path: Path) -> list[FieldError]:
    errs: list[FieldError] = []
    values = [_s(ip.get("ip")) for _, ip in _items(ips)]
    for i, value in enumerate(values):
        errs.extend(_ip_errors(value, path.index(i)))
    if len(values) > 1:
        families: set[int] = set()
        for value in values:
            try:
                families.add(ipaddress.ip_address(value).version)
            except ValueError:
                families.add(0)
        if len(values) > 2 or families != {4, 6}:
            errs.append(field.invalid(path, [{"ip": x} for x in values],
                                      "may specify no more than one IP for each IP family"))
        seen: set[str] = set()
        for i, value in enumerate(values):
            if value in seen:
                errs.append(field.duplicate(path.index(i), {"ip": value}))
            seen.add(value)
    return errs


def _validate_volume_statuses(statuses: Any, path: Path) -> list[FieldError]:
    """KEP-6395 `status.volumeStatuses[]`: a DNS-label name, unique, and a known
    `hostPhase`."""
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, status in _items(statuses):
        p = path.index(i)
        name = _s(status.get("name"))
        if not name:
            errs.append(field.required(p.child("name")))
        else:
            errs.extend(v.validate_dns1123_label(name, p.child("name")))
            if name in seen:
                errs.append(field.duplicate(p.child("name"), name))
            seen.add(name)
        phase = status.get("hostPhase")
        if not phase:
            errs.append(field.required(p.child("hostPhase")))
        elif phase not in VOLUME_HOST_PHASES:
            errs.append(field.not_supported(p.child("hostPhase"), phase,
                                            list(VOLUME_HOST_PHASES)))
    return errs

