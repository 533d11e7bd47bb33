"""The resources the apiserver serves: one `Resource` per kind, the single table that
routing, discovery, OpenAPI and storage keys are derived from."""

from __future__ import annotations

from dataclasses import dataclass

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
SUBRESOURCE_VERBS = ("get", "patch", "update")
NAMESPACE_VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    definition: str  # OpenAPI definition name, e.g. io.k8s.api.core.v1.Pod
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()  # "status", "binding", "dynamic", ...
    verbs: tuple[str, ...] = ALL_VERBS
    singular: str = ""
    # Keys under `/registry/<storage prefix>/`; upstream etcd layout.
    storage_prefix: str = ""
    # A DELETE that removes the object answers the object, not a Success Status (upstream's
    # registry `ReturnDeletedObject`: pods, namespaces and services among the kinds served).
    returns_deleted_object: bool = False
    # A custom resource (`ephemera.apiserver.customresources`): stored under
    # `/registry/<group>/<plural>/`, served from its CustomResourceDefinition.
    custom: bool = False
    # A custom resource's storage version (objects are stored as its apiVersion).
    storage_version: str = ""
    # The list kind when it is not KIND + "List" (a CRD's `names.listKind`).
    list_kind_name: str = ""
    # `Warning` headers of every request to it (a deprecated CRD version's warning, the
    # deprecated built-in v1 Endpoints).
    warnings: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    @property
    def list_kind(self) -> str:
        return self.list_kind_name or f"{self.kind}List"

    @property
    def selector_kind(self) -> str:
        """The key of the kind's selectable fields (`ephemera.api.selectors`): the kind, or
        for a custom resource kind, version and group (two CRDs may share a kind)."""
        return f"{self.kind}.{self.version}.{self.group}" if self.custom else self.kind

    @property
    def storage_api_version(self) -> str:
        """The apiVersion objects are stored as (a custom resource's storage version)."""
        if self.custom and self.storage_version:
            return f"{self.group}/{self.storage_version}"
        return self.api_version

    def key_prefix(self, namespace: str = "") -> str:
        """The store prefix of all objects, or of those of one namespace, ending in `/`."""
        base = f"/registry/{self.storage_prefix or self.plural}/"
        if self.namespaced and namespace:
            return f"{base}{namespace}/"
        return base

    def key(self, namespace: str, name: str) -> str:
        if self.namespaced:
            return f"{self.key_prefix(namespace)}{name}"
        return f"{self.key_prefix()}{name}"


_core = "io.k8s.api.core.v1."
# The API deprecation warning of v1 Endpoints (KEP-4974), on every request for them, as
# upstream's installer adds a deprecated version's warning to each of its handlers.
ENDPOINTS_DEPRECATED = ("v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 "
                        "EndpointSlice")
_rbac_group, _rbac = "rbac.authorization.k8s.io", "io.k8s.api.rbac.v1."
_authz_group, _authz = "authorization.k8s.io", "io.k8s.api.authorization.v1."
_authn_group, _authn = "authentication.k8s.io", "io.k8s.api.authentication.v1."
_certificates_group = "certificates.k8s.io"
_discovery_group = "discovery.k8s.io"
_apps_group, _apps = "apps", "io.k8s.api.apps.v1."
_batch_group = "batch"
_apiextensions_group = "apiextensions.k8s.io"
_storage_group = "storage.k8s.io"
_networking_group = "networking.k8s.io"
_apiregistration_group = "apiregistration.k8s.io"

