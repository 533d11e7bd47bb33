"""API discovery documents, derived from the resource table in `ephemera.apiserver.resources`:
`/version`, `/api`, `/apis`, `/api/v1` and `/apis/<group>/<version>` (legacy discovery) and
aggregated discovery v2 (`apidiscovery.k8s.io/v2`), plus the Accept-header decision between
the two. Pure functions returning JSON-ready dicts; the HTTP handlers live in the app.

The version reported is v1.38. The kubectl installed on the project's machines is the gcloud
dispatcher: it asks `/version` and picks a bundled kubectl from `major`/`minor` (27..31 and 33
pick the bundled binaries; anything else picks its built-in v1.32.4). Minor "38" was checked
against the real `/usr/bin/kubectl`: it runs the built-in v1.32.4 (user agent
`kubectl/v1.32.4`), which accepts `--subresource=dynamic`, where minor "30" runs kubectl 1.30
and fails with `invalid subresource value: "dynamic"`. kubectl prints a version-skew WARNING
for 1.32 against 1.38 and carries on.
"""

from __future__ import annotations

import base64
import hashlib
import platform
import sys
from typing import Any

from ephemera.apiserver.accept import parse_accept
from ephemera.apiserver.resources import Resource, by_group_version, served_group_versions

KUBERNETES_MAJOR = "1"
KUBERNETES_MINOR = "38"
KUBERNETES_GIT_VERSION = "v1.38.0"

AGGREGATED_DISCOVERY_CONTENT_TYPE = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
)
DISCOVERY_GROUP = "apidiscovery.k8s.io"

# The verbs of each subresource, and the kind it takes or returns when not the parent's.
_SUBRESOURCE_VERBS: dict[str, tuple[str, ...]] = {
    "status": ("get", "patch", "update"),
    "dynamic": ("get", "patch", "update"),
    "allocated": ("get",),
    "log": ("get",),
    "exec": ("create", "get"),
    "attach": ("create", "get"),
    "portforward": ("create", "get"),
    "binding": ("create",),
    "eviction": ("create",),
    "finalize": ("update",),
    "proxy": ("create", "delete", "get", "patch", "update"),
    "token": ("create",),
}
_SUBRESOURCE_KIND: dict[str, str] = {"binding": "Binding", "eviction": "Eviction",
                                     "exec": "PodExecOptions",
                                     "attach": "PodAttachOptions",
                                     "portforward": "PodPortForwardOptions",
                                     "proxy": "NodeProxyOptions", "token": "TokenRequest",
                                     "scale": "Scale"}
# Subresources whose kind is of another group-version (upstream's `scale`: autoscaling/v1).
_SUBRESOURCE_GROUP_VERSION: dict[str, tuple[str, str]] = {"scale": ("autoscaling", "v1"),
                                                           "eviction": ("policy", "v1")}


def version_info() -> dict[str, Any]:
    """The body of `GET /version` (`version.Info`)."""
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)
    return {
        "major": KUBERNETES_MAJOR,
        "minor": KUBERNETES_MINOR,
        "emulationMajor": KUBERNETES_MAJOR,
        "emulationMinor": KUBERNETES_MINOR,
        "minCompatibilityMajor": KUBERNETES_MAJOR,
        "minCompatibilityMinor": str(int(KUBERNETES_MINOR) - 1),
        "gitVersion": KUBERNETES_GIT_VERSION,
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": f"python{sys.version_info.major}.{sys.version_info.minor}",
        "compiler": "ephemera",
        "platform": f"{sys.platform}/{arch}",
    }


def storage_version_hash(group: str, version: str, kind: str) -> str:
    """Upstream's `storageversionhash.StorageVersionHash`: base64 of 8 bytes of sha256."""
    digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def subresource_verbs(subresource: str) -> tuple[str, ...]:
    return _SUBRESOURCE_VERBS.get(subresource, ("get", "patch", "update"))


def subresource_kind(resource: Resource, subresource: str) -> str:
    if subresource == "proxy" and resource.plural in ("pods", "services"):
        return f"{resource.kind}ProxyOptions"
    return _SUBRESOURCE_KIND.get(subresource, resource.kind)


def api_versions(server_address: str | None = None) -> dict[str, Any]:
    """The body of `GET /api` (`APIVersions`)."""
    body: dict[str, Any] = {"kind": "APIVersions", "versions": ["v1"]}
    if server_address:
        body["serverAddressByClientCIDRs"] = [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ]
    return body


def _group_version_ref(group: str, version: str) -> dict[str, str]:
    return {"groupVersion": f"{group}/{version}", "version": version}


