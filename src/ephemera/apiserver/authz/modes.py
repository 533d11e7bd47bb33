"""The apiserver's authorization as configured (upstream's `--authorization-mode`): the modes
by name, in order, behind one `UnionAuthorizer`, with what they need started and stopped.

- `AlwaysAllow`, `AlwaysDeny`: as upstream;
- `Node`: `ephemera.apiserver.authz.node.NodeAuthorizer` (kubelets; a node's
  SelfSubjectRulesReview is `incomplete`, as upstream's Node authorizer cannot list rules);
- `RBAC`: `ephemera.apiserver.authz.rbac` over a `PolicyCache`; starting it writes the
  default roles and bindings (`bootstrappolicy.reconcile`) and starts ClusterRole
  aggregation; RBAC also brings the escalation check (`escalation.EscalationCheck`), which
  the app appends to its admission chain.

`Authorization.authorize(attributes)` is what the app asks for every request once the user
is known; `only_allows` says that nothing can be denied (no check needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ephemera.apiserver.authn import UserInfo
from ephemera.apiserver.authz import Attributes, Authorizer, Decision, UnionAuthorizer
from ephemera.apiserver.authz.aggregation import Aggregator
from ephemera.apiserver.authz.bootstrappolicy import reconcile
from ephemera.apiserver.authz.escalation import EscalationCheck
from ephemera.apiserver.authz.node import NodeAuthorizer
from ephemera.apiserver.authz.rbac import PolicyCache, RbacAuthorizer
from ephemera.apiserver.authz.reviews import RulesSource
from ephemera.apiserver.registry import Registry

MODES = ("AlwaysAllow", "AlwaysDeny", "Node", "RBAC")
DEFAULT_WITH_AUTHENTICATION = ("Node", "RBAC")
DEFAULT_WITHOUT_AUTHENTICATION = ("AlwaysAllow",)
ALL_RULES: list[Any] = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
                        {"verbs": ["*"], "nonResourceURLs": ["*"]}]


class AlwaysAllow:
    async def authorize(self, attributes: Attributes) -> tuple[Decision, str]:
        return Decision.ALLOW, ""

    async def rules_for(self, user: UserInfo, namespace: str
                        ) -> tuple[list[Any], list[str], bool]:
        return list(ALL_RULES), [], False


class AlwaysDeny:
    async def authorize(self, attributes: Attributes) -> tuple[Decision, str]:
        return Decision.NO_OPINION, "Everything is forbidden."


class Authorization:
    """The configured modes (see the module docstring)."""

    def __init__(self, registry: Registry, modes: Sequence[str]) -> None:
        unknown = [m for m in modes if m not in MODES]
        if unknown or not modes:
            raise ValueError(f"authorization modes {list(modes)!r}: each must be one of "
                             f"{', '.join(MODES)}")
        self.modes = tuple(modes)
        self.registry = registry
        self.policy: PolicyCache | None = None
        self.rbac: RbacAuthorizer | None = None
        self.aggregator: Aggregator | None = None
        self.node: NodeAuthorizer | None = None
        self.rules_sources: list[RulesSource] = []
        authorizers: list[Authorizer] = []
        for mode in self.modes:
            if mode == "AlwaysAllow":
                always = AlwaysAllow()
                authorizers.append(always)
                self.rules_sources.append(always.rules_for)
            elif mode == "AlwaysDeny":
                authorizers.append(AlwaysDeny())
            elif mode == "Node":
                self.node = NodeAuthorizer(registry)
                authorizers.append(self.node)
                self.rules_sources.append(self.node.rules_for)
            elif mode == "RBAC":
                self.policy = PolicyCache(registry)
                self.rbac = RbacAuthorizer(self.policy)
                self.aggregator = Aggregator(registry, self.policy)
                authorizers.append(self.rbac)
                self.rules_sources.append(self.rbac.rules_for)
        self.authorizer = UnionAuthorizer(authorizers)

    @property
    def only_allows(self) -> bool:
        return self.modes[0] == "AlwaysAllow"

    def escalation_check(self) -> EscalationCheck | None:
        if self.rbac is None:
            return None
        return EscalationCheck(self.authorizer, self.rbac.resolver)

    async def authorize(self, attributes: Attributes) -> tuple[Decision, str]:
        return await self.authorizer.authorize(attributes)

    async def start(self) -> None:
        """The RBAC cache, the default policy, aggregation, the Node authorizer's graph."""
        if self.policy is not None and self.aggregator is not None:
            await self.policy.start()
            await reconcile(self.registry)
            await self.policy.refresh()
            self.aggregator.start()
            await self.aggregator.sync()
            await self.policy.refresh()
        if self.node is not None:
            await self.node.start()

    async def stop(self) -> None:
        if self.node is not None:
            await self.node.stop()
        if self.aggregator is not None:
            await self.aggregator.close()
        if self.policy is not None:
            await self.policy.close()
