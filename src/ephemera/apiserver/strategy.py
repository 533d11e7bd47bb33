"""Per-kind rules of the registry, as upstream's REST strategies
(`k8s.io/kubernetes/pkg/registry/core/*/strategy.go`) and `rest.BeforeCreate` /
`rest.BeforeUpdate` / `rest.BeforeDelete` apply them:

- create: system fields (`uid`, `creationTimestamp`), no deletion fields; pods get
  `generation: 1`, `status: {phase: Pending, qosClass}` and their defaults; namespaces
  `status.phase: Active`, the `kubernetes` finalizer and the `kubernetes.io/metadata.name`
  label; resource quotas an empty status; secrets' `stringData` folded into `data`.
- update: immutable metadata kept, status reset on a main-resource update of a kind with a
  status subresource, everything but status reset on a `/status` update, pods' generation
  bumped on a spec change; `/dynamic` (for now) updates the whole pod but its status.
- delete: pods' graceful deletion (`CheckGracefulDelete`, section 9.2 of the reference),
  shortening of a pending grace period, namespaces' Terminating phase.
- validation: `ValidateObjectMeta` and `ValidateObjectMetaUpdate` with upstream's messages,
  plus the few pod checks the later pod validation builds on.
"""

from __future__ import annotations

import base64
import copy
from datetime import timedelta
from fractions import Fraction
from functools import cache
from typing import Any, Literal

from ephemera.api import errors, field, meta
from ephemera.api.field import FieldError
from ephemera.api.quantity import QuantityError, quantity_from_json
from ephemera.apiserver.resources import Resource

DeleteOutcome = Literal["immediate", "graceful", "pending"]

NAMESPACE_FINALIZER = "kubernetes"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
DEFAULT_TERMINATION_GRACE_PERIOD = 30

# Metadata an update never changes (ValidateObjectMetaUpdate / BeforeUpdate).
_SYSTEM_METADATA = ("uid", "creationTimestamp")


def _md(obj: dict[str, Any]) -> dict[str, Any]:
    return meta.ensure_metadata(obj)


