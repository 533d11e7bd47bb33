"""apiregistration.k8s.io/v1 APIService: kube-aggregator's defaults (`SetDefaults_
ServiceReference`), validation (`ValidateAPIService`, `ValidateAPIServiceStatus` in
`pkg/apis/apiregistration/validation`) with its messages and paths, and its Table row.

ephemera has no aggregation layer: an APIService is stored and served, but requests for its
group and version are not proxied to its Service and its group does not join discovery, and
no availability controller writes its status. The apiserver says so in a `Warning` on create
(`warnings_on_create`). Nor does it register the local APIServices upstream keeps for every
built-in group-version (`v1.apps`, ...). Pure."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from ephemera.api import field, meta, services
from ephemera.api import validation as v
from ephemera.api.field import FieldError, Path
from ephemera.api.goformat import go_quote
from ephemera.api.validation import NameFn

CONDITION_STATUSES = ["True", "False", "Unknown"]
_SPEC = Path("spec")


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def default_apiservice(obj: dict[str, Any]) -> None:
    """A Service reference's port defaults to 443."""
    service = _d(obj.get("spec")).get("service")
    if isinstance(service, dict) and service.get("port") is None:
        service["port"] = 443


def name_rule(obj: Mapping[str, Any]) -> NameFn:
    """The name rule of `ValidateAPIService` for this object: a path segment, and exactly
    `spec.version + "." + spec.group`."""
    spec = _d(obj.get("spec"))
    required = f"{spec.get('version') or ''}.{spec.get('group') or ''}"

    def check(name: str, prefix: bool) -> list[str]:
        minimal = v.path_segment_name(name, False)
        if minimal:
            return minimal
        if name != required:
            return [f"must be `spec.version+\".\"+spec.group`: {go_quote(required)}"]
        return []
    return check


def validate_apiservice(obj: Mapping[str, Any]) -> list[FieldError]:
    """`ValidateAPIService` past the object metadata (create and update alike)."""
    spec = _d(obj.get("spec"))
    group, version = str(spec.get("group") or ""), str(spec.get("version") or "")
    errs: list[FieldError] = []
    if not group and version != "v1":
        errs.append(field.required(_SPEC.child("group"),
                                   "only v1 may have an empty group and it better be legacy "
                                   "kube"))
    if group:
        errs.extend(field.invalid(_SPEC.child("group"), group, m)
                    for m in meta.dns1123_subdomain_errors(group))
    errs.extend(field.invalid(_SPEC.child("version"), version, m)
                for m in services.service_name_errors(version, False))
    group_min = _int(spec.get("groupPriorityMinimum"))
    if group_min <= 0 or group_min > 20000:
        errs.append(field.invalid(_SPEC.child("groupPriorityMinimum"), group_min,
                                  "must be positive and less than 20000"))
    version_priority = _int(spec.get("versionPriority"))
    if version_priority <= 0 or version_priority > 1000:
        errs.append(field.invalid(_SPEC.child("versionPriority"), version_priority,
                                  "must be positive and less than 1000"))
    ca_bundle = _ca_bundle_size(spec.get("caBundle"))
    insecure = spec.get("insecureSkipTLSVerify") is True
    service = spec.get("service")
    if service is None:
        if ca_bundle:
            errs.append(field.invalid(_SPEC.child("caBundle"), f"{ca_bundle} bytes",
                                      "local APIServices may not have a caBundle"))
        if insecure:
            errs.append(field.invalid(_SPEC.child("insecureSkipTLSVerify"), True,
                                      "local APIServices may not have insecureSkipTLSVerify"))
        return errs
    service = _d(service)
    service_path = _SPEC.child("service")
    if not service.get("namespace"):
        errs.append(field.required(service_path.child("namespace")))
    if not service.get("name"):
        errs.append(field.required(service_path.child("name")))
    port = _int(service.get("port"))
    port_errors = v.port_num_errors(port)
    if port_errors:
        errs.append(field.invalid(service_path.child("port"), port,
                                  "port is not valid: " + ", ".join(port_errors)))
    if insecure and ca_bundle:
        errs.append(field.invalid(_SPEC.child("insecureSkipTLSVerify"), True,
                                  "may not be true if caBundle is present"))
    return errs


def _ca_bundle_size(raw: Any) -> int:
    if not isinstance(raw, str) or not raw:
        return 0
    try:
        return len(base64.b64decode(raw, validate=True))
    except (binascii.Error, ValueError):
        return len(raw)


def validate_apiservice_status(obj: Mapping[str, Any]) -> list[FieldError]:
    """`ValidateAPIServiceStatus`: each condition's status is True, False or Unknown."""
    errs: list[FieldError] = []
    conditions = _d(obj.get("status")).get("conditions")
    for i, condition in enumerate(conditions if isinstance(conditions, list) else []):
        status = _d(condition).get("status")
        if status not in CONDITION_STATUSES:
            errs.append(field.not_supported(
                Path("status").child("conditions").index(i).child("status"),
                status if status is not None else "", CONDITION_STATUSES))
    return errs


def warnings_on_create(obj: Mapping[str, Any]) -> list[str]:
    """What ephemera does not do for an APIService."""
    spec = _d(obj.get("spec"))
    gv = f"{spec.get('group') or ''}/{spec.get('version') or ''}"
    return [f"API aggregation is not implemented in ephemera: this APIService has no effect "
            f"(requests for {gv} are not proxied, and no controller reports its "
            "availability)"]


def table_cells(obj: Mapping[str, Any]) -> tuple[str, str]:
    """The Service (`Local` without one) and Available cells (`Unknown` without the
    condition, `False (Reason)` when not True and a reason is given)."""
    service = _d(obj.get("spec")).get("service")
    shown = (f"{service.get('namespace') or ''}/{service.get('name') or ''}"
             if isinstance(service, dict) else "Local")
    available = "Unknown"
    conditions = _d(obj.get("status")).get("conditions")
    for condition in conditions if isinstance(conditions, list) else []:
        condition = _d(condition)
        if condition.get("type") == "Available":
            status, reason = str(condition.get("status") or ""), condition.get("reason")
            available = status if status == "True" or not reason else f"{status} ({reason})"
            break
    return shown, available