RESOURCES: tuple[Resource, ...] = (
    Resource("", "v1", "namespaces", "Namespace", False, _core + "Namespace",
             short_names=("ns",), subresources=("status", "finalize"), verbs=NAMESPACE_VERBS,
             returns_deleted_object=True),
    Resource("", "v1", "pods", "Pod", True, _core + "Pod", short_names=("po",),
             categories=("all",),
             subresources=("status", "binding", "eviction", "dynamic", "allocated", "log",
                           "exec", "attach", "portforward", "proxy"),
             returns_deleted_object=True),
    Resource("", "v1", "configmaps", "ConfigMap", True, _core + "ConfigMap",
             short_names=("cm",)),
    Resource("", "v1", "secrets", "Secret", True, _core + "Secret"),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", True, _core + "ServiceAccount",
             short_names=("sa",), subresources=("token",)),
    Resource("", "v1", "nodes", "Node", False, _core + "Node", short_names=("no",),
             subresources=("proxy", "status"), storage_prefix="minions"),
    Resource("", "v1", "events", "Event", True, _core + "Event", short_names=("ev",)),
    Resource("", "v1", "services", "Service", True, _core + "Service", short_names=("svc",),
             categories=("all",), subresources=("proxy", "status"),
             storage_prefix="services/specs", returns_deleted_object=True),
    Resource("", "v1", "endpoints", "Endpoints", True, _core + "Endpoints",
             short_names=("ep",), storage_prefix="services/endpoints",
             warnings=(ENDPOINTS_DEPRECATED,)),
    Resource("", "v1", "resourcequotas", "ResourceQuota", True, _core + "ResourceQuota",
             short_names=("quota",), subresources=("status",)),
    Resource("", "v1", "limitranges", "LimitRange", True, _core + "LimitRange",
             short_names=("limits",)),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True,
             "io.k8s.api.coordination.v1.Lease", storage_prefix="leases"),
    Resource(_rbac_group, "v1", "roles", "Role", True, _rbac + "Role"),
    Resource(_rbac_group, "v1", "rolebindings", "RoleBinding", True, _rbac + "RoleBinding"),
    Resource(_rbac_group, "v1", "clusterroles", "ClusterRole", False, _rbac + "ClusterRole"),
    Resource(_rbac_group, "v1", "clusterrolebindings", "ClusterRoleBinding", False,
             _rbac + "ClusterRoleBinding"),
    # The access reviews are create-only and never stored (`ephemera.apiserver.authz.reviews`).
    Resource(_authz_group, "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False,
             _authz + "SelfSubjectAccessReview", verbs=("create",)),
    Resource(_authz_group, "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", False,
             _authz + "SelfSubjectRulesReview", verbs=("create",)),
    Resource(_authz_group, "v1", "subjectaccessreviews", "SubjectAccessReview", False,
             _authz + "SubjectAccessReview", verbs=("create",)),
    Resource(_authz_group, "v1", "localsubjectaccessreviews", "LocalSubjectAccessReview", True,
             _authz + "LocalSubjectAccessReview", verbs=("create",)),
    # Create-only and never stored either (`ephemera.apiserver.authnreviews`).
    Resource(_authn_group, "v1", "tokenreviews", "TokenReview", False,
             _authn + "TokenReview", verbs=("create",)),
    Resource(_authn_group, "v1", "selfsubjectreviews", "SelfSubjectReview", False,
             _authn + "SelfSubjectReview", verbs=("create",)),
    Resource(_certificates_group, "v1", "certificatesigningrequests",
             "CertificateSigningRequest", False,
             "io.k8s.api.certificates.v1.CertificateSigningRequest", short_names=("csr",),
             subresources=("approval", "status")),
    Resource(_discovery_group, "v1", "endpointslices", "EndpointSlice", True,
             "io.k8s.api.discovery.v1.EndpointSlice"),
    # Workloads (`ephemera.pods.workloads`; their controllers in `ephemera.controllers`).
    Resource("", "v1", "replicationcontrollers", "ReplicationController", True,
             _core + "ReplicationController", short_names=("rc",), categories=("all",),
             subresources=("scale", "status"), storage_prefix="controllers"),
    Resource(_apps_group, "v1", "deployments", "Deployment", True, _apps + "Deployment",
             short_names=("deploy",), categories=("all",), subresources=("scale", "status")),
    Resource(_apps_group, "v1", "replicasets", "ReplicaSet", True, _apps + "ReplicaSet",
             short_names=("rs",), categories=("all",), subresources=("scale", "status")),
    Resource(_apps_group, "v1", "statefulsets", "StatefulSet", True, _apps + "StatefulSet",
             short_names=("sts",), categories=("all",), subresources=("scale", "status")),
    Resource(_apps_group, "v1", "daemonsets", "DaemonSet", True, _apps + "DaemonSet",
             short_names=("ds",), categories=("all",), subresources=("status",)),
    Resource(_apps_group, "v1", "controllerrevisions", "ControllerRevision", True,
             _apps + "ControllerRevision"),
    # batch/v1 (`ephemera.batch`; the Job and CronJob controllers in the controller-manager)
    Resource(_batch_group, "v1", "jobs", "Job", True, "io.k8s.api.batch.v1.Job",
             categories=("all",), subresources=("status",)),
    Resource(_batch_group, "v1", "cronjobs", "CronJob", True, "io.k8s.api.batch.v1.CronJob",
             short_names=("cj",), categories=("all",), subresources=("status",)),
    Resource(_apiextensions_group, "v1", "customresourcedefinitions",
             "CustomResourceDefinition", False,
             "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
             short_names=("crd", "crds"), categories=("api-extensions",),
             subresources=("status",),
             storage_prefix=f"{_apiextensions_group}/customresourcedefinitions"),
    # Stored and served; no ingress controller routes them, nothing enforces the policies
    # (a `Warning` on create says so).
    Resource(_networking_group, "v1", "ingresses", "Ingress", True,
             "io.k8s.api.networking.v1.Ingress", short_names=("ing",),
             subresources=("status",)),
    Resource(_networking_group, "v1", "networkpolicies", "NetworkPolicy", True,
             "io.k8s.api.networking.v1.NetworkPolicy", short_names=("netpol",)),
    # Stored and served, no aggregation layer proxies them (a `Warning` on create says so).
    Resource(_apiregistration_group, "v1", "apiservices", "APIService", False,
             "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIService",
             categories=("api-extensions",), subresources=("status",),
             storage_prefix=f"{_apiregistration_group}/apiservices"),
    # Stored and served as data: no CSI driver publishes capacity here, nothing reads it.
    Resource(_storage_group, "v1", "csistoragecapacities", "CSIStorageCapacity", True,
             "io.k8s.api.storage.v1.CSIStorageCapacity"),
)

