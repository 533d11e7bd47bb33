"""RBAC: what roles and bindings allow, as upstream's `plugin/pkg/auth/authorizer/rbac` and
`pkg/registry/rbac/validation` decide it.

- rule matching (`rule_allows`: verbs, API groups, resources with `*` and `*/subresource`,
  resource names, non-resource URLs with a trailing `*`) and subjects (`applies_to`: users,
  groups, service accounts as `system:serviceaccount:NS:NAME`);
- `PolicyCache`: the Roles, RoleBindings, ClusterRoles and ClusterRoleBindings as watches on
  the store show them (one `ephemera.apiserver.informers.Informer` per kind), with
  `refresh()` to wait until they show every RBAC write this apiserver has made;
- `RuleResolver`: the rules a user holds in a namespace (ClusterRoleBindings, then the
  namespace's RoleBindings), each with upstream's description of where it comes from;
- `RbacAuthorizer`: allows what a rule allows, else has no opinion (with upstream's
  `RBAC: <resolution errors>` reason). A denial is decided again after `refresh()`, so a
  binding written through this apiserver before a request started always counts
  (upstream's informers may lag); one written through another apiserver on the same etcd
  counts once the watch delivers it, as upstream;
- `covers` / `escalation_error`: upstream's `ConfirmNoEscalation` rule comparison and its
  message, for `ephemera.apiserver.authz.escalation`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ephemera.api.goformat import go_quote, go_quote_list
from ephemera.api.wellknown import service_account_username
from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.authz import Attributes, Decision
from ephemera.apiserver.informers import SYNC_TIMEOUT, Informer, Mirror
from ephemera.apiserver.registry import Registry
from ephemera.apiserver.resources import Resource, lookup

log = logging.getLogger("ephemera.apiserver.rbac")

RBAC_GROUP = "rbac.authorization.k8s.io"


def _rbac_resource(plural: str) -> Resource:
    resource = lookup(RBAC_GROUP, "v1", plural)
    if resource is None:
        raise KeyError(f"{RBAC_GROUP}/v1 {plural} is not served")
    return resource


ROLES = _rbac_resource("roles")
ROLE_BINDINGS = _rbac_resource("rolebindings")
CLUSTER_ROLES = _rbac_resource("clusterroles")
CLUSTER_ROLE_BINDINGS = _rbac_resource("clusterrolebindings")
POLICY_RESOURCES = (ROLES, ROLE_BINDINGS, CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS)

Rule = Mapping[str, Any]


def _strings(rule: Rule, key: str) -> list[str]:
    value = rule.get(key)
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _values(rule: Rule, key: str) -> Sequence[Any]:
    """The list under `key` as it is (empty when it is not a list): where a rule's strings
    are only compared with a string, what else the list holds (decoded JSON) equals none."""
    value = rule.get(key)
    return value if isinstance(value, list) else ()


# --- rule matching (upstream's rbacv1helpers) -----------------------------------------------


def verb_matches(rule: Rule, verb: str) -> bool:
    verbs = _values(rule, "verbs")
    return "*" in verbs or verb in verbs


def api_group_matches(rule: Rule, group: str) -> bool:
    groups = _values(rule, "apiGroups")
    return "*" in groups or group in groups


def resource_matches(rule: Rule, combined: str, subresource: str) -> bool:
    for r in _values(rule, "resources"):
        if r in ("*", combined):
            return True
        if subresource and r == "*/" + subresource:
            return True
    return False


def resource_name_matches(rule: Rule, name: str) -> bool:
    if not rule.get("resourceNames"):
        return True  # (as no strings among them)
    names = _strings(rule, "resourceNames")
    return not names or name in names


def non_resource_url_matches(rule: Rule, path: str) -> bool:
    for url in _strings(rule, "nonResourceURLs"):
        if url in ("*", path):
            return True
        if url.endswith("*") and path.startswith(url.rstrip("*")):
            return True
    return False


def rule_allows(attributes: Attributes, rule: Rule) -> bool:
    """upstream's `RuleAllows`."""
    if attributes.resource_request:
        combined = attributes.resource
        if attributes.subresource:
            combined = f"{combined}/{attributes.subresource}"
        return (verb_matches(rule, attributes.verb)
                and api_group_matches(rule, attributes.api_group)
                and resource_matches(rule, combined, attributes.subresource)
                and resource_name_matches(rule, attributes.name))
    return verb_matches(rule, attributes.verb) and non_resource_url_matches(rule,
                                                                            attributes.path)


# --- subjects --------------------------------------------------------------------------------


