"""Per-kind rules of the registry, as upstream's REST strategies
(`k8s.io/kubernetes/pkg/registry/core/*/strategy.go`) and `rest.BeforeCreate` /
`rest.BeforeUpdate` / `rest.BeforeDelete` apply them. The pod rules themselves (defaults,
validation, the `/dynamic` rules, QoS) live in `ephemera.pods`; this module only says when
each applies.

- decoding (`Strategy.zero_nulls`): a JSON `null` in a built-in kind's `metadata`, `spec`,
  `status` (or `roleRef`, an Event's `involvedObject` and `source`), struct values in Go's
  types, is their zero value `{}`, as upstream's decoder reads it.
- defaults (`Strategy.default`, what upstream's decoder applies to every body, before
  admission): pods get `ephemera.pods.defaults.default_pod` with the apiserver's gates.
- create: system fields (`uid`, `creationTimestamp`), no deletion fields; pods get
  `generation: 1`, `status: {phase: Pending, qosClass}` and lose the fields of disabled
  gates (`drop_disabled_pod_fields`); namespaces `status.phase: Active`, the `kubernetes`
  finalizer and the `kubernetes.io/metadata.name` label; resource quotas an empty status;
  secrets' `stringData` folded into `data`.
- update: immutable metadata kept, status reset on a main-resource update of a kind with a
  status subresource, everything but status (and metadata) reset on a `/status` update, and
  the metadata each kind's status strategy keeps (`keep_metadata`: a Deployment's labels,
  a pod's ownerReferences, an APIService's labels, annotations, finalizers and owners);
  pods: fields of disabled gates dropped unless the stored pod uses them, generation bumped
  on a spec change; `/dynamic` updates the whole pod but its status (copied from the stored pod).
- delete: pods' graceful deletion (`CheckGracefulDelete`, section 9.2 of the reference),
  shortening of a pending grace period, namespaces' Terminating phase.
- validation (422 with causes): every kind `ValidateObjectMeta` / `ValidateObjectMetaUpdate`
  (`ephemera.api.validation`); pods instead `validate_pod_create`, `validate_pod_update`
  (plain update: containers and volumes immutable), `validate_pod_status_update` (`/status`)
  and `validate_dynamic_update` (`/dynamic`), which include the metadata checks. The
  NodeDeclaredFeatures check of `/dynamic` is the admission plugin's
  (`ephemera.apiserver.admission.nodefeatures`, a 403 as upstream), so validation is called
  without the node's features.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Literal

from ephemera.api import (
    apiservice,
    configdata,
    endpoints,
    errors,
    field,
    ingress,
    meta,
    networkpolicy,
    schema,
    services,
    storagecapacity,
)
from ephemera.api import validation as meta_validation
from ephemera.api.deletion import GCPolicy
from ephemera.api.featuregates import FeatureGates
from ephemera.api.field import FieldError
from ephemera.api.jsoncopy import json_copy
from ephemera.api.validation import NameFn
from ephemera.apiserver import csr
from ephemera.apiserver.authz import rbacapi
from ephemera.apiserver.resources import Resource
from ephemera.batch import cronjobs, jobs
from ephemera.pods import workloads
from ephemera.pods.defaults import default_pod, drop_disabled_pod_fields
from ephemera.pods.dynamic import validate_dynamic_update
from ephemera.pods.limitrange import default_limit_range, validate_limit_range
from ephemera.pods.quota import validate_resource_quota
from ephemera.pods.resources import compute_qos_class
from ephemera.pods.unimplemented import (
    unimplemented_warnings,
    unimplemented_warnings_on_update,
)
from ephemera.pods.validation import (
    validate_pod_create,
    validate_pod_status_update,
    validate_pod_update,
)

DeleteOutcome = Literal["immediate", "graceful", "pending"]

NAMESPACE_FINALIZER = "kubernetes"
# The top-level fields that are struct values (not pointers) in every built-in Go type that
# has them: JSON null decodes into each as its zero value.
STRUCT_FIELDS = ("metadata", "spec", "status", "roleRef", "involvedObject", "source")
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def _md(obj: dict[str, Any]) -> dict[str, Any]:
    return meta.ensure_metadata(obj)


class Strategy:
    """The default rules; subclasses add a kind's own."""

    def __init__(self, resource: Resource, gates: Mapping[str, bool] | None = None) -> None:
        self.resource = resource
        self.gates: Mapping[str, bool] = gates if gates is not None else FeatureGates()
        self.has_status = "status" in resource.subresources
        props = (schema.definitions().get(resource.definition) or {}).get("properties") or {}
        self.struct_fields = tuple(k for k in STRUCT_FIELDS if k in props)

    # upstream's AllowCreateOnUpdate: PUT of a missing object creates it.
    allow_create_on_update = False
    # upstream's AllowUnconditionalUpdate: a PUT without `metadata.resourceVersion` updates
    # the stored object whatever its version (else 422, `unconditional_update_refused`).
    allow_unconditional_update = True
    # Namespaces' names are DNS labels, the others' DNS subdomains.
    name_is_dns_label = False
    # The kind's own name rule when it is neither a DNS subdomain nor a DNS label.
    name_fn: NameFn | None = None
    # What a DELETE without options does to the dependents (upstream's
    # DefaultGarbageCollectionPolicy; `ephemera.api.deletion`).
    gc_policy: GCPolicy = "DeleteDependents"
    # k/k's finalizer-name rule (`validateKubeFinalizerName`) on top of apimachinery's: the
    # built-in kinds have it, custom resources not (`ephemera.api.validation`).
    kube_finalizer_names = True
    # Whether validation may take long enough (CEL rules of a custom resource) to run in a
    # worker thread instead of on the event loop (`Registry` runs it: `run_validation`).
    validates_in_thread = False

    # -- decoding and defaults ------------------------------------------------------------

    def zero_nulls(self, obj: dict[str, Any]) -> None:
        """A JSON `null` in one of the kind's `STRUCT_FIELDS`, as upstream's decoder reads it
        into a struct: the zero value, an empty object (the kind's defaults then apply to it
        as to `{}`). Before `default`, on every body and patched object."""
        for key in self.struct_fields:
            if key in obj and obj[key] is None:
                obj[key] = {}

    def default(self, obj: dict[str, Any]) -> None:
        """The kind's defaults, as upstream's decoder applies them to a request body (and to
        a patched object), before admission. Nothing by default."""

    # -- create -----------------------------------------------------------------------------

    def before_create(self, obj: dict[str, Any]) -> None:
        """rest.BeforeCreate: drop deletion fields, fill the system fields, then the kind's
        PrepareForCreate."""
        md = _md(obj)
        meta.drop_empty_metadata(md)
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

    def record_user(self, obj: dict[str, Any], user: Any) -> None:
        """The fields a create takes from the requesting user (upstream's PrepareForCreate
        reads it from the request context; a CSR's requestor). Nothing by default."""

    def validate_create(self, obj: dict[str, Any]) -> None:
        """422 Invalid with every error of `create_errors`."""
        self._raise(obj, self.create_errors(obj))

    def create_errors(self, obj: dict[str, Any]) -> list[FieldError]:
        """`ValidateObjectMeta` plus the kind's own `validate`."""
        name_fn = self.name_fn or (meta_validation.dns_label_name if self.name_is_dns_label
                                   else meta_validation.dns_subdomain_name)
        errs = meta_validation.validate_object_meta(_md(obj), namespaced=self.resource.namespaced,
                                                    name_fn=name_fn,
                                                    kube_finalizers=self.kube_finalizer_names)
        errs.extend(self.validate(obj))
        return errs

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        """The kind's own validation beyond metadata (create and main-resource update)."""
        return []

    def warnings(self, new: dict[str, Any], old: dict[str, Any] | None,
                 subresource: str = "") -> list[str]:
        """upstream's WarningsOnCreate (`old` None) / WarningsOnUpdate: `Warning` header
        texts for the object as the client sent it. None by default."""
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
        meta.drop_empty_metadata(new_md)
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
        self._raise(new, self.update_errors(new, old, subresource))

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        """`ValidateObjectMetaUpdate`, plus the kind's own `validate_update` on a
        main-resource update."""
        errs = meta_validation.validate_object_meta_update(_md(new), _md(old))
        if not subresource:
            errs.extend(self.validate_update(new, old))
        return errs

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        """The kind's own validation of a main-resource update beyond metadata: `validate`
        of the new object unless the kind has update rules of its own."""
        return self.validate(new)

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

    def delete_warnings(self, policy_given: bool) -> list[str]:
        """`Warning` texts of a DELETE (`policy_given`: it named a propagation policy or
        orphanDependents). None by default."""
        return []


