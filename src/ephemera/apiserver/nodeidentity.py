"""Which node a request comes from, as upstream's `pkg/auth/nodeidentifier` decides it: a user
named `system:node:<name>` in the group `system:nodes` is node `<name>`. Shared by the Node
authorizer (`ephemera.apiserver.authz.node`) and the NodeRestriction admission plugin
(`ephemera.apiserver.admission.noderestriction`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ephemera.api.wellknown import NODE_USER_PREFIX, NODES_GROUP

if TYPE_CHECKING:
    from ephemera.apiserver.authn import UserInfo


def node_identity(user: UserInfo | None) -> tuple[str, bool]:
    """(node name, is a node). A `system:node:` user outside `system:nodes` is no node; an
    empty name after the prefix is a node that cannot be identified (`("", True)`)."""
    if user is None or not user.name.startswith(NODE_USER_PREFIX):
        return "", False
    if NODES_GROUP not in user.groups:
        return "", False
    return user.name[len(NODE_USER_PREFIX):], True
