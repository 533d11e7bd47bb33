"""The pod fields the apiserver accepts but nothing in ephemera acts on, and the `Warning`
each earns: the one table the pod strategy (and later pod templates) warn from, so that no
field is accepted and silently ignored.

Every entry was found by reading what the kubelet, its runtime and the scheduler use. A
field is warned about when it is set to something that would change behaviour upstream (a
`true` flag, a non-empty value); its zero value never warns, nor does its API default
(`terminationMessagePath: /dev/termination-log`, as `kubectl get -o yaml` shows it). The warning is
`<path>: <what> has no effect in ephemera (not implemented)`, e.g.
`spec.containers[0].lifecycle: lifecycle hooks have no effect in ephemera (not implemented)`.

A volume whose source ephemera's kubelet has no plugin for (`hostPath`, `nfs`,
`persistentVolumeClaim`, ...) is warned about too (`spec.volumes[0].hostPath: hostPath
volumes cannot be mounted in ephemera (not implemented): a container that mounts one does not
start`): the kubelet reports upstream's `no volume plugin matched` for it.

The probes (`livenessProbe`, `readinessProbe`, `startupProbe`) are not listed: the kubelet's
prober runs them. The README's "Accepted without effect (warned)" lists this table; a test
keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MOUNTABLE_VOLUME_SOURCES", "UNIMPLEMENTED", "Unimplemented", "unimplemented_paths",
           "unimplemented_warnings", "unimplemented_warnings_on_update"]

# Where a field sits: on the pod spec, its securityContext or affinity; on each container
# (`containers`, `initContainers`, `ephemeralContainers`), its securityContext or each of
# its ports.
POD, POD_SECURITY, POD_AFFINITY = "spec", "spec.securityContext", "spec.affinity"
CONTAINER, CONTAINER_SECURITY, PORT = "container", "container.securityContext", "port"
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


@dataclass(frozen=True)
class Unimplemented:
    """One field ephemera accepts without acting on it."""

    where: str  # one of the places above
    key: str  # the JSON name of the field there
    what: str  # what has no effect, for the warning
    plural: bool = False  # `what` is a plural noun: "sysctls have no effect"
    default: Any = None  # the API default, which asks for nothing either (never warned)

    def asks(self, value: Any) -> bool:
        """Whether `value` asks for something: neither a zero value nor the default."""
        return _set(value) and value != self.default

    def warning(self, path: str) -> str:
        verb = "have" if self.plural else "has"
        return f"{path}: {self.what} {verb} no effect in ephemera (not implemented)"


UNIMPLEMENTED: tuple[Unimplemented, ...] = (
    # The pod.
    Unimplemented(POD, "activeDeadlineSeconds", "a deadline on the pod's run time"),
    Unimplemented(POD, "hostPID", "sharing the host's PID namespace"),
    Unimplemented(POD, "hostIPC", "sharing the host's IPC namespace"),
    Unimplemented(POD, "shareProcessNamespace", "a PID namespace shared by the containers"),
    Unimplemented(POD, "hostUsers", "choosing user namespaces"),
    Unimplemented(POD, "hostAliases", "adding /etc/hosts entries"),
    Unimplemented(POD, "setHostnameAsFQDN", "the FQDN as hostname"),
    Unimplemented(POD, "imagePullSecrets", "registry credentials", plural=True),
    Unimplemented(POD, "runtimeClassName", "choosing a RuntimeClass"),
    Unimplemented(POD, "topologySpreadConstraints", "topology spread scheduling"),
    Unimplemented(POD, "resourceClaims", "dynamic resource allocation"),
    Unimplemented(POD, "os", "choosing the OS"),
    # Its affinity (required node affinity is scheduled on).
    Unimplemented(POD_AFFINITY, "podAffinity", "pod affinity"),
    Unimplemented(POD_AFFINITY, "podAntiAffinity", "pod anti-affinity"),
    # Its security context: the runtime runs every container as root with default
    # capabilities, no LSM profile and no sysctls.
    Unimplemented(POD_SECURITY, "runAsUser", "a user to run as"),
    Unimplemented(POD_SECURITY, "runAsGroup", "a group to run as"),
    Unimplemented(POD_SECURITY, "runAsNonRoot", "requiring a non-root user"),
    Unimplemented(POD_SECURITY, "fsGroup", "a volume-owning group"),
    Unimplemented(POD_SECURITY, "fsGroupChangePolicy", "the fsGroup change policy"),
    Unimplemented(POD_SECURITY, "supplementalGroups", "supplemental groups", plural=True),
    Unimplemented(POD_SECURITY, "supplementalGroupsPolicy", "the supplemental groups policy"),
    Unimplemented(POD_SECURITY, "sysctls", "sysctls", plural=True),
    Unimplemented(POD_SECURITY, "seLinuxOptions", "SELinux options", plural=True),
    Unimplemented(POD_SECURITY, "seLinuxChangePolicy", "the SELinux change policy"),
    Unimplemented(POD_SECURITY, "seccompProfile", "a seccomp profile"),
    Unimplemented(POD_SECURITY, "appArmorProfile", "an AppArmor profile"),
    Unimplemented(POD_SECURITY, "windowsOptions", "Windows options", plural=True),
    # Each container.
    Unimplemented(CONTAINER, "lifecycle", "lifecycle hooks", plural=True),
    Unimplemented(CONTAINER, "resizePolicy", "a resize policy"),
    Unimplemented(CONTAINER, "terminationMessagePath", "a termination message file",
                  default="/dev/termination-log"),
    Unimplemented(CONTAINER, "terminationMessagePolicy", "a termination message policy",
                  default="File"),
    Unimplemented(PORT, "hostPort", "a host port"),
    Unimplemented(PORT, "hostIP", "a host IP"),
    Unimplemented(CONTAINER_SECURITY, "runAsUser", "a user to run as"),
    Unimplemented(CONTAINER_SECURITY, "runAsGroup", "a group to run as"),
    Unimplemented(CONTAINER_SECURITY, "runAsNonRoot", "requiring a non-root user"),
    Unimplemented(CONTAINER_SECURITY, "privileged", "privileged mode"),
    Unimplemented(CONTAINER_SECURITY, "capabilities", "adding or dropping capabilities"),
    Unimplemented(CONTAINER_SECURITY, "allowPrivilegeEscalation", "allowPrivilegeEscalation"),
    Unimplemented(CONTAINER_SECURITY, "procMount", "a proc mount type"),
    Unimplemented(CONTAINER_SECURITY, "seLinuxOptions", "SELinux options", plural=True),
    Unimplemented(CONTAINER_SECURITY, "seccompProfile", "a seccomp profile"),
    Unimplemented(CONTAINER_SECURITY, "appArmorProfile", "an AppArmor profile"),
    Unimplemented(CONTAINER_SECURITY, "windowsOptions", "Windows options", plural=True),
)


# The volume sources the kubelet has a plugin for (`ephemera.kubelet.volumes`; a test keeps
# the two in step); any other source is warned about.
MOUNTABLE_VOLUME_SOURCES = frozenset(
    {"emptyDir", "configMap", "secret", "downwardAPI", "projected", "image"})


def _volume_warning(at: str, source: str) -> str:
    return (f"{at}.{source}: {source} volumes cannot be mounted in ephemera (not "
            "implemented): a container that mounts one does not start")


_PATTERN = {POD: "spec", POD_AFFINITY: "spec.affinity", POD_SECURITY: "spec.securityContext",
            CONTAINER: "spec.containers[*]", PORT: "spec.containers[*].ports[*]",
            CONTAINER_SECURITY: "spec.containers[*].securityContext"}


def unimplemented_paths() -> list[str]:
    """Every warned field as a path pattern (`spec.containers[*].lifecycle`; init and
    ephemeral containers alike), as the README lists them."""
    return [f"{_PATTERN[e.where]}.{e.key}" for e in UNIMPLEMENTED]


def _set(value: Any) -> bool:
    """Whether a value asks for something: its zero value (absent, null, false, empty)
    does not."""
    return value is not None and value is not False and value != "" and value != [] and \
        value != {}


def _d(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> list[tuple[int, Mapping[str, Any]]]:
    return [(i, v) for i, v in enumerate(value) if isinstance(v, Mapping)] \
        if isinstance(value, list) else []


_BY_PLACE: dict[str, list[Unimplemented]] = {}
for _entry in UNIMPLEMENTED:
    _BY_PLACE.setdefault(_entry.where, []).append(_entry)


def _warnings(spec: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
    """(identity, warning) of each field set: the identity names a container by its name,
    not its index, so that an update that reorders containers earns no new warning."""
    def check(place: str, obj: Mapping[str, Any], at: str, identity: str
              ) -> list[tuple[str, str]]:
        return [(f"{identity}.{e.key}", e.warning(f"{at}.{e.key}"))
                for e in _BY_PLACE.get(place, ()) if e.key in obj and e.asks(obj[e.key])]

    out = check(POD, spec, path, "spec")
    for i, volume in _items(spec.get("volumes")):
        out += [(f"volumes/{volume.get('name')}/{key}",
                 _volume_warning(f"{path}.volumes[{i}]", key))
                for key in volume if key != "name" and key not in MOUNTABLE_VOLUME_SOURCES]
    out += check(POD_AFFINITY, _d(spec.get("affinity")), f"{path}.affinity", "affinity")
    out += check(POD_SECURITY, _d(spec.get("securityContext")), f"{path}.securityContext",
                 "securityContext")
    for kind in _CONTAINER_LISTS:
        for i, container in _items(spec.get(kind)):
            at, name = f"{path}.{kind}[{i}]", f"{kind}/{container.get('name')}"
            out += check(CONTAINER, container, at, name)
            for j, port in _items(container.get("ports")):
                out += check(PORT, port, f"{at}.ports[{j}]", f"{name}/ports[{j}]")
            out += check(CONTAINER_SECURITY, _d(container.get("securityContext")),
                         f"{at}.securityContext", f"{name}/securityContext")
    return out


def unimplemented_warnings(spec: Mapping[str, Any], path: str = "spec") -> list[str]:
    """The warnings of a pod spec (at `path`, `spec` for a pod, `spec.template.spec` for a
    template), in the table's order within each place, pod before containers."""
    return [text for _, text in _warnings(spec, path)]


def unimplemented_warnings_on_update(new_spec: Mapping[str, Any],
                                     old_spec: Mapping[str, Any],
                                     path: str = "spec") -> list[str]:
    """The warnings an update earns: those of fields the old spec did not already set (on
    the pod, or on the container of the same name), such as a container added through
    `/dynamic`, so that writers of unchanged pods are not warned again and again."""
    before = {identity for identity, _ in _warnings(old_spec, path)}
    return [text for identity, text in _warnings(new_spec, path) if identity not in before]