def _copy_key(new: dict[str, Any], old: dict[str, Any], key: str) -> None:
    if key in old:
        new[key] = json_copy(old[key])
    else:
        new.pop(key, None)


def keep_metadata(new: dict[str, Any], old: dict[str, Any], *keys: str) -> None:
    """The stored object's metadata `keys` (`labels`, `ownerReferences`, ...) in place of the
    written ones: what a kind's status strategy does not let a `/status` write change."""
    new_md, old_md = _md(new), _md(old)
    for key in keys:
        _copy_key(new_md, old_md, key)


# --- pods ----------------------------------------------------------------------------------


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


class PodStrategy(Strategy):
    """Pods: `ephemera.pods` rules with the apiserver's gates (see the module docstring)."""

    def default(self, obj: dict[str, Any]) -> None:
        default_pod(obj, self.gates)

    def warnings(self, new: dict[str, Any], old: dict[str, Any] | None,
                 subresource: str = "") -> list[str]:
        """The fields ephemera accepts without effect (`pods.unimplemented`): on create, the
        ones the client set; on an update of the pod or `/dynamic`, the ones newly set.
        (Upstream's pod strategy warns on create only; ephemera also warns on updates, where
        `/dynamic` adds containers.)"""
        if subresource not in ("", "dynamic"):
            return []
        spec = _spec(new)
        if old is None:
            return unimplemented_warnings(spec)
        return unimplemented_warnings_on_update(spec, _spec(old))

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        """upstream's PrepareForCreate: generation 1, a Pending status with the QoS class,
        the fields of disabled gates dropped, the SchedulingGated condition."""
        _md(obj)["generation"] = 1
        status: dict[str, Any] = {"phase": "Pending",
                                  "qosClass": compute_qos_class(obj, gates=self.gates)}
        drop_disabled_pod_fields(obj, None, self.gates)
        if (obj.get("spec") or {}).get("schedulingGates"):
            status["conditions"] = [{
                "type": "PodScheduled", "status": "False", "lastProbeTime": None,
                "lastTransitionTime": meta.now_rfc3339(), "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates"}]
        obj["status"] = status

    def create_errors(self, obj: dict[str, Any]) -> list[FieldError]:
        return validate_pod_create(obj, self.gates)

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        """A main-resource (or `/dynamic`) update: the stored status stays, disabled fields
        are dropped unless in use, the generation follows the spec."""
        _copy_key(new, old, "status")
        drop_disabled_pod_fields(new, old, self.gates)
        self._bump_generation(new, old)

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        super().prepare_for_status_update(new, old)
        keep_metadata(new, old, "ownerReferences")
        status = new.get("status")
        old_qos = (old.get("status") or {}).get("qosClass")
        if isinstance(status, dict) and not status.get("qosClass") and old_qos:
            status["qosClass"] = old_qos
        drop_disabled_pod_fields(new, old, self.gates)

    def prepare_for_subresource_update(self, subresource: str, new: dict[str, Any],
                                       old: dict[str, Any]) -> None:
        # `/dynamic`: the whole pod but its status, which is the stored one.
        self.prepare_for_update(new, old)

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        if subresource == "status":
            return validate_pod_status_update(new, old)
        if subresource == "dynamic":
            return validate_dynamic_update(new, old, self.gates)
        if subresource:
            return meta_validation.validate_object_meta_update(_md(new), _md(old))
        return validate_pod_update(new, old, self.gates)

    @staticmethod
    def _bump_generation(new: dict[str, Any], old: dict[str, Any]) -> None:
        if new.get("spec") != old.get("spec"):
            _md(new)["generation"] = (_md(old).get("generation") or 0) + 1

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


