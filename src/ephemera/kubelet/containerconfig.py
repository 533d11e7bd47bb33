"""What a container is started with, resolved from the pod and its image as upstream's kubelet
does (`kubelet_pods.go` `makeEnvironmentVariables`, `makeMounts`,
`kuberuntime` `ExpandContainerCommandAndArgs`):

- `build_env`: the image's environment, then `envFrom` sources in order (ConfigMaps and
  Secrets, with `prefix`), then `env` entries (`value` with `$(VAR)` expansion against what is
  defined so far; `valueFrom` `configMapKeyRef`, `secretKeyRef`, `fieldRef` (the downward API:
  `metadata.name`, `.namespace`, `.uid`, `.labels['k']`, `.annotations['k']`, `spec.nodeName`,
  `spec.serviceAccountName`, `status.hostIP(s)`, `status.podIP(s)`) and `resourceFieldRef`);
  a later name replaces an earlier one in place; then the service variables
  (`serviceenv`, given as `service_env`) the pod does not define, which `$(VAR)` in `env`
  can name too. A missing ConfigMap, Secret or key that is not
  `optional` raises `ContainerConfigError` with upstream's message (`configmap "x" not
  found`, `couldn't find key k in ConfigMap ns/x`), which the pod worker reports as
  `CreateContainerConfigError`.
- `expand`: upstream's `$(VAR)` syntax (`$$` escapes a `$`; an undefined reference stays as
  written).
- `build_argv`: the pod's `command`/`args` merged with the image's `Entrypoint`/`Cmd` (a
  `command` replaces both; `args` alone replace `Cmd`), both expanded.
- `build_mounts`: one `runtime.base.Mount` per `volumeMounts` entry, from the volume
  manager's host directories: `subPath` (or `subPathExpr`, expanded) resolved under the
  volume's directory, created when missing (not for image volumes, which are read-only and
  where a missing path is an error), and refused when it leaves the volume through `..` or a
  symlink; configMap, secret, downwardAPI, projected and image volumes are mounted
  read-only whatever the mount says, as upstream.
- `read_only_root`: `securityContext.readOnlyRootFilesystem` (a container field only; unset
  is false), which the runtime turns into a read-only root (OCI `root.readonly`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Any

from ephemera.api.goformat import go_quote
from ephemera.api.quantity import QuantityError, quantity_from_json
from ephemera.kubelet.runtime.base import Mount
from ephemera.pods import resources as podresources

__all__ = [
    "READ_ONLY_VOLUME_SOURCES",
    "ContainerConfigError",
    "build_argv",
    "build_env",
    "build_mounts",
    "expand",
    "field_ref_value",
    "read_only_root",
]

# Volume sources the kubelet always mounts read-only (their plugins' `ReadOnly` attribute).
READ_ONLY_VOLUME_SOURCES = ("configMap", "secret", "downwardAPI", "projected", "image")

Lookup = Callable[[str, str], Awaitable[dict[str, Any] | None]]


class ContainerConfigError(Exception):
    """The container cannot be configured (`CreateContainerConfigError`); the message is
    upstream's."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Upstream's `expansion.Expand`: `$(VAR)` → its value when defined; `$$` → `$`."""
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end >= 0:
                    name = text[i + 2:end]
                    if name in env:
                        out.append(env[name])
                    else:
                        out.append(text[i:end + 1])
                    i = end + 1
                    continue
        out.append(ch)
        i += 1
    return "".join(out)


def _decode_secret(value: Any) -> str:
    import base64

    try:
        return base64.b64decode(str(value)).decode("utf-8", errors="replace")
    except ValueError:
        return ""


def _label_key(path: str, prefix: str) -> str | None:
    """`metadata.labels['k']` -> `k`."""
    m = re.fullmatch(re.escape(prefix) + r"\['(.*)'\]", path)
    return m.group(1) if m else None


def field_ref_value(pod: Mapping[str, Any], field_path: str, host_ip: str,
                    pod_ip: str) -> str:
    """The value of a downward API `fieldRef` (`ExtractFieldPathAsString` and the kubelet's
    `podFieldSelectorRuntimeValue`)."""
    md = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if field_path == "metadata.name":
        return str(md.get("name") or "")
    if field_path == "metadata.namespace":
        return str(md.get("namespace") or "")
    if field_path == "metadata.uid":
        return str(md.get("uid") or "")
    if field_path == "spec.nodeName":
        return str(spec.get("nodeName") or "")
    if field_path == "spec.serviceAccountName":
        return str(spec.get("serviceAccountName") or "")
    if field_path == "status.hostIP":
        return host_ip
    if field_path == "status.hostIPs":
        return host_ip
    if field_path == "status.podIP":
        return pod_ip
    if field_path == "status.podIPs":
        return pod_ip
    if field_path in ("metadata.labels", "metadata.annotations"):
        values = md.get(field_path.split(".")[1]) or {}
        return "\n".join(f'{k}="{values[k]}"' for k in sorted(values))
    for prefix, key in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        name = _label_key(field_path, prefix)
        if name is not None:
            return str((md.get(key) or {}).get(name) or "")
    raise ContainerConfigError(f'unsupported fieldPath: "{field_path}"')


def _resource_value(pod: Mapping[str, Any], container: Mapping[str, Any],
                    ref: Mapping[str, Any], node_allocatable: Mapping[str, Any]) -> str:
    """A `resourceFieldRef` value: the container's limit (node allocatable when unset) or
    request, divided by `divisor` and rounded up (upstream's
    `ExtractResourceValueByContainer`)."""
    resource = str(ref.get("resource") or "")
    name = str(ref.get("containerName") or "") or str(container.get("name") or "")
    target = container
    spec = pod.get("spec") or {}
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        if c.get("name") == name:
            target = c
    kind, _, res = resource.partition(".")
    values = podresources.container_limits(target) if kind == "limits" else \
        podresources.container_requests(target)
    quantity = values.get(res)
    if quantity is None and kind == "limits" and res in node_allocatable:
        try:
            quantity = quantity_from_json(node_allocatable[res])
        except QuantityError:
            quantity = None
    try:
        divisor = quantity_from_json(ref.get("divisor") or "1")
    except QuantityError:
        divisor = quantity_from_json("1")
    if quantity is None:
        return "0"
    if res == "cpu" and kind in ("limits", "requests"):
        value = Decimal(quantity.milli_value()) / Decimal(divisor.milli_value() or 1)
    else:
        value = quantity.as_decimal() / (divisor.as_decimal() or Decimal(1))
    return str(int(value.to_integral_value(rounding=ROUND_CEILING)))


def _set(env: list[tuple[str, str]], index: dict[str, int], name: str, value: str) -> None:
    if name in index:
        env[index[name]] = (name, value)
    else:
        index[name] = len(env)
        env.append((name, value))


async def build_env(pod: Mapping[str, Any], container: Mapping[str, Any],
                    image_env: Sequence[tuple[str, str]], *, get_configmap: Lookup,
                    get_secret: Lookup, host_ip: str, pod_ip: str,
                    node_allocatable: Mapping[str, Any] | None = None,
                    service_env: Mapping[str, str] | None = None
                    ) -> list[tuple[str, str]]:
    """The container's environment, in order (see the module docstring)."""
    md = pod.get("metadata") or {}
    namespace = str(md.get("namespace") or "default")
    env: list[tuple[str, str]] = []
    index: dict[str, int] = {}
    for name, value in image_env:
        _set(env, index, name, value)
    pod_defined: dict[str, str] = {}
    services = dict(service_env or {})
    configmaps: dict[str, dict[str, Any] | None] = {}
    secrets: dict[str, dict[str, Any] | None] = {}

    async def configmap(name: str) -> dict[str, Any] | None:
        if name not in configmaps:
            configmaps[name] = await get_configmap(namespace, name)
        return configmaps[name]

    async def secret(name: str) -> dict[str, Any] | None:
        if name not in secrets:
            secrets[name] = await get_secret(namespace, name)
        return secrets[name]

    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        if source.get("configMapRef") is not None:
            ref = source["configMapRef"]
            name = str(ref.get("name") or "")
            obj = await configmap(name)
            if obj is None:
                if ref.get("optional"):
                    continue
                raise ContainerConfigError(f'configmap "{name}" not found')
            for key, value in sorted((obj.get("data") or {}).items()):
                pod_defined[prefix + key] = str(value)
        elif source.get("secretRef") is not None:
            ref = source["secretRef"]
            name = str(ref.get("name") or "")
            obj = await secret(name)
            if obj is None:
                if ref.get("optional"):
                    continue
                raise ContainerConfigError(f'secret "{name}" not found')
            for key, value in sorted((obj.get("data") or {}).items()):
                pod_defined[prefix + key] = _decode_secret(value)
            for key, value in sorted((obj.get("stringData") or {}).items()):
                pod_defined[prefix + key] = str(value)
    for entry in container.get("env") or []:
        name = str(entry.get("name") or "")
        value_from = entry.get("valueFrom")
        if not value_from:
            pod_defined[name] = expand(str(entry.get("value") or ""),
                                       {**dict(env), **services, **pod_defined})
            continue
        if value_from.get("fieldRef"):
            path = str(value_from["fieldRef"].get("fieldPath") or "")
            pod_defined[name] = field_ref_value(pod, path, host_ip, pod_ip)
        elif value_from.get("resourceFieldRef"):
            pod_defined[name] = _resource_value(pod, container, value_from["resourceFieldRef"],
                                                node_allocatable or {})
        elif value_from.get("configMapKeyRef"):
            ref = value_from["configMapKeyRef"]
            cm_name, key = str(ref.get("name") or ""), str(ref.get("key") or "")
            optional = bool(ref.get("optional"))
            obj = await configmap(cm_name)
            if obj is None:
                if optional:
                    continue
                raise ContainerConfigError(f'configmap "{cm_name}" not found')
            data = obj.get("data") or {}
            if key not in data:
                if optional:
                    continue
                raise ContainerConfigError(
                    f"couldn't find key {key} in ConfigMap {namespace}/{cm_name}")
            pod_defined[name] = str(data[key])
        elif value_from.get("secretKeyRef"):
            ref = value_from["secretKeyRef"]
            s_name, key = str(ref.get("name") or ""), str(ref.get("key") or "")
            optional = bool(ref.get("optional"))
            obj = await secret(s_name)
            if obj is None:
                if optional:
                    continue
                raise ContainerConfigError(f'secret "{s_name}" not found')
            data = obj.get("data") or {}
            if key not in data:
                if optional:
                    continue
                raise ContainerConfigError(
                    f"couldn't find key {key} in Secret {namespace}/{s_name}")
            pod_defined[name] = _decode_secret(data[key])
    for name, value in pod_defined.items():
        _set(env, index, name, value)
    for name, value in services.items():  # after the pod's own, unless it defines them
        if name not in pod_defined:
            _set(env, index, name, value)
    return env