def applies_to(user: UserInfo, subject: Mapping[str, Any], namespace: str) -> bool:
    """upstream's `appliesToUser`: a service account subject without a namespace means one in
    the binding's namespace."""
    kind, name = subject.get("kind"), subject.get("name") or ""
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        if not sa_namespace:
            return False
        return user.name == service_account_username(sa_namespace, name)
    return False


def describe_subject(subject: Mapping[str, Any], binding_namespace: str) -> str:
    kind, name = subject.get("kind") or "", subject.get("name") or ""
    if kind == "ServiceAccount":
        return f'{kind} "{name}/{subject.get("namespace") or binding_namespace}"'
    return f'{kind} {go_quote(name)}'


def _items(obj: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = obj.get(key)
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _name(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata")
    return str(md.get("name") or "") if isinstance(md, Mapping) else ""


# --- the cache --------------------------------------------------------------------------------


class PolicyCache:
    """The RBAC objects as the store's watches show them (see the module docstring): one
    `ephemera.apiserver.informers.Informer` per kind. `listeners` are called (synchronously)
    with the resource whenever its objects change."""

    def __init__(self, registry: Registry, *, retry_interval: float = 1.0,
                 sync_timeout: float = SYNC_TIMEOUT) -> None:
        self.registry = registry
        self.retry_interval = retry_interval
        self.sync_timeout = sync_timeout
        self.informers = {r.plural: Informer(registry.store, registry.codec(r),
                                             retry_interval=retry_interval,
                                             watch_cache=registry.watch_cache)
                          for r in POLICY_RESOURCES}
        for resource in POLICY_RESOURCES:
            self.informers[resource.plural].mirror.listeners.append(
                functools.partial(self._mirror_changed, resource))
        self.listeners: list[Callable[[Resource], None]] = []
        self._started = False

    # -- reads

    def _mirror(self, resource: Resource) -> Mirror:
        return self.informers[resource.plural].mirror

    def role(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._mirror(ROLES).get(namespace, name)

    def cluster_role(self, name: str) -> dict[str, Any] | None:
        return self._mirror(CLUSTER_ROLES).get("", name)

    def cluster_roles(self) -> list[dict[str, Any]]:
        return self._mirror(CLUSTER_ROLES).all()

    def role_bindings(self, namespace: str) -> list[dict[str, Any]]:
        return self._mirror(ROLE_BINDINGS).in_namespace(namespace)

    def cluster_role_bindings(self) -> list[dict[str, Any]]:
        return self._mirror(CLUSTER_ROLE_BINDINGS).all()

    # -- lifecycle

    async def start(self) -> None:
        """List every kind, then follow each with a watch in the background."""
        if self._started:
            return
        self._started = True
        for informer in self.informers.values():
            await informer.start()

    async def close(self) -> None:
        self._started = False
        for informer in self.informers.values():
            await informer.close()

    async def refresh(self) -> None:
        """Bring the cache up to every write of an RBAC object this apiserver has made
        before the call (the registry records the revision of its last write of each kind):
        wait for each informer's watch to reach it (at most `sync_timeout` seconds, as
        upstream's consistent reads from the watch cache); an informer that is not watching,
        or not there in time, is listed again. No store read when the watches are current."""
        for resource in POLICY_RESOURCES:
            informer = self.informers[resource.plural]
            wanted = self.registry.write_revision(resource)
            if informer.ready and informer.reflector.revision >= wanted:
                continue
            if not await informer.reflector.wait_for(wanted, self.sync_timeout):
                await informer.relist()

    def _mirror_changed(self, resource: Resource, namespace: str) -> None:
        self._changed(resource)

    def _changed(self, resource: Resource) -> None:
        for listener in self.listeners:
            try:
                listener(resource)
            except Exception:
                log.exception("rbac cache: listener failed")


# --- rule resolution --------------------------------------------------------------------------


class ResolutionError(Exception):
    """A binding whose role cannot be found (upstream's lister NotFound text), with the
    plural and name of the missing role ("" for an unsupported kind)."""

    def __init__(self, message: str, resource: str = "", name: str = "") -> None:
        super().__init__(message)
        self.resource = resource
        self.name = name


@dataclass(frozen=True)
class RuleSource:
    """Where a rule comes from, described as upstream's `clusterRoleBindingDescriber` and
    `roleBindingDescriber` do."""

    binding_kind: str
    binding: Mapping[str, Any]
    subject: Mapping[str, Any]

    def __str__(self) -> str:
        ref = self.binding.get("roleRef") or {}
        md = self.binding.get("metadata") or {}
        name, namespace = md.get("name") or "", md.get("namespace") or ""
        shown = f"{name}/{namespace}" if self.binding_kind == "RoleBinding" else name
        return (f'{self.binding_kind} {go_quote(shown)} of {ref.get("kind", "")} '
                f'{go_quote(ref.get("name", ""))} to {describe_subject(self.subject, namespace)}')


Visit = tuple[RuleSource | None, Rule | None, ResolutionError | None]


class RuleResolver:
    """upstream's `DefaultRuleResolver` over a `PolicyCache`."""

    def __init__(self, cache: PolicyCache) -> None:
        self.cache = cache

    def role_reference_rules(self, role_ref: Mapping[str, Any], namespace: str) -> list[Rule]:
        """The rules of the role a binding in `namespace` ("" for a ClusterRoleBinding)
        names; ResolutionError when it does not exist."""
        kind, name = role_ref.get("kind"), str(role_ref.get("name") or "")
        if kind == "Role":
            role = self.cache.role(namespace, name)
            if role is None:
                raise ResolutionError(f'role.{RBAC_GROUP} {go_quote(name)} not found', "roles",
                                      name)
        elif kind == "ClusterRole":
            role = self.cache.cluster_role(name)
            if role is None:
                raise ResolutionError(f'clusterrole.{RBAC_GROUP} {go_quote(name)} not found',
                                      "clusterroles", name)
        else:
            raise ResolutionError(f'unsupported role reference kind: {go_quote(str(kind or ""))}')
        return _items(role, "rules")

    def visit_rules_for(self, user: UserInfo, namespace: str) -> Iterator[Visit]:
        yield from self._visit("ClusterRoleBinding", self.cache.cluster_role_bindings(), user, "")
        if namespace:
            yield from self._visit("RoleBinding", self.cache.role_bindings(namespace), user,
                                   namespace)

    def _visit(self, kind: str, bindings: list[dict[str, Any]], user: UserInfo,
               namespace: str) -> Iterator[Visit]:
        for binding in bindings:
            subject = next((s for s in _items(binding, "subjects")
                            if applies_to(user, s, namespace)), None)
            if subject is None:
                continue
            try:
                rules = self.role_reference_rules(binding.get("roleRef") or {}, namespace)
            except ResolutionError as err:
                yield None, None, err
                continue
            source = RuleSource(kind, binding, subject)
            for rule in rules:
                yield source, rule, None

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[Rule], list[str]]:
        """Every rule the user holds in `namespace`, and the resolution errors."""
        rules: list[Rule] = []
        errs: list[str] = []
        for _, rule, err in self.visit_rules_for(user, namespace):
            if rule is not None:
                rules.append(rule)
            if err is not None:
                errs.append(str(err))
        return rules, errs


def aggregate_errors(errs: Sequence[str]) -> str:
    """upstream's `utilerrors.NewAggregate(...).Error()`."""
    unique = list(dict.fromkeys(errs))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


class RbacAuthorizer:
    """Mode `RBAC` (see the module docstring)."""

    def __init__(self, cache: PolicyCache) -> None:
        self.cache = cache
        self.resolver = RuleResolver(cache)

    def decide(self, attributes: Attributes) -> tuple[Decision, str]:
        """The decision on the cache as it is."""
        errs: list[str] = []
        for source, rule, err in self.resolver.visit_rules_for(attributes.user,
                                                               attributes.namespace):
            if rule is not None and rule_allows(attributes, rule):
                return Decision.ALLOW, f"RBAC: allowed by {source}"
            if err is not None:
                errs.append(str(err))
        return Decision.NO_OPINION, f"RBAC: {aggregate_errors(errs)}" if errs else ""

    async def authorize(self, attributes: Attributes) -> tuple[Decision, str]:
        decision, reason = self.decide(attributes)
        if decision is Decision.ALLOW:
            return decision, reason
        await self.cache.refresh()
        return self.decide(attributes)

    async def rules_for(self, user: UserInfo, namespace: str
                        ) -> tuple[list[Rule], list[str], bool]:
        """(rules, resolution errors, incomplete) for a SelfSubjectRulesReview."""
        await self.cache.refresh()
        rules, errs = self.resolver.rules_for(user, namespace)
        return rules, errs, False


# --- escalation checks (upstream's validation.Covers and ConfirmNoEscalation) -----------------


def breakdown_rule(rule: Rule) -> list[dict[str, list[str]]]:
    """upstream's `BreakdownRule`: one rule per group, resource, verb (and name), and per
    non-resource URL and verb."""
    out: list[dict[str, list[str]]] = []
    verbs = _strings(rule, "verbs")
    names = _strings(rule, "resourceNames")
    for group in _strings(rule, "apiGroups"):
        for resource in _strings(rule, "resources"):
            for verb in verbs:
                base = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
                if names:
                    out.extend({**base, "resourceNames": [n]} for n in names)
                else:
                    out.append(base)
    for url in _strings(rule, "nonResourceURLs"):
        out.extend({"nonResourceURLs": [url], "verbs": [verb]} for verb in verbs)
    return out


def _has_all(have: Sequence[str], want: Sequence[str]) -> bool:
    return all(w in have for w in want)


def _resources_cover(have: Sequence[str], want: Sequence[str]) -> bool:
    if "*" in have or _has_all(have, want):
        return True
    for path in want:
        if path in have:
            continue
        if "/" not in path or "*/" + path.split("/", 1)[1] not in have:
            return False
    return True


def _urls_cover(have: Sequence[str], want: Sequence[str]) -> bool:
    def covers(owner: str, requested: str) -> bool:
        return owner == requested or (owner.endswith("*")
                                      and requested.startswith(owner.rstrip("*")))
    return all(any(covers(o, w) for o in have) for w in want)


def rule_covers(owner: Rule, sub: Rule) -> bool:
    """upstream's `ruleCovers`."""
    o_verbs, o_groups = _strings(owner, "verbs"), _strings(owner, "apiGroups")
    o_names, s_names = _strings(owner, "resourceNames"), _strings(sub, "resourceNames")
    names_ok = (not o_names) if not s_names else (not o_names or _has_all(o_names, s_names))
    return (("*" in o_verbs or _has_all(o_verbs, _strings(sub, "verbs")))
            and ("*" in o_groups or _has_all(o_groups, _strings(sub, "apiGroups")))
            and _resources_cover(_strings(owner, "resources"), _strings(sub, "resources"))
            and _urls_cover(_strings(owner, "nonResourceURLs"),
                            _strings(sub, "nonResourceURLs"))
            and names_ok)


def covers(owner_rules: Sequence[Rule], rules: Sequence[Rule]
           ) -> tuple[bool, list[dict[str, list[str]]]]:
    """upstream's `validation.Covers`: whether the owner's rules cover every rule, and the
    uncovered pieces."""
    missing = [sub for rule in rules for sub in breakdown_rule(rule)
               if not any(rule_covers(owner, sub) for owner in owner_rules)]
    return not missing, missing


def compact_rules(rules: Sequence[dict[str, list[str]]]) -> list[dict[str, list[str]]]:
    """upstream's `CompactRules`: single-group, single-resource rules (at most one name) that
    differ only by verb become one rule."""
    compacted: list[dict[str, list[str]]] = []
    simple: dict[tuple[str, str, bool, str], dict[str, list[str]]] = {}
    for rule in rules:
        groups, resources = rule.get("apiGroups", []), rule.get("resources", [])
        names = rule.get("resourceNames", [])
        if (len(groups) == 1 and len(resources) == 1 and len(names) <= 1
                and not rule.get("nonResourceURLs")):
            key = (groups[0], resources[0], bool(names), names[0] if names else "")
            if key in simple:
                simple[key]["verbs"] = [*simple[key].get("verbs", []), *rule.get("verbs", [])]
            else:
                simple[key] = {k: list(v) for k, v in rule.items()}
        else:
            compacted.append(rule)
    return compacted + list(simple.values())


def compact_string(rule: Mapping[str, Sequence[str]]) -> str:
    """upstream's `rbacv1helpers.CompactString`."""
    parts = [f"{label}:{go_quote_list(rule[key])}"
             for label, key in (("APIGroups", "apiGroups"), ("Resources", "resources"),
                                ("NonResourceURLs", "nonResourceURLs"),
                                ("ResourceNames", "resourceNames"), ("Verbs", "verbs"))
             if rule.get(key)]
    return "{" + ", ".join(parts) + "}"


def escalation_error(user: UserInfo, owner_rules: Sequence[Rule], rules: Sequence[Rule],
                     resolution_errors: Sequence[str] = ()) -> str | None:
    """upstream's `ConfirmNoEscalation` message when the user's rules do not cover `rules`;
    None when they do."""
    ok, missing = covers(owner_rules, rules)
    if ok:
        return None
    descriptions = sorted({compact_string(r) for r in compact_rules(missing)})
    message = (f'user {go_quote(user.name)} (groups={go_quote_list(user.groups)}) is '
               "attempting to grant RBAC permissions not currently held:\n"
               + "\n".join(descriptions))
    if resolution_errors:
        message += f"; resolution errors: [{' '.join(resolution_errors)}]"
    return message