class Strategy:
    """The default rules; subclasses add a kind's own."""

    def __init__(self, resource: Resource) -> None:
        self.resource = resource
        self.has_status = "status" in resource.subresources

    # upstream's AllowCreateOnUpdate: PUT of a missing object creates it.
    allow_create_on_update = False
    # Namespaces' names are DNS labels, the others' DNS subdomains.
    name_is_dns_label = False

    # -- create -----------------------------------------------------------------------------

    def before_create(self, obj: dict[str, Any]) -> None:
        """rest.BeforeCreate: drop deletion fields, fill the system fields, then the kind's
        PrepareForCreate."""
        md = _md(obj)
        md.pop("deletionTimestamp", None)
        md.pop("deletionGracePeriodSeconds", None)
        md.pop("resourceVersion", None)
        md.pop("selfLink", None)
        md["uid"] = meta.new_uid()
        md["creationTimestamp"] = meta.now_rfc3339()
        if not self.resource.namespaced:
            md.pop("namespace", None)
        self.prepare_for_create(obj)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        """The kind's PrepareForCreate (nothing by default: a node, for one, registers with
        its status)."""

    def validate_create(self, obj: dict[str, Any]) -> None:
        errs = meta.validate_object_meta(_md(obj), namespaced=self.resource.namespaced,
                                         dns_label_name=self.name_is_dns_label)
        errs.extend(self.validate(obj))
        self._raise(obj, errs)

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        """The kind's own validation (create and update)."""
        return []

    def _raise(self, obj: dict[str, Any], errs: list[FieldError]) -> None:
        if errs:
            raise errors.invalid(self.resource.kind, meta.name_of(obj), errs,
                                 self.resource.group)

    # -- update -----------------------------------------------------------------------------

    def before_update(self, new: dict[str, Any], old: dict[str, Any],
                      subresource: str = "") -> None:
        """rest.BeforeUpdate: keep what an update may not change, apply the kind's
        PrepareForUpdate (of the main resource or of `subresource`), validate."""
        new_md, old_md = _md(new), _md(old)
        if "generation" in old_md:
            new_md["generation"] = old_md["generation"]
        else:
            new_md.pop("generation", None)
        if subresource == "status":
            self.prepare_for_status_update(new, old)
        elif subresource:
            self.prepare_for_subresource_update(subresource, new, old)
        else:
            self.prepare_for_update(new, old)
        if not new_md.get("uid"):
            new_md["uid"] = old_md.get("uid")
        if old_md.get("creationTimestamp"):
            new_md["creationTimestamp"] = old_md["creationTimestamp"]
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            if key in old_md:
                new_md[key] = old_md[key]
            else:
                new_md.pop(key, None)
        new_md.pop("selfLink", None)
        errs = self._validate_meta_update(new_md, old_md)
        errs.extend(meta.validate_labels(new_md.get("labels"),
                                         field.Path("metadata", "labels")))
        errs.extend(meta.validate_annotations(new_md.get("annotations"),
                                              field.Path("metadata", "annotations")))
        if not subresource or subresource == "dynamic":
            errs.extend(self.validate(new))
        self._raise(new, errs)

    def _validate_meta_update(self, new_md: dict[str, Any], old_md: dict[str, Any]
                              ) -> list[FieldError]:
        errs: list[FieldError] = []
        path = field.Path("metadata")
        for key in ("name", "namespace", "uid"):
            if (new_md.get(key) or "") != (old_md.get(key) or ""):
                errs.append(field.invalid(path.child(key), new_md.get(key) or "",
                                          "field is immutable"))
        if old_md.get("deletionTimestamp"):
            added = [f for f in new_md.get("finalizers") or []
                     if f not in (old_md.get("finalizers") or [])]
            for f in added:
                errs.append(field.forbidden(
                    path.child("finalizers"),
                    f"no new finalizers can be added if the object is being deleted, found "
                    f"new finalizers []string{{\"{f}\"}}"))
        return errs

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        """A main-resource update: the status of a kind with a status subresource stays."""
        if self.has_status:
            _copy_key(new, old, "status")

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        """A `/status` update: everything but status (and metadata) stays."""
        for key in set(new) | set(old):
            if key not in ("status", "metadata", "kind", "apiVersion"):
                _copy_key(new, old, key)

    def prepare_for_subresource_update(self, subresource: str, new: dict[str, Any],
                                       old: dict[str, Any]) -> None:
        self.prepare_for_update(new, old)

    # -- delete -----------------------------------------------------------------------------

    def graceful_period(self, obj: dict[str, Any], requested: int | None) -> int | None:
        """CheckGracefulDelete: the grace period to use, or None when the kind is deleted
        at once."""
        return None

    def before_delete(self, obj: dict[str, Any], requested: int | None) -> DeleteOutcome:
        """rest.BeforeDelete: `immediate` (delete now unless finalizers hold it), `graceful`
        (deletionTimestamp/deletionGracePeriodSeconds set on obj; delete now if the period
        is 0), `pending` (a graceful deletion already runs; nothing to do)."""
        md = _md(obj)
        if requested is not None and requested < 0:
            requested = 1
        if md.get("deletionTimestamp"):
            current = md.get("deletionGracePeriodSeconds")
            if not current:
                return "immediate"
            if requested is None or requested >= current:
                return "pending"
            start = meta.parse_rfc3339(md["deletionTimestamp"]) - timedelta(seconds=current)
            md["deletionTimestamp"] = meta.rfc3339(start + timedelta(seconds=requested))
            md["deletionGracePeriodSeconds"] = requested
            return "graceful"
        period = self.graceful_period(obj, requested)
        if period is None:
            return "immediate"
        md["deletionTimestamp"] = meta.rfc3339_after(period)
        md["deletionGracePeriodSeconds"] = period
        if md.get("generation", 0) > 0:
            md["generation"] += 1
        return "graceful"

    def has_finalizers(self, obj: dict[str, Any]) -> bool:
        return bool(_md(obj).get("finalizers"))


def _copy_key(new: dict[str, Any], old: dict[str, Any], key: str) -> None:
    if key in old:
        new[key] = copy.deepcopy(old[key])
    else:
        new.pop(key, None)


# --- pods ----------------------------------------------------------------------------------