class ConfigMapStrategy(Strategy):
    """ConfigMaps: their keys, their size and `immutable` (`ephemera.api.configdata`)."""

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        return configdata.validate_config_map(obj)

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        return configdata.validate_config_map_update(new, old)


class SecretStrategy(Strategy):
    """Secrets: `stringData` folded into `data`, the type defaulted; their keys, their size,
    what their type requires, and `immutable` (`ephemera.api.configdata`)."""

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        fold_string_data(obj)
        obj.setdefault("type", "Opaque")

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        fold_string_data(new)
        new.setdefault("type", old.get("type", "Opaque"))

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        return configdata.validate_secret(obj)

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        return configdata.validate_secret_update(new, old)


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
        # Upstream resets the status to the empty struct, which its JSON writes as `{}`;
        # the quota controller fills `hard` and `used`.
        obj["status"] = {}

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        """`ValidateResourceQuota` (`ephemera.pods.quota`)."""
        return validate_resource_quota(obj)

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        errs = super().update_errors(new, old, subresource)
        if subresource == "status":
            errs.extend(validate_resource_quota(new))
        return errs


class LimitRangeStrategy(Strategy):
    """LimitRanges (`ephemera.pods.limitrange`): `SetDefaults_LimitRangeItem` on decode,
    `ValidateLimitRange` with the gates (type Pod defaults stay valid once in use)."""

    allow_create_on_update = True

    def default(self, obj: dict[str, Any]) -> None:
        default_limit_range(obj)

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        return validate_limit_range(obj, self.gates)

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        return validate_limit_range(new, self.gates, old)


