"""The `rbac.authorization.k8s.io/v1` objects' defaults and validation, as upstream's
`pkg/apis/rbac/v1/defaults.go` and `pkg/apis/rbac/validation` have them (the strategies in
`ephemera.apiserver.strategy` call these). Pure functions over plain dicts.

- defaults: a binding's `roleRef.apiGroup` and a User or Group subject's `apiGroup` become
  `rbac.authorization.k8s.io`;
- names (of roles, bindings and the role a binding names) are path segments: not `.` or
  `..`, no `/` or `%`;
- rules need verbs; a resource rule needs API groups and resources; a non-resource rule has
  nothing else and is not allowed in a namespaced Role;
- a ClusterRole's `aggregationRule` needs at least one selector;
- a binding's `roleRef` names a Role or ClusterRole (a ClusterRoleBinding only a ClusterRole)
  of this group and cannot change; subjects are Users, Groups (of this group) and
  ServiceAccounts (no group; a namespace in a ClusterRoleBinding).
"""

from __future__ import annotations

from typing import Any

from ephemera.api import field, meta
from ephemera.api import validation as meta_validation
from ephemera.api.field import FieldError, Path

RBAC_GROUP = "rbac.authorization.k8s.io"
AUTOUPDATE_ANNOTATION = "rbac.authorization.kubernetes.io/autoupdate"


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# --- defaults ----------------------------------------------------------------------------------


def default_binding(obj: dict[str, Any]) -> None:
    """`SetDefaults_RoleBinding` / `SetDefaults_ClusterRoleBinding` and `SetDefaults_Subject`."""
    role_ref = obj.get("roleRef")
    if isinstance(role_ref, dict) and not role_ref.get("apiGroup"):
        role_ref["apiGroup"] = RBAC_GROUP
    for subject in _l(obj.get("subjects")):
        if isinstance(subject, dict) and not subject.get("apiGroup") \
                and subject.get("kind") in ("User", "Group"):
            subject["apiGroup"] = RBAC_GROUP


# --- names -------------------------------------------------------------------------------------


path_segment_name = meta_validation.path_segment_name


def _metadata(obj: dict[str, Any], namespaced: bool) -> list[FieldError]:
    return meta_validation.validate_object_meta(meta.ensure_metadata(obj), namespaced=namespaced,
                                                name_fn=path_segment_name)


# --- roles -------------------------------------------------------------------------------------


def validate_policy_rule(rule: Any, namespaced: bool, path: Path) -> list[FieldError]:
    """`ValidatePolicyRule`."""
    rule = _d(rule)
    errs: list[FieldError] = []
    if not _l(rule.get("verbs")):
        errs.append(field.required(path.child("verbs"), "verbs must contain at least one value"))
    urls = _l(rule.get("nonResourceURLs"))
    if urls:
        if namespaced:
            errs.append(field.invalid(path.child("nonResourceURLs"), urls,
                                      "namespaced rules cannot apply to non-resource URLs"))
        if _l(rule.get("apiGroups")) or _l(rule.get("resources")) \
                or _l(rule.get("resourceNames")):
            errs.append(field.invalid(path.child("nonResourceURLs"), urls,
                                      "rules cannot apply to both regular resources and "
                                      "non-resource URLs"))
        return errs
    if not _l(rule.get("apiGroups")):
        errs.append(field.required(path.child("apiGroups"),
                                   "resource rules must supply at least one api group"))
    if not _l(rule.get("resources")):
        errs.append(field.required(path.child("resources"),
                                   "resource rules must supply at least one resource"))
    return errs


def _rules(obj: dict[str, Any], namespaced: bool) -> list[FieldError]:
    path = Path("rules")
    return [e for i, rule in enumerate(_l(obj.get("rules")))
            for e in validate_policy_rule(rule, namespaced, path.index(i))]


def validate_role(obj: dict[str, Any]) -> list[FieldError]:
    """`ValidateRole` (without the metadata, which the strategy checks)."""
    return _rules(obj, namespaced=True)