def read_only_root(container: Mapping[str, Any]) -> bool:
    """Whether the container's root filesystem is read-only (upstream's
    `ReadonlyRootfs: sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem`)."""
    security = container.get("securityContext")
    return isinstance(security, Mapping) and security.get("readOnlyRootFilesystem") is True


def build_argv(container: Mapping[str, Any], entrypoint: Sequence[str], cmd: Sequence[str],
               env: Mapping[str, str]) -> list[str]:
    """The process to run: the pod's command and args merged with the image's, expanded."""
    command = [expand(str(a), env) for a in container.get("command") or []]
    args = [expand(str(a), env) for a in container.get("args") or []]
    if command:
        return command + args
    if args:
        return list(entrypoint) + args
    return list(entrypoint) + list(cmd)


def _volume_source_kind(volume: Mapping[str, Any]) -> str:
    for key in volume:
        if key != "name":
            return str(key)
    return ""


def _safe_sub_path(base: Path, sub_path: str, *, create: bool) -> Path:
    """`base/sub_path`, refusing paths that leave `base`; created (as a directory) when
    missing and `create`."""
    if os.path.isabs(sub_path) or ".." in Path(sub_path).parts:
        raise ContainerConfigError(
            f"subPath {go_quote(sub_path)} must be a relative path without '..'")
    target = base / sub_path
    real_base = os.path.realpath(base)
    if not target.exists() and not target.is_symlink():
        if not create:
            raise ContainerConfigError(
                f"failed to prepare subPath for volumeMount: path {go_quote(sub_path)} does not "
                "exist in the volume")
        target.mkdir(parents=True, exist_ok=True, mode=0o755)
        os.chmod(target, 0o777)
    real = os.path.realpath(target)
    if real != real_base and not real.startswith(real_base + os.sep):
        raise ContainerConfigError(
            f"subpath {go_quote(real)} not within volume path {go_quote(real_base)}")
    return Path(real)