class CertificateSigningRequestStrategy(Strategy):
    """CSRs: requestor from the user, approval and status subresources (`apiserver.csr`)."""

    # Upstream's ValidateCertificateRequestName accepts any name; the common check that
    # follows it keeps names usable as a path segment.
    name_fn = staticmethod(meta_validation.path_segment_name)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        csr.prepare_for_create(obj)

    def record_user(self, obj: dict[str, Any], user: Any) -> None:
        csr.record_requestor(obj, user)

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        return csr.validate(obj)

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        csr.prepare_for_update(new, old)

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        csr.prepare_for_status_update(new, old)

    def prepare_for_subresource_update(self, subresource: str, new: dict[str, Any],
                                       old: dict[str, Any]) -> None:
        csr.prepare_for_approval_update(new, old)

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        return super().update_errors(new, old, subresource) + csr.validate_status(new)


class ServiceStrategy(Strategy):
    """Services (`ephemera.api.services`): `SetDefaults_Service` on decode; ClusterIP and
    ClusterIPs kept in step and single-stack IPv4 families on create and update; allocated
    values a client leaves out kept on update; `ValidateService` / `ValidateServiceUpdate`.
    Cluster IPs and node ports are allocated by the registry's write hooks
    (`ephemera.apiserver.serviceallocator`), after validation."""

    name_fn = staticmethod(services.service_name_errors)

    def default(self, obj: dict[str, Any]) -> None:
        services.default_service(obj)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        obj["status"] = {"loadBalancer": {}}
        services.normalize_cluster_ips(obj)
        services.init_ip_families(obj)

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        return services.validate_service(obj)

    def warnings(self, new: dict[str, Any], old: dict[str, Any] | None,
                 subresource: str = "") -> list[str]:
        return [] if subresource else services.unimplemented_warnings(new)

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        super().prepare_for_update(new, old)
        services.normalize_cluster_ips(new, old)
        services.drop_type_dependent_fields(new, old)
        services.patch_allocated_values(new, old)
        services.init_ip_families(new)

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        errs = meta_validation.validate_object_meta_update(_md(new), _md(old))
        if not subresource:
            errs.extend(services.validate_service_update(new, old))
        elif subresource == "status":
            errs.extend(services.validate_service_status(new))
        return errs


class EndpointsStrategy(Strategy):
    """Endpoints: `SetDefaults_EndpointPort`, `ValidateEndpoints` (`ephemera.api.endpoints`);
    a PUT of a missing one creates it, as upstream's."""

    allow_create_on_update = True

    def default(self, obj: dict[str, Any]) -> None:
        endpoints.default_endpoints(obj)

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        return endpoints.validate_endpoints(obj)


