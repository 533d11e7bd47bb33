"""RBAC escalation prevention (upstream's `pkg/registry/rbac/*/policybased` storages): a user
may write a Role or ClusterRole only with rules they already hold (or the `escalate` verb on
it), and a RoleBinding or ClusterRoleBinding only to a role whose rules they hold (or the
`bind` verb on it). Members of `system:masters` and the apiserver itself (no user) may do
anything.

It runs as the last step of the mutating admission phase (`EscalationCheck`, appended to
the chain by `ephemera.apiserver.app` when RBAC is on), where upstream's storage runs it:
after the object is decoded, defaulted and mutated, before validation. The 403 is upstream's
`<resource> "<name>" is forbidden: user "u" (groups=[...]) is attempting to grant RBAC
permissions not currently held:\\n{APIGroups:[...], Resources:[...], Verbs:[...]}`; a binding
to a role that does not exist (and no `bind` on it) is the registry's 404
`clusterroles.rbac.authorization.k8s.io "x" not found`, as upstream's rule resolver reads the
role from storage. The `escalate` check asks about the request's name as upstream's
`RoleEscalationAuthorized` does (RequestInfo): none on a create (POST, or a create through
PUT or apply, which is stricter than upstream there), the object's on an update; the `bind`
check asks about the role's name.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from ephemera.api import errors
from ephemera.api.wellknown import MASTERS_GROUP
from ephemera.apiserver.admission import AdmissionPluginBase, AdmissionRequest
from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.authz import Attributes, Authorizer, Decision
from ephemera.apiserver.authz.rbac import (
    CLUSTER_ROLES,
    RBAC_GROUP,
    ResolutionError,
    Rule,
    RuleResolver,
    escalation_error,
)

FULL_AUTHORITY: list[Rule] = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
                              {"verbs": ["*"], "nonResourceURLs": ["*"]}]
AGGREGATION_FORBIDDEN = "must have cluster-admin privileges to use the aggregationRule"


_GC_FIELDS = ("ownerReferences", "finalizers", "resourceVersion", "managedFields")


def _without_gc_fields(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    md = out.setdefault("metadata", {})
    for key in _GC_FIELDS:
        md.pop(key, None)
    return out


def _only_gc_fields_changed(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """upstream's `IsOnlyMutatingGCFields`: only ownerReferences and finalizers differ."""
    return _without_gc_fields(new) == _without_gc_fields(old)


class EscalationCheck(AdmissionPluginBase):
    """See the module docstring. `authorizer` answers the `escalate` and `bind` checks;
    `resolver` gives the user's rules."""

    name = "RBACEscalationCheck"

    def __init__(self, authorizer: Authorizer, resolver: RuleResolver) -> None:
        super().__init__()
        self.authorizer = authorizer
        self.resolver = resolver

    def handles(self, req: AdmissionRequest) -> bool:
        return (req.resource.group == RBAC_GROUP and req.operation in ("CREATE", "UPDATE")
                and req.user is not None and MASTERS_GROUP not in req.user.groups)

    async def admit(self, req: AdmissionRequest) -> None:
        obj, user = req.obj or {}, req.user
        assert user is not None
        if req.operation == "UPDATE" and _only_gc_fields_changed(obj, req.old or {}):
            return
        # upstream's RoleEscalationAuthorized asks about the request's name (RequestInfo):
        # none on a create, the URL's on an update.
        name = "" if req.operation == "CREATE" else req.name
        namespace = req.namespace if req.resource.namespaced else ""
        if req.resource.plural in ("roles", "clusterroles"):
            await self._check_role(req, user, obj, name, namespace)
        else:
            await self._check_binding(req, user, obj, namespace)

    async def _allowed(self, user: UserInfo, verb: str, resource: str, name: str,
                       namespace: str) -> bool:
        attributes = Attributes(user=user, verb=verb, api_group=RBAC_GROUP, api_version="v1",
                                resource=resource, namespace=namespace, name=name)
        decision, _ = await self.authorizer.authorize(attributes)
        return decision is Decision.ALLOW

    async def _confirm(self, req: AdmissionRequest, user: UserInfo, rules: Sequence[Rule],
                       namespace: str, message: str = "") -> None:
        """upstream's `ConfirmNoEscalation` (after a fresh read of the policy on a miss)."""
        error = self._escalation(user, rules, namespace)
        if error is not None:
            await self.resolver.cache.refresh()
            error = self._escalation(user, rules, namespace)
        if error is not None:
            raise req.forbidden(message or error)

    def _escalation(self, user: UserInfo, rules: Sequence[Rule], namespace: str) -> str | None:
        owner_rules, errs = self.resolver.rules_for(user, namespace)
        return escalation_error(user, owner_rules, rules, errs)

    async def _check_role(self, req: AdmissionRequest, user: UserInfo, obj: dict[str, Any],
                          name: str, namespace: str) -> None:
        if await self._allowed(user, "escalate", req.resource.plural, name, namespace):
            return
        await self._confirm(req, user, list(obj.get("rules") or []), namespace)
        if req.resource is CLUSTER_ROLES and obj.get("aggregationRule") is not None:
            old_rule = (req.old or {}).get("aggregationRule")
            if req.operation == "CREATE" or old_rule != obj.get("aggregationRule"):
                await self._confirm(req, user, FULL_AUTHORITY, "", AGGREGATION_FORBIDDEN)

    async def _check_binding(self, req: AdmissionRequest, user: UserInfo,
                             obj: dict[str, Any], namespace: str) -> None:
        role_ref = obj.get("roleRef") or {}
        kind = role_ref.get("kind")
        resource = {"Role": "roles", "ClusterRole": "clusterroles"}.get(str(kind))
        if resource is not None and await self._allowed(
                user, "bind", resource, str(role_ref.get("name") or ""), namespace):
            return
        try:
            rules = self.resolver.role_reference_rules(role_ref, namespace)
        except ResolutionError:
            await self.resolver.cache.refresh()
            try:
                rules = self.resolver.role_reference_rules(role_ref, namespace)
            except ResolutionError as err:
                if err.resource:  # the registry's lookup upstream: its 404
                    raise errors.not_found(err.resource, err.name, RBAC_GROUP) from None
                raise errors.bad_request(str(err)) from None
        await self._confirm(req, user, rules, namespace)
