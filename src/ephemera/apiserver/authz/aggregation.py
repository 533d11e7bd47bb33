"""ClusterRole aggregation (upstream's `clusterrole-aggregation` controller), run inside the
apiserver: whenever ClusterRoles change, each ClusterRole with an `aggregationRule` gets as
its `rules` the rules of the ClusterRoles its selectors match (in name order, without
duplicates, never its own), written through the registry when they differ from the stored
ones. Several apiservers compute the same rules, so their writes agree.

Upstream runs this in kube-controller-manager; ephemera runs it where the RBAC cache already
is, so `admin`, `edit` and `view` have their rules as soon as the apiserver serves. Chains
(`view` into `edit` into `admin`) are resolved in one pass.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Mapping
from typing import Any

from ephemera.aiotasks import cancel_and_wait
from ephemera.api import labelselector
from ephemera.api.errors import StatusError
from ephemera.apiserver.authz.rbac import CLUSTER_ROLES, PolicyCache
from ephemera.apiserver.registry import Registry
from ephemera.apiserver.resources import Resource

log = logging.getLogger("ephemera.apiserver.rbac")


def _selects(selector: Any, labels: Mapping[str, str]) -> bool:
    """A clusterRoleSelector: an empty one selects every role, a malformed one none
    (upstream skips a selector that does not convert)."""
    return isinstance(selector, Mapping) and labelselector.matches(selector, labels)

def _labels(role: Mapping[str, Any]) -> dict[str, str]:
    labels = (role.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def _name(role: Mapping[str, Any]) -> str:
    return str((role.get("metadata") or {}).get("name") or "")


def aggregated_rules(roles: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The rules each aggregated role should have, by name, with chains resolved: the roles'
    rules are recomputed until nothing changes."""
    by_name = {_name(r): copy.deepcopy(r) for r in roles}
    aggregated = {n: r for n, r in by_name.items() if isinstance(r.get("aggregationRule"), dict)}
    for _ in range(len(aggregated) + 1):
        changed = False
        for name, role in aggregated.items():
            selectors = role["aggregationRule"].get("clusterRoleSelectors") or []
            matched = sorted(n for n, other in by_name.items() if n != name
                             and any(_selects(s, _labels(other)) for s in selectors))
            rules: list[Any] = []
            for other in matched:
                for rule in by_name[other].get("rules") or []:
                    if rule not in rules:
                        rules.append(rule)
            if rules != (role.get("rules") or []):
                role["rules"] = rules
                changed = True
        if not changed:
            break
    return {name: role.get("rules") or [] for name, role in aggregated.items()}


class Aggregator:
    """Keeps the aggregated ClusterRoles' rules written (see the module docstring)."""

    def __init__(self, registry: Registry, cache: PolicyCache) -> None:
        self.registry = registry
        self.cache = cache
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        cache.listeners.append(self._changed)

    def _changed(self, resource: Resource) -> None:
        if resource is CLUSTER_ROLES:
            self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._wake.set()
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                name="rbac-aggregation")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.sync()
            except Exception:
                log.exception("clusterrole aggregation failed; retrying")
                await asyncio.sleep(1.0)
                self._wake.set()

    async def sync(self) -> int:
        """Write every aggregated role whose stored rules differ; how many were written."""
        written = 0
        for name, rules in aggregated_rules(self.cache.cluster_roles()).items():
            current = self.cache.cluster_role(name)
            if current is None or (current.get("rules") or []) == rules:
                continue
            await self._write(name, rules)
            written += 1
        return written

    async def _write(self, name: str, rules: list[Any]) -> None:
        changed = False

        async def update(current: dict[str, Any] | None) -> dict[str, Any]:
            nonlocal changed
            if current is None:
                raise StatusError(404, "NotFound", f"clusterrole {name} is gone")
            old = copy.deepcopy(current)
            changed = (current.get("rules") or []) != rules
            current["rules"] = copy.deepcopy(rules)
            return await self.registry.prepare_update(CLUSTER_ROLES, current, old)

        try:
            await self.registry.update(CLUSTER_ROLES, "", name, update)
            if changed:  # a sync behind its own last write finds the rules there already
                log.info("aggregated the rules of clusterrole %s", name)
        except StatusError as err:
            if err.code != 404:
                raise
