"""The ServiceAccount admission plugin, as upstream's (`plugin/pkg/admission/serviceaccount`),
on pod creates (the main resource):

- a pod that names no `serviceAccountName` gets `default` (and the deprecated
  `serviceAccount` in step, as the v1 conversion keeps it);
- the named ServiceAccount is read from the apiserver's object cache, else live (upstream's
  lister with its live GET on a miss; `AdmissionContext.cached_get`);
  it must exist in the pod's namespace, else 403 `pods "p" is
  forbidden: error looking up service account ns/sa: serviceaccount "sa" not found`;
- a pod without `imagePullSecrets` gets the ServiceAccount's;
- a mirror pod (annotation `kubernetes.io/config.mirror`) is left alone but may not name a
  ServiceAccount (`a mirror pod may not reference service accounts`) nor use secrets
  (`a mirror pod may not reference secrets`).

- with `AdmissionSettings.mount_service_account_token` (`ephemera apiserver
  --mount-service-account-token`, true by default as upstream; an app made in process, as
  the tests make them, leaves it off unless asked), and unless
  `automountServiceAccountToken` is false on the pod (or, the pod saying nothing, on the
  ServiceAccount): every init and main container
  without a mount at `/var/run/secrets/kubernetes.io/serviceaccount` gets a read-only mount of
  a projected volume `kube-api-access-<5 random>` (added unless the pod has one): a
  `serviceAccountToken` (`token`, 3607 seconds), `ca.crt` from the ConfigMap
  `kube-root-ca.crt` and the pod's `namespace` (upstream's `TokenVolumeSource`).

Upstream's serviceaccounts controller creates the `default` ServiceAccount of every
namespace; in ephemera the apiserver's namespace lifecycle does it too, when the namespace is
created (`ephemera.apiserver.namespaces.ensure_default_service_account`), so that a pod
created right after its namespace finds it.
"""

from __future__ import annotations

from typing import Any

from ephemera.api.errors import StatusError
from ephemera.api.goformat import go_quote
from ephemera.api.meta import generate_name
from ephemera.apiserver.admission import AdmissionPluginBase, AdmissionRequest, is_pod_request
from ephemera.apiserver.resources import core_resource

DEFAULT_SERVICE_ACCOUNT = "default"
API_ACCESS_VOLUME_PREFIX = "kube-api-access-"
API_TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# upstream's WarnOnlyBoundTokenExpirationSeconds
API_TOKEN_EXPIRATION_SECONDS = 3607
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


SERVICE_ACCOUNTS = core_resource("serviceaccounts")


def token_volume_source() -> dict[str, Any]:
    """Upstream's `TokenVolumeSource`: token, cluster CA and namespace."""
    return {"defaultMode": 0o644, "sources": [
        {"serviceAccountToken": {"path": "token",
                                 "expirationSeconds": API_TOKEN_EXPIRATION_SECONDS}},
        {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt",
                                                               "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
            "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}


def should_automount(account: dict[str, Any], spec: dict[str, Any]) -> bool:
    """The pod's preference, else the ServiceAccount's, else true."""
    if spec.get("automountServiceAccountToken") is not None:
        return bool(spec["automountServiceAccountToken"])
    if account.get("automountServiceAccountToken") is not None:
        return bool(account["automountServiceAccountToken"])
    return True


def mount_service_account_token(spec: dict[str, Any]) -> None:
    """Upstream's `mountServiceAccountToken`."""
    volumes = spec.get("volumes") or []
    existing = next((v.get("name") for v in volumes if isinstance(v, dict)
                     and str(v.get("name") or "").startswith(API_ACCESS_VOLUME_PREFIX)), None)
    name = existing or generate_name(API_ACCESS_VOLUME_PREFIX)
    needed = False
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            if not isinstance(container, dict):
                continue
            mounts = container.get("volumeMounts") or []
            if any(isinstance(m, dict) and m.get("mountPath") == API_TOKEN_MOUNT_PATH
                   for m in mounts):
                continue
            container["volumeMounts"] = [*mounts, {"name": name, "readOnly": True,
                                                   "mountPath": API_TOKEN_MOUNT_PATH}]
            needed = True
    if existing is None and needed:
        spec["volumes"] = [*volumes, {"name": name, "projected": token_volume_source()}]


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
            account = await self.context.cached_get(SERVICE_ACCOUNTS, req.namespace, name)
        except StatusError as err:
            cause = (f'serviceaccount {go_quote(name)} not found' if err.code == 404
                     else err.message)
            raise req.forbidden(f"error looking up service account {req.namespace}/{name}: "
                                f"{cause}") from None
        if not spec.get("imagePullSecrets") and account.get("imagePullSecrets"):
            spec["imagePullSecrets"] = [{"name": ref.get("name", "")}
                                        for ref in account["imagePullSecrets"]
                                        if isinstance(ref, dict)]
        if self.settings.mount_service_account_token and should_automount(account, spec):
            mount_service_account_token(spec)

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


__all__ = ["DEFAULT_SERVICE_ACCOUNT", "SERVICE_ACCOUNTS", "ServiceAccount"]