class PodStrategy(Strategy):
    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        default_pod(obj)
        _md(obj)["generation"] = 1
        status: dict[str, Any] = {"phase": "Pending", "qosClass": pod_qos_class(obj)}
        if (obj.get("spec") or {}).get("schedulingGates"):
            status["conditions"] = [{
                "type": "PodScheduled", "status": "False", "lastProbeTime": None,
                "lastTransitionTime": meta.now_rfc3339(), "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates"}]
        obj["status"] = status

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        default_pod(new)
        _copy_key(new, old, "status")
        self._bump_generation(new, old)

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        super().prepare_for_status_update(new, old)
        new_md, old_md = _md(new), _md(old)
        if "ownerReferences" in old_md:
            new_md["ownerReferences"] = copy.deepcopy(old_md["ownerReferences"])
        else:
            new_md.pop("ownerReferences", None)
        status = new.get("status")
        old_qos = (old.get("status") or {}).get("qosClass")
        if isinstance(status, dict) and not status.get("qosClass") and old_qos:
            status["qosClass"] = old_qos

    def prepare_for_subresource_update(self, subresource: str, new: dict[str, Any],
                                       old: dict[str, Any]) -> None:
        # `/dynamic`: the whole pod but its status; its own rules come with KEP-5972.
        self.prepare_for_update(new, old)

    @staticmethod
    def _bump_generation(new: dict[str, Any], old: dict[str, Any]) -> None:
        if new.get("spec") != old.get("spec"):
            _md(new)["generation"] = (_md(old).get("generation") or 0) + 1

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        errs: list[FieldError] = []
        spec = obj.get("spec")
        path = field.Path("spec")
        containers = spec.get("containers") if isinstance(spec, dict) else None
        if not containers:
            errs.append(field.required(path.child("containers")))
            return errs
        seen: set[str] = set()
        for i, c in enumerate(containers):
            cpath = path.child("containers").index(i)
            if not isinstance(c, dict):
                continue
            name = c.get("name") or ""
            if not name:
                errs.append(field.required(cpath.child("name")))
            else:
                errs.extend(field.invalid(cpath.child("name"), name, m)
                            for m in meta.dns1123_label_errors(name))
                if name in seen:
                    errs.append(field.duplicate(cpath.child("name"), name))
                seen.add(name)
            if not c.get("image"):
                errs.append(field.required(cpath.child("image")))
        return errs

    def graceful_period(self, obj: dict[str, Any], requested: int | None) -> int | None:
        spec = obj.get("spec") or {}
        period = 0
        if requested is not None:
            period = requested
        elif isinstance(spec.get("terminationGracePeriodSeconds"), int):
            period = spec["terminationGracePeriodSeconds"]
        if not spec.get("nodeName"):
            period = 0
        if (obj.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
            period = 0
        return period


def _image_pull_policy(image: str) -> str:
    """upstream's defaulting: Always for `:latest` or no tag, else IfNotPresent."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last or last.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _default_container(c: dict[str, Any]) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    if isinstance(c.get("image"), str) and c["image"]:
        c.setdefault("imagePullPolicy", _image_pull_policy(c["image"]))
    c.setdefault("resources", {})
    resources = c["resources"]
    if isinstance(resources, dict):
        limits = resources.get("limits")
        if isinstance(limits, dict) and limits:
            requests = resources.setdefault("requests", {})
            if isinstance(requests, dict):
                for name, value in limits.items():
                    requests.setdefault(name, value)
    for port in c.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def default_pod(pod: dict[str, Any]) -> None:
    """The defaults of upstream's `SetDefaults_Pod` / `SetDefaults_PodSpec` and
    `SetDefaults_Container` that users see in `kubectl get -o yaml`, plus the priority 0 the
    Priority admission plugin sets."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", DEFAULT_TERMINATION_GRACE_PERIOD)
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    if spec.get("serviceAccountName") and not spec.get("serviceAccount"):
        spec["serviceAccount"] = spec["serviceAccountName"]
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                _default_container(c)


def _positive(value: Any) -> Fraction | None:
    try:
        amount = quantity_from_json(value).as_fraction()
    except QuantityError:
        return None
    return amount if amount > 0 else None


_QOS_RESOURCES = ("cpu", "memory")


def pod_qos_class(pod: dict[str, Any]) -> str:
    """upstream's `ComputePodQOS` on a defaulted pod: pod-level resources when
    `spec.resources` is set, else the sums over containers and init containers."""
    spec = pod.get("spec") or {}
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    is_guaranteed = True
    pod_resources = spec.get("resources")
    if isinstance(pod_resources, dict):
        sources = [pod_resources]
        limits_required = bool(pod_resources.get("limits"))
    else:
        sources = [c.get("resources") or {} for key in ("containers", "initContainers")
                   for c in spec.get(key) or [] if isinstance(c, dict)]
        limits_required = True
    for res in sources:
        for name, value in (res.get("requests") or {}).items():
            amount = _positive(value) if name in _QOS_RESOURCES else None
            if amount is not None:
                requests[name] = requests.get(name, Fraction(0)) + amount
        found: set[str] = set()
        for name, value in (res.get("limits") or {}).items():
            amount = _positive(value) if name in _QOS_RESOURCES else None
            if amount is not None:
                found.add(name)
                limits[name] = limits.get(name, Fraction(0)) + amount
        if limits_required and not found.issuperset(_QOS_RESOURCES):
            is_guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if is_guaranteed:
        for name, amount in requests.items():
            if limits.get(name) != amount:
                is_guaranteed = False
                break
    if is_guaranteed and len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"