def validate_cluster_role(obj: dict[str, Any]) -> list[FieldError]:
    """`ValidateClusterRole` (without the metadata)."""
    errs = _rules(obj, namespaced=False)
    aggregation = obj.get("aggregationRule")
    if isinstance(aggregation, dict) and not _l(aggregation.get("clusterRoleSelectors")):
        errs.append(field.required(Path("aggregationRule", "clusterRoleSelectors"),
                                   "at least one clusterRoleSelector required if "
                                   "aggregationRule is non-nil"))
    return errs


# --- bindings ----------------------------------------------------------------------------------


def _validate_subject(subject: Any, namespaced: bool, path: Path) -> list[FieldError]:
    """`ValidateRoleBindingSubject`."""
    subject = _d(subject)
    errs: list[FieldError] = []
    name, kind = subject.get("name") or "", subject.get("kind") or ""
    api_group = subject.get("apiGroup") or ""
    if not name:
        errs.append(field.required(path.child("name")))
    if kind == "ServiceAccount":
        if name:
            errs.extend(field.invalid(path.child("name"), name, m)
                        for m in meta_validation.dns_subdomain_name(name, False))
        if api_group:
            errs.append(field.not_supported(path.child("apiGroup"), api_group, [""]))
        if not namespaced and not subject.get("namespace"):
            errs.append(field.required(path.child("namespace")))
    elif kind in ("User", "Group"):
        if api_group != RBAC_GROUP:
            errs.append(field.not_supported(path.child("apiGroup"), api_group, [RBAC_GROUP]))
    else:
        errs.append(field.not_supported(path.child("kind"), kind,
                                        ["ServiceAccount", "User", "Group"]))
    return errs


def _validate_binding(obj: dict[str, Any], kinds: list[str], namespaced: bool
                      ) -> list[FieldError]:
    errs: list[FieldError] = []
    role_ref = _d(obj.get("roleRef"))
    if (role_ref.get("apiGroup") or "") != RBAC_GROUP:
        errs.append(field.not_supported(Path("roleRef", "apiGroup"),
                                        role_ref.get("apiGroup") or "", [RBAC_GROUP]))
    if (role_ref.get("kind") or "") not in kinds:
        errs.append(field.not_supported(Path("roleRef", "kind"), role_ref.get("kind") or "",
                                        kinds))
    name = role_ref.get("name") or ""
    if not name:
        errs.append(field.required(Path("roleRef", "name")))
    else:
        errs.extend(field.invalid(Path("roleRef", "name"), name, m)
                    for m in path_segment_name(name, False))
    path = Path("subjects")
    for i, subject in enumerate(_l(obj.get("subjects"))):
        errs.extend(_validate_subject(subject, namespaced, path.index(i)))
    return errs


def validate_role_binding(obj: dict[str, Any]) -> list[FieldError]:
    """`ValidateRoleBinding` (without the metadata)."""
    return _validate_binding(obj, ["Role", "ClusterRole"], namespaced=True)


def validate_cluster_role_binding(obj: dict[str, Any]) -> list[FieldError]:
    """`ValidateClusterRoleBinding` (without the metadata)."""
    return _validate_binding(obj, ["ClusterRole"], namespaced=False)


def validate_binding_update(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    """The roleRef of a binding cannot change (`ValidateRoleBindingUpdate`)."""
    role_ref = _d(new.get("roleRef"))
    if role_ref != _d(old.get("roleRef")):
        # The internal Go struct (no JSON tags) rendered as JSON, as field errors render it.
        shown = {"APIGroup": role_ref.get("apiGroup") or "", "Kind": role_ref.get("kind") or "",
                 "Name": role_ref.get("name") or ""}
        return [field.invalid(Path("roleRef"), shown, "cannot change roleRef")]
    return []


def validate_metadata(obj: dict[str, Any], namespaced: bool) -> list[FieldError]:
    """`ValidateObjectMeta` with RBAC's path-segment names."""
    return _metadata(obj, namespaced)