def api_group_list() -> dict[str, Any]:
    """The body of `GET /apis` (`APIGroupList`); the core group is not listed, as upstream."""
    groups: dict[str, list[str]] = {}
    for group, version in served_group_versions():
        if group:
            groups.setdefault(group, []).append(version)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": name,
                "versions": [_group_version_ref(name, v) for v in versions],
                "preferredVersion": _group_version_ref(name, versions[0]),
            }
            for name, versions in groups.items()
        ],
    }


def api_group(group: str) -> dict[str, Any] | None:
    """The body of `GET /apis/<group>` (`APIGroup`), or None when the group is not served."""
    versions = [v for g, v in served_group_versions() if g == group and group]
    if not versions:
        return None
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": [_group_version_ref(group, v) for v in versions],
        "preferredVersion": _group_version_ref(group, versions[0]),
    }


def _resource_entry(r: Resource) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": r.plural,
        "singularName": r.singular_name,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": list(r.verbs),
    }
    if r.short_names:
        entry["shortNames"] = list(r.short_names)
    if r.categories:
        entry["categories"] = list(r.categories)
    entry["storageVersionHash"] = storage_version_hash(r.group, r.version, r.kind)
    return entry


def _subresource_entry(r: Resource, sub: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": f"{r.plural}/{sub}",
        "singularName": "",
        "namespaced": r.namespaced,
        "kind": subresource_kind(r, sub),
        "verbs": list(subresource_verbs(sub)),
    }
    if sub in _SUBRESOURCE_GROUP_VERSION:
        entry["group"], entry["version"] = _SUBRESOURCE_GROUP_VERSION[sub]
    return entry


def api_resource_list(group: str, version: str) -> dict[str, Any] | None:
    """The body of `GET /api/v1` or `GET /apis/<group>/<version>` (`APIResourceList`), with
    subresources as their own `plural/sub` entries; None when the group-version is not served."""
    if (group, version) not in served_group_versions():
        return None
    entries: list[dict[str, Any]] = []
    for r in by_group_version(group, version):
        entries.append(_resource_entry(r))
        entries.extend(_subresource_entry(r, sub) for sub in r.subresources)
    entries.sort(key=lambda e: e["name"])
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


def _discovery_resource(r: Resource) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resource": r.plural,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": "Namespaced" if r.namespaced else "Cluster",
        "singularResource": r.singular_name,
        "verbs": list(r.verbs),
    }
    if r.short_names:
        entry["shortNames"] = list(r.short_names)
    if r.categories:
        entry["categories"] = list(r.categories)
    if r.subresources:
        entry["subresources"] = [
            {
                "subresource": sub,
                "responseKind": {
                    "group": _SUBRESOURCE_GROUP_VERSION.get(sub, (r.group, r.version))[0],
                    "version": _SUBRESOURCE_GROUP_VERSION.get(sub, (r.group, r.version))[1],
                    "kind": subresource_kind(r, sub),
                },
                "verbs": list(subresource_verbs(sub)),
            }
            for sub in r.subresources
        ]
    return entry


def aggregated_discovery(core: bool) -> dict[str, Any]:
    """The body of `GET /api` (core=True) or `GET /apis` (core=False) when aggregated discovery
    v2 is asked for; send it with `AGGREGATED_DISCOVERY_CONTENT_TYPE` (a plain
    `application/json` content type makes kubectl silently see no resources)."""
    groups: dict[str, list[str]] = {}
    for group, version in served_group_versions():
        if bool(group) != core:
            groups.setdefault(group, []).append(version)
    items: list[dict[str, Any]] = []
    for name, versions in groups.items():
        metadata: dict[str, Any] = {"creationTimestamp": None}
        if name:
            metadata["name"] = name
        items.append({
            "metadata": metadata,
            "versions": [
                {
                    "version": v,
                    "resources": sorted(
                        (_discovery_resource(r) for r in by_group_version(name, v)),
                        key=lambda e: e["resource"],
                    ),
                    "freshness": "Current",
                }
                for v in versions
            ],
        })
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": f"{DISCOVERY_GROUP}/v2",
        "metadata": {},
        "items": items,
    }


def wants_aggregated_discovery(accept: str | None) -> bool:
    """True when the most preferred range of the Accept header that we can serve is aggregated
    discovery v2; False when it is plain JSON (legacy discovery). v2beta1 is not served, so a
    range asking only for it is skipped, as upstream skips unsupported media types."""
    for media in parse_accept(accept):
        if not media.matches_json():
            continue
        g, v, as_ = media.params.get("g"), media.params.get("v"), media.params.get("as")
        if g is None and v is None and as_ is None:
            return False
        if (
            media.mime == "application/json"
            and g == DISCOVERY_GROUP
            and v == "v2"
            and as_ == "APIGroupDiscoveryList"
        ):
            return True
    return False
