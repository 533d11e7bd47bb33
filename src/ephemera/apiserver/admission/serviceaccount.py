"""The ServiceAccount admission plugin, as upstream's (`plugin/pkg/admission/serviceaccount`),
on pod creates (the main resource):

- a pod that names no `serviceAccountName` gets `default` (and the deprecated
  `serviceAccount` in step, as the v1 conversion keeps it);
- the named ServiceAccount must exist in the pod's namespace, else 403 `pods "p" is
  forbidden: error looking up service account ns/sa: serviceaccount "sa" not found`;
- a pod without `imagePullSecrets` gets the ServiceAccount's;
- a mirror pod (annotation `kubernetes.io/config.mirror`) is left alone but may not name a
  ServiceAccount (`a mirror pod may not reference service accounts`) nor use secrets
  (`a mirror pod may not reference secrets`).

Not done (yet): mounting the projected API token volume (`kube-api-access-*`), since ephemera
has no TokenRequest API; so `automountServiceAccountToken` changes nothing.

Upstream's serviceaccounts controller creates the `default` ServiceAccount of every
namespace. ephemera has no controllers yet, so the namespace lifecycle
(`ephemera.apiserver.namespaces`) calls `ensure_default_service_account` when a namespace is
created, and at startup for every namespace that lacks one; a `default` ServiceAccount deleted
by a user stays deleted (pods in that namespace then get the error above) until the apiserver
restarts.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ephemera.api.errors import StatusError
from ephemera.apiserver.admission import AdmissionPluginBase, AdmissionRequest, is_pod_request
from ephemera.apiserver.resources import core_resource

if TYPE_CHECKING:
    from ephemera.apiserver.registry import Registry

log = logging.getLogger("ephemera.apiserver")

DEFAULT_SERVICE_ACCOUNT = "default"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


SERVICE_ACCOUNTS = core_resource("serviceaccounts")


async def ensure_default_service_account(registry: Registry, namespace: str) -> None:
    """Create the `default` ServiceAccount of `namespace` unless it exists (what upstream's
    serviceaccounts controller does). Failures are logged, not raised."""
    if await registry.store.get(SERVICE_ACCOUNTS.key(namespace, DEFAULT_SERVICE_ACCOUNT)):
        return
    account: dict[str, Any] = {"apiVersion": "v1", "kind": "ServiceAccount",
                               "metadata": {"name": DEFAULT_SERVICE_ACCOUNT,
                                            "namespace": namespace}}
    try:
        await registry.create(SERVICE_ACCOUNTS, account)
        log.info("created serviceaccounts %s/%s", namespace, DEFAULT_SERVICE_ACCOUNT)
    except StatusError as err:
        if err.code not in (404, 403, 409):  # namespace gone or terminating; raced
            log.warning("namespace %s: creating the default service account failed: %s",
                        namespace, err.message)


def _uses_secrets(spec: dict[str, Any]) -> bool:
    """upstream's `VisitPodSecretNames` finds one: secret volumes, projected secrets,
    env and envFrom secret references, imagePullSecrets."""
    if spec.get("imagePullSecrets"):
        return True
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        if volume.get("secret") is not None:
            return True
        for source in (volume.get("projected") or {}).get("sources") or []:
            if isinstance(source, dict) and source.get("secret") is not None:
                return True
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            for env in c.get("env") or []:
                if isinstance(env, dict) and (env.get("valueFrom") or {}).get("secretKeyRef"):
                    return True
            for env_from in c.get("envFrom") or []:
                if isinstance(env_from, dict) and env_from.get("secretRef") is not None:
                    return True
    return False


class ServiceAccount(AdmissionPluginBase):
    name = "ServiceAccount"

    def handles(self, req: AdmissionRequest) -> bool:
        return req.operation == "CREATE" and is_pod_request(req) and isinstance(req.obj, dict)

    async def admit(self, req: AdmissionRequest) -> None:
        pod = req.obj
        assert pod is not None
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            return
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if MIRROR_POD_ANNOTATION in annotations:
            return  # validate() judges mirror pods; their spec is never changed
        if not spec.get("serviceAccountName"):
            spec["serviceAccountName"] = DEFAULT_SERVICE_ACCOUNT
        name = str(spec["serviceAccountName"])
        spec["serviceAccount"] = name
        try:
            account = await req.registry.get(SERVICE_ACCOUNTS, req.namespace, name)
        except StatusError as err:
            cause = (f'serviceaccount "{name}" not found' if err.code == 404
                     else err.message)
            raise req.forbidden(f"error looking up service account {req.namespace}/{name}: "
                                f"{cause}") from None
        if not spec.get("imagePullSecrets") and account.get("imagePullSecrets"):
            spec["imagePullSecrets"] = [{"name": ref.get("name", "")}
                                        for ref in account["imagePullSecrets"]
                                        if isinstance(ref, dict)]

    async def validate(self, req: AdmissionRequest) -> None:
        pod = req.obj or {}
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if MIRROR_POD_ANNOTATION not in annotations:
            return
        spec = pod.get("spec") or {}
        if spec.get("serviceAccountName"):
            raise req.forbidden("a mirror pod may not reference service accounts")
        if _uses_secrets(spec):
            raise req.forbidden("a mirror pod may not reference secrets")


__all__ = ["DEFAULT_SERVICE_ACCOUNT", "SERVICE_ACCOUNTS", "ServiceAccount",
           "ensure_default_service_account"]