# The group-versions served, in discovery order.
GROUP_VERSIONS: tuple[tuple[str, str], ...] = (("", "v1"), (_apiregistration_group, "v1"),
                                               ("coordination.k8s.io", "v1"),
                                               (_authz_group, "v1"), (_rbac_group, "v1"),
                                               (_authn_group, "v1"),
                                               (_certificates_group, "v1"),
                                               (_discovery_group, "v1"),
                                               (_apps_group, "v1"),
                                               (_batch_group, "v1"),
                                               (_networking_group, "v1"),
                                               (_storage_group, "v1"),
                                               (_apiextensions_group, "v1"))


# --- custom resources --------------------------------------------------------------------
# The resources of the established CustomResourceDefinitions
# (`ephemera.apiserver.customresources` sets them): consulted after the static table above by
# routing, discovery, OpenAPI and storage, so a built-in entry never changes meaning. One
# apiserver per process, as upstream (the table is the process's).

_custom: tuple[Resource, ...] = ()
_custom_group_versions: tuple[tuple[str, str], ...] = ()
_generation = 0


def set_custom_resources(resources: tuple[Resource, ...],
                         group_versions: tuple[tuple[str, str], ...]) -> None:
    """Serve `resources` (in `group_versions`, discovery order) besides the static table."""
    global _custom, _custom_group_versions, _generation
    static = set(GROUP_VERSIONS)
    _custom = tuple(r for r in resources if (r.group, r.version) not in static)
    _custom_group_versions = tuple(gv for gv in group_versions if gv not in static)
    _generation += 1


def generation() -> int:
    """Changes whenever the served set does (the key of what is cached from it)."""
    return _generation


def served_resources() -> tuple[Resource, ...]:
    return RESOURCES + _custom


def served_group_versions() -> tuple[tuple[str, str], ...]:
    return GROUP_VERSIONS + _custom_group_versions


def by_group_version(group: str, version: str) -> list[Resource]:
    return [r for r in served_resources() if r.group == group and r.version == version]


def lookup(group: str, version: str, plural: str) -> Resource | None:
    for r in served_resources():
        if r.group == group and r.version == version and r.plural == plural:
            return r
    return None


def core_resource(plural: str) -> Resource:
    """The served core (`v1`) resource `plural`, for code that names one it relies on;
    KeyError when it is not served."""
    resource = lookup("", "v1", plural)
    if resource is None:
        raise KeyError(f"v1 {plural} is not served")
    return resource


def by_kind(api_version: str, kind: str) -> Resource | None:
    for r in served_resources():
        if r.api_version == api_version and r.kind == kind:
            return r
    return None