# --- namespaces ----------------------------------------------------------------------------


class NamespaceStrategy(Strategy):
    name_is_dns_label = True

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        obj["status"] = {"phase": "Active"}
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            spec = obj["spec"] = {}
        finalizers = list(spec.get("finalizers") or [])
        if NAMESPACE_FINALIZER not in finalizers:
            finalizers.append(NAMESPACE_FINALIZER)
        spec["finalizers"] = finalizers
        self._name_label(obj)

    @staticmethod
    def _name_label(obj: dict[str, Any]) -> None:
        md = _md(obj)
        name = md.get("name") or ""
        if name:
            labels = md.get("labels")
            if not isinstance(labels, dict):
                labels = md["labels"] = {}
            labels[NAMESPACE_NAME_LABEL] = name

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        spec = new.get("spec")
        if not isinstance(spec, dict):
            spec = new["spec"] = {}
        old_finalizers = (old.get("spec") or {}).get("finalizers")
        if old_finalizers is None:
            spec.pop("finalizers", None)
        else:
            spec["finalizers"] = list(old_finalizers)
        _copy_key(new, old, "status")
        self._name_label(new)

    def prepare_for_subresource_update(self, subresource: str, new: dict[str, Any],
                                       old: dict[str, Any]) -> None:
        if subresource == "finalize":
            finalizers = (new.get("spec") or {}).get("finalizers")
            for key in set(new) | set(old):
                if key not in ("metadata", "kind", "apiVersion"):
                    _copy_key(new, old, key)
            spec = new.setdefault("spec", {})
            if finalizers is None:
                spec.pop("finalizers", None)
            else:
                spec["finalizers"] = list(finalizers)
            return
        self.prepare_for_update(new, old)

    def before_delete(self, obj: dict[str, Any], requested: int | None) -> DeleteOutcome:
        md = _md(obj)
        if md.get("deletionTimestamp"):
            return "immediate" if not self.has_finalizers(obj) else "pending"
        if not self.has_finalizers(obj):
            return "immediate"
        md["deletionTimestamp"] = meta.now_rfc3339()
        md["deletionGracePeriodSeconds"] = 0
        status = obj.get("status")
        if not isinstance(status, dict):
            status = obj["status"] = {}
        status["phase"] = "Terminating"
        return "graceful"

    def has_finalizers(self, obj: dict[str, Any]) -> bool:
        return super().has_finalizers(obj) or bool((obj.get("spec") or {}).get("finalizers"))


# --- the others ----------------------------------------------------------------------------


class SecretStrategy(Strategy):
    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        fold_string_data(obj)
        obj.setdefault("type", "Opaque")

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        fold_string_data(new)
        new.setdefault("type", old.get("type", "Opaque"))


def fold_string_data(secret: dict[str, Any]) -> None:
    """v1 -> internal conversion: `stringData` entries overwrite `data` (base64)."""
    string_data = secret.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        data = secret.get("data")
        if not isinstance(data, dict):
            data = secret["data"] = {}
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


class ResourceQuotaStrategy(Strategy):
    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        obj.pop("status", None)


class CreateOnUpdateStrategy(Strategy):
    """Events, leases and limit ranges may be created by a PUT."""

    allow_create_on_update = True


_STRATEGIES: dict[tuple[str, str], type[Strategy]] = {
    ("", "pods"): PodStrategy,
    ("", "namespaces"): NamespaceStrategy,
    ("", "secrets"): SecretStrategy,
    ("", "resourcequotas"): ResourceQuotaStrategy,
    ("", "events"): CreateOnUpdateStrategy,
    ("", "limitranges"): CreateOnUpdateStrategy,
    ("coordination.k8s.io", "leases"): CreateOnUpdateStrategy,
}


@cache
def strategy_for(resource: Resource) -> Strategy:
    return _STRATEGIES.get((resource.group, resource.plural), Strategy)(resource)