def build_mounts(pod: Mapping[str, Any], container: Mapping[str, Any],
                 volume_dirs: Mapping[str, Path], env: Mapping[str, str]) -> list[Mount]:
    """The runtime mounts of the container's `volumeMounts` (blocking: it may create subPath
    directories; run it in a thread)."""
    volumes = {str(v.get("name")): v for v in (pod.get("spec") or {}).get("volumes") or []
               if isinstance(v, dict)}
    mounts: list[Mount] = []
    for vm in container.get("volumeMounts") or []:
        name = str(vm.get("name") or "")
        host_dir = volume_dirs.get(name)
        if host_dir is None:
            raise ContainerConfigError(f'volume "{name}" is not mounted')
        volume = volumes.get(name, {})
        kind = _volume_source_kind(volume)
        read_only = bool(vm.get("readOnly")) or kind in READ_ONLY_VOLUME_SOURCES
        sub_path = str(vm.get("subPath") or "")
        if vm.get("subPathExpr"):
            sub_path = expand(str(vm["subPathExpr"]), env)
        host_path = Path(host_dir)
        if sub_path:
            host_path = _safe_sub_path(Path(host_dir), sub_path, create=kind != "image")
        mounts.append(Mount(container_path=str(vm.get("mountPath") or ""),
                            host_path=str(host_path), read_only=read_only, sub_path=sub_path,
                            volume_name=name))
    return mounts