class EndpointSliceStrategy(Strategy):
    """EndpointSlices: the port defaults, `ValidateEndpointSlice`, an immutable
    `addressType` (`ephemera.api.endpoints`)."""

    def default(self, obj: dict[str, Any]) -> None:
        endpoints.default_endpoint_slice(obj)

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        return endpoints.validate_endpoint_slice(obj)

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        errs = meta_validation.validate_object_meta_update(_md(new), _md(old))
        errs.extend(endpoints.validate_endpoint_slice_update(new, old))
        return errs


class CSIStorageCapacityStrategy(Strategy):
    """CSIStorageCapacities: `ValidateCSIStorageCapacity` on create and update, immutable
    `nodeTopology` and `storageClassName` (`ephemera.api.storagecapacity`)."""

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        return storagecapacity.validate(obj)

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        errs = super().update_errors(new, old, subresource)
        errs.extend(storagecapacity.validate_update(new, old))
        return errs


class APIServiceStrategy(Strategy):
    """APIServices: the Service port default, an empty status on create, `ValidateAPIService`
    (its name is `spec.version + "." + spec.group`) on create and update, the status rules
    on `/status`, and a `Warning` on create that nothing aggregates them
    (`ephemera.api.apiservice`)."""

    def default(self, obj: dict[str, Any]) -> None:
        apiservice.default_apiservice(obj)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        obj["status"] = {}

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        """upstream's apiServerStatusStrategy: spec, labels, annotations, finalizers and
        ownerReferences stay as stored."""
        super().prepare_for_status_update(new, old)
        keep_metadata(new, old, "labels", "annotations", "finalizers", "ownerReferences")

    def create_errors(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = meta_validation.validate_object_meta(_md(obj), namespaced=False,
                                                    name_fn=apiservice.name_rule(obj))
        errs.extend(apiservice.validate_apiservice(obj))
        return errs

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        errs = meta_validation.validate_object_meta_update(_md(new), _md(old))
        if subresource == "status":
            errs.extend(apiservice.validate_apiservice_status(new))
        elif not subresource:
            errs.extend(self.create_errors(new))
        return errs

    def warnings(self, new: dict[str, Any], old: dict[str, Any] | None,
                 subresource: str = "") -> list[str]:
        return apiservice.warnings_on_create(new) if old is None else []


class _GenerationStrategy(Strategy):
    """A kind whose generation counts its spec's changes: 1 on create, bumped when the spec
    changes."""

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        _md(obj)["generation"] = 1

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        super().prepare_for_update(new, old)
        if new.get("spec") != old.get("spec"):
            _md(new)["generation"] = (_md(old).get("generation") or 0) + 1


class IngressStrategy(_GenerationStrategy):
    """Ingresses: an empty status and generation 1 on create, the generation bumped on a spec
    change, `ValidateIngressCreate` / `ValidateIngressUpdate` / the status rules
    (`ephemera.api.ingress`), and a `Warning` on create that no controller routes them."""

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        super().prepare_for_create(obj)
        obj["status"] = {"loadBalancer": {}}

    def create_errors(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = super().create_errors(obj)
        errs.extend(ingress.validate_ingress_create(obj))
        return errs

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        errs = meta_validation.validate_object_meta_update(_md(new), _md(old))
        if subresource == "status":
            errs.extend(ingress.validate_ingress_status(new))
        elif not subresource:
            errs.extend(ingress.validate_ingress_update(new, old))
        return errs

    def warnings(self, new: dict[str, Any], old: dict[str, Any] | None,
                 subresource: str = "") -> list[str]:
        return ingress.warnings_on_create(new) if old is None else []


class NetworkPolicyStrategy(_GenerationStrategy):
    """NetworkPolicies: v1 defaults, `ValidateNetworkPolicySpec` on create and update
    (`ephemera.api.networkpolicy`), generation 1 on create and bumped when the spec changes,
    and a `Warning` on create that ephemera does not enforce them."""

    def default(self, obj: dict[str, Any]) -> None:
        networkpolicy.default_network_policy(obj)

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        return networkpolicy.validate_network_policy(obj)

    def warnings(self, new: dict[str, Any], old: dict[str, Any] | None,
                 subresource: str = "") -> list[str]:
        return [networkpolicy.WARNING] if old is None else []


class CreateOnUpdateStrategy(Strategy):
    """Events and leases may be created by a PUT."""

    allow_create_on_update = True


class EventStrategy(CreateOnUpdateStrategy):
    """Events: created by PUT too, and no part of garbage collection (no finalizer from a
    DELETE's propagationPolicy)."""

    gc_policy: GCPolicy = "Unsupported"


class RbacStrategy(Strategy):
    """Roles, ClusterRoles and their bindings (`ephemera.apiserver.authz.rbacapi`): binding
    defaults, path-segment names, the kind's rules, an immutable roleRef; a PUT may create
    them, as upstream's RBAC strategies allow."""

    allow_create_on_update = True
    _validators = {"roles": rbacapi.validate_role,
                   "clusterroles": rbacapi.validate_cluster_role,
                   "rolebindings": rbacapi.validate_role_binding,
                   "clusterrolebindings": rbacapi.validate_cluster_role_binding}

    @property
    def is_binding(self) -> bool:
        return self.resource.plural.endswith("bindings")

    def default(self, obj: dict[str, Any]) -> None:
        if self.is_binding:
            rbacapi.default_binding(obj)

    def create_errors(self, obj: dict[str, Any]) -> list[FieldError]:
        return [*rbacapi.validate_metadata(obj, self.resource.namespaced), *self.validate(obj)]

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        return self._validators[self.resource.plural](obj)

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        errs = super().update_errors(new, old, subresource)
        if self.is_binding:
            errs.extend(rbacapi.validate_binding_update(new, old))
        return errs


def _pod_cidrs(node: Mapping[str, Any]) -> list[str]:
    """The Node's pod CIDRs as upstream's internal type has them (v1 `podCIDR` alone is
    the one-item list)."""
    spec = node.get("spec") or {}
    cidrs = [str(c) for c in spec.get("podCIDRs") or []]
    return cidrs or ([str(spec["podCIDR"])] if spec.get("podCIDR") else [])


class NodeStrategy(Strategy):
    """Nodes: upstream's `ValidateNodeUpdate` rule that pod CIDRs, once set (by the node
    IPAM controller), never change."""

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        errs = super().update_errors(new, old, subresource)
        before, after = _pod_cidrs(old), _pod_cidrs(new)
        if before and (len(before) != len(after)
                       or any(a != b for a, b in zip(before, after, strict=True))):
            errs.append(field.forbidden("spec.podCIDRs", "node updates may not change "
                                        'podCIDR except from "" to valid'))
        return errs


# --- workloads (`ephemera.pods.workloads`) ---------------------------------------------------


def _daemonset_surge_warning(plural: str, new: dict[str, Any], old: dict[str, Any] | None
                             ) -> list[str]:
    """A DaemonSet's `maxSurge` is not implemented (its rolling update replaces pods
    without surge, at least one node at a time): said on create, and on an update that
    sets it."""
    def surge(obj: dict[str, Any] | None) -> Any:
        rolling = (_spec(obj or {}).get("updateStrategy") or {}).get("rollingUpdate") or {}
        return rolling.get("maxSurge") if isinstance(rolling, dict) else None

    value = surge(new)
    if plural != workloads.DAEMONSETS or value in (None, 0, "0", "0%") or \
            (old is not None and surge(old) == value):
        return []
    return ["spec.updateStrategy.rollingUpdate.maxSurge: surge has no effect in ephemera "
            "(not implemented): pods are replaced one node at a time at least, as with "
            "maxUnavailable 1 when it is 0"]


class WorkloadStrategy(Strategy):
    """Deployments, ReplicaSets, StatefulSets, DaemonSets, ControllerRevisions and
    ReplicationControllers: v1 defaults, an empty status and generation 1 on create, the
    generation bumped on a spec change (a DaemonSet's template generation annotation with its
    template),
    the kind's validation on create, update and `/scale` (which writes `spec.replicas`),
    the status rules on `/status`."""

    @property
    def name_is_dns_label(self) -> bool:  # type: ignore[override]
        return self.resource.plural == workloads.STATEFULSETS

    def default(self, obj: dict[str, Any]) -> None:
        workloads.default_workload(self.resource.plural, obj, self.gates)

    def warnings(self, new: dict[str, Any], old: dict[str, Any] | None,
                 subresource: str = "") -> list[str]:
        """The template's fields accepted without effect (`pods.unimplemented`, at
        `spec.template.spec`), and on create of a StatefulSet with volumeClaimTemplates that
        ephemera makes no claims."""
        if subresource:
            return []
        template = _spec(new).get("template")
        spec = _spec(template) if isinstance(template, dict) else {}
        path = "spec.template.spec"
        surge_warning = _daemonset_surge_warning(self.resource.plural, new, old)
        if old is None:
            out = unimplemented_warnings(spec, path) + surge_warning
            kind = self.resource.kind
            if self.resource.plural == workloads.STATEFULSETS and \
                    _spec(new).get("volumeClaimTemplates"):
                out.append("spec.volumeClaimTemplates: ephemera serves no "
                           "PersistentVolumeClaims (not implemented): the pods' claim volumes "
                           f"are never mounted and their containers do not start ({kind})")
            return out
        old_template = _spec(old).get("template")
        return unimplemented_warnings_on_update(
            spec, _spec(old_template) if isinstance(old_template, dict) else {},
            path) + surge_warning

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        if self.has_status:
            obj["status"] = workloads.initial_status(self.resource.plural)
        if self.resource.plural != workloads.CONTROLLERREVISIONS:
            _md(obj)["generation"] = 1
        if self.resource.plural == workloads.DAEMONSETS:
            annotations = _md(obj).setdefault("annotations", {})
            annotations[workloads.DAEMONSET_TEMPLATE_GENERATION] = "1"

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        return workloads.validate_workload_spec(self.resource.plural, obj, self.gates)

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        """Everything but status stays; a Deployment's labels too (upstream's
        deploymentStatusStrategy; the other workload kinds keep their spec only)."""
        super().prepare_for_status_update(new, old)
        if self.resource.plural == workloads.DEPLOYMENTS:
            keep_metadata(new, old, "labels")
        workloads.fill_status_zeros(self.resource.plural, new)

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        super().prepare_for_update(new, old)
        if self.resource.plural == workloads.CONTROLLERREVISIONS:
            return
        if self.resource.plural == workloads.DAEMONSETS:
            key = workloads.DAEMONSET_TEMPLATE_GENERATION
            old_value = (_md(old).get("annotations") or {}).get(key)
            annotations = _md(new).setdefault("annotations", {})
            if _spec(new).get("template") != _spec(old).get("template"):
                try:
                    annotations[key] = str(int(old_value or 0) + 1)
                except ValueError:
                    annotations[key] = "1"
            elif old_value is not None:
                annotations[key] = old_value
            else:
                annotations.pop(key, None)
        if workloads.spec_changed(new, old):
            _md(new)["generation"] = (_md(old).get("generation") or 0) + 1

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        errs = meta_validation.validate_object_meta_update(_md(new), _md(old))
        if subresource in ("", "scale"):
            errs.extend(workloads.validate_workload_update(self.resource.plural, new, old,
                                                           self.gates))
        elif subresource == "status":
            errs.extend(workloads.validate_workload_status(self.resource.plural, new, old))
        return errs


# --- batch/v1 (`ephemera.batch`) ----------------------------------------------------------

JOB_DELETE_WARNING = ("child pods are preserved by default when jobs are deleted; set "
                      "propagationPolicy=Background to remove them or set "
                      "propagationPolicy=Orphan to suppress this warning")


class _SpecGenerationStrategy(_GenerationStrategy):
    """A kind with spec and status: status cleared on create and kept on update, generation
    1 on create and bumped when the spec changes."""

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        super().prepare_for_create(obj)
        obj["status"] = {}


class JobStrategy(_SpecGenerationStrategy):
    """Jobs: `SetDefaults_Job`, the generated selector and template labels, `ValidateJob`
    and `ValidateJobUpdate` (`ephemera.batch.jobs`). A DELETE without options orphans the
    pods (batch/v1's default, kept for compatibility) and says so in a warning."""

    gc_policy: GCPolicy = "OrphanDependents"

    def default(self, obj: dict[str, Any]) -> None:
        jobs.default_job(obj, self.gates)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        super().prepare_for_create(obj)
        jobs.generate_selector(obj)

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        return jobs.validate_job(obj, self.gates)

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        errs = meta_validation.validate_object_meta_update(_md(new), _md(old))
        if not subresource:
            errs.extend(jobs.validate_job_update(new, old, self.gates))
        elif subresource == "status":
            errs.extend(jobs.validate_job_status(new))
        return errs

    def delete_warnings(self, policy_given: bool) -> list[str]:
        return [] if policy_given else [JOB_DELETE_WARNING]

    def warnings(self, new: dict[str, Any], old: dict[str, Any] | None,
                 subresource: str = "") -> list[str]:
        if subresource:
            return []
        return jobs.unimplemented_job_warnings(
            new.get("spec") or {}, None if old is None else (old.get("spec") or {}))


class CronJobStrategy(_SpecGenerationStrategy):
    """CronJobs: `SetDefaults_CronJob`, `ValidateCronJobCreate` and `ValidateCronJobUpdate`
    (`ephemera.batch.cronjobs`)."""

    def default(self, obj: dict[str, Any]) -> None:
        cronjobs.default_cronjob(obj, self.gates)

    def validate(self, obj: dict[str, Any]) -> list[FieldError]:
        return cronjobs.validate_cronjob(obj, self.gates)

    def warnings(self, new: dict[str, Any], old: dict[str, Any] | None,
                 subresource: str = "") -> list[str]:
        if subresource:
            return []

        def job_spec(obj: dict[str, Any]) -> dict[str, Any]:
            return ((obj.get("spec") or {}).get("jobTemplate") or {}).get("spec") or {}
        return jobs.unimplemented_job_warnings(
            job_spec(new), None if old is None else job_spec(old), "spec.jobTemplate.spec")

    def update_errors(self, new: dict[str, Any], old: dict[str, Any], subresource: str = ""
                      ) -> list[FieldError]:
        errs = meta_validation.validate_object_meta_update(_md(new), _md(old))
        if not subresource:
            errs.extend(cronjobs.validate_cronjob_update(new, old, self.gates))
        return errs


_STRATEGIES: dict[tuple[str, str], type[Strategy]] = {
    ("", "services"): ServiceStrategy,
    ("", "endpoints"): EndpointsStrategy,
    ("discovery.k8s.io", "endpointslices"): EndpointSliceStrategy,
    ("", "pods"): PodStrategy,
    ("", "nodes"): NodeStrategy,
    ("", "namespaces"): NamespaceStrategy,
    ("", "configmaps"): ConfigMapStrategy,
    ("", "secrets"): SecretStrategy,
    ("", "resourcequotas"): ResourceQuotaStrategy,
    ("", "events"): EventStrategy,
    ("", "limitranges"): LimitRangeStrategy,
    ("coordination.k8s.io", "leases"): CreateOnUpdateStrategy,
    ("storage.k8s.io", "csistoragecapacities"): CSIStorageCapacityStrategy,
    ("networking.k8s.io", "networkpolicies"): NetworkPolicyStrategy,
    ("networking.k8s.io", "ingresses"): IngressStrategy,
    ("apiregistration.k8s.io", "apiservices"): APIServiceStrategy,
    ("certificates.k8s.io", "certificatesigningrequests"): CertificateSigningRequestStrategy,
    **{(rbacapi.RBAC_GROUP, plural): RbacStrategy
       for plural in ("roles", "clusterroles", "rolebindings", "clusterrolebindings")},
    ("", workloads.REPLICATIONCONTROLLERS): WorkloadStrategy,
    **{("apps", plural): WorkloadStrategy
       for plural in (workloads.DEPLOYMENTS, workloads.REPLICASETS, workloads.STATEFULSETS,
                      workloads.DAEMONSETS, workloads.CONTROLLERREVISIONS)},
    ("batch", "jobs"): JobStrategy,
    ("batch", "cronjobs"): CronJobStrategy,
}


def strategy_for(resource: Resource, gates: Mapping[str, bool] | None = None) -> Strategy:
    """The strategy of `resource` under `gates` (None: ephemera's defaults)."""
    return _STRATEGIES.get((resource.group, resource.plural), Strategy)(resource, gates)
