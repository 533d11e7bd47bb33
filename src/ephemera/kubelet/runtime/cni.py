"""The pod network through CNI plugins, as containerd's CRI plugin drives them.

What it owns: the network config list of one kubelet (`<root>/runtime/cni/net.d/
10-ephemera.conflist`, written when the kubelet learns its Node's `spec.podCIDR`, the CRI's
`UpdateRuntimeConfig`), and the CNI 1.0 exec protocol: each plugin of the list is run as
`<CNI_PATH>/<type>` with the `CNI_*` environment and its config (with `name`, `cniVersion`
and, after the first, `prevResult`) on stdin; ADD runs the list in order, DEL in reverse,
CHECK in order with the ADD's result as `prevResult`. The loopback plugin brings up `lo`.

The list is Debian's `containernetworking-plugins` (in /usr/lib/cni): `bridge` (one Linux
bridge per kubelet, the pod CIDR's first address as its gateway, no masquerade) with
`host-local` IPAM (leases under `<root>/runtime/cni/networks/`, not the machine-wide
/var/lib/cni, so that kubelets and test clusters never share one), then `portmap`.

Names are derived from the kubelet's root dir, so kubelets (nodes, test clusters) on one
machine never share a bridge: `eph` + 11 hex digits of the root's SHA-256 (15 characters,
Linux's limit).

Errors are `CniError` with the plugin's own `msg` and `details` (the CNI error object).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ephemera.api.goformat import go_quote

CNI_VERSION = "1.0.0"
NETWORK_NAME = "ephemera"
CONFLIST_NAME = "10-ephemera.conflist"
DEFAULT_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
POD_IFNAME = "eth0"
PLUGIN_TIMEOUT = 60.0


class CniError(Exception):
    """A CNI plugin failed (or none is configured); the message is the plugin's."""


def bridge_name(root: Path) -> str:
    """The bridge of the kubelet whose root dir is `root` (at most 15 characters)."""
    return "eph" + hashlib.sha256(str(root).encode()).hexdigest()[:11]


def find_bin_dir() -> str:
    """The first of the usual plugin directories that has the bridge plugin, "" if none."""
    for directory in DEFAULT_BIN_DIRS:
        if os.access(os.path.join(directory, "bridge"), os.X_OK):
            return directory
    return ""


def network_config(pod_cidr: str, bridge: str, ipam_dir: Path) -> dict[str, Any]:
    """The network config list for a node whose pods take addresses in `pod_cidr`."""
    network = ipaddress.ip_network(pod_cidr, strict=True)
    gateway = str(next(network.hosts()))
    return {
        "cniVersion": CNI_VERSION,
        "name": NETWORK_NAME,
        "plugins": [
            {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(ipam_dir),
                      "ranges": [[{"subnet": str(network), "gateway": gateway}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


@dataclass(frozen=True)
class PodRef:
    """Who a sandbox's network is for (CNI_ARGS, as containerd passes them)."""

    namespace: str
    name: str
    uid: str
    sandbox_id: str


class CniNetwork:
    """One kubelet's pod network: its config list and the plugin calls."""

    def __init__(self, root: Path, bin_dir: str = "") -> None:
        self.dir = root / "runtime" / "cni"
        self.conf_dir = self.dir / "net.d"
        self.ipam_dir = self.dir / "networks"
        self.bridge = bridge_name(root)
        self.bin_dir = bin_dir or find_bin_dir()

    @property
    def conflist_path(self) -> Path:
        return self.conf_dir / CONFLIST_NAME

    def configure(self, pod_cidr: str) -> bool:
        """Write the config list for `pod_cidr` (idempotent); True if it changed."""
        wanted = network_config(pod_cidr, self.bridge, self.ipam_dir)
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            if json.loads(self.conflist_path.read_text()) == wanted:
                return False
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.conflist_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(wanted, indent=2) + "\n")
        os.replace(tmp, self.conflist_path)
        return True

    def config(self) -> dict[str, Any]:
        try:
            conf: dict[str, Any] = json.loads(self.conflist_path.read_text())
        except FileNotFoundError:
            # containerd's message while no config is there (the kubelet has no podCIDR yet)
            raise CniError("cni config uninitialized") from None
        return conf

    def pod_cidr(self) -> str:
        """The configured pod CIDR, "" before `configure`."""
        try:
            conf = self.config()
        except (CniError, json.JSONDecodeError):
            return ""
        return str(conf["plugins"][0]["ipam"]["ranges"][0][0]["subnet"])

    def remove_bridge(self) -> None:
        """Delete this kubelet's bridge (its address and route go with it); nothing if it
        is not there. Only once no sandbox is attached."""
        if os.path.exists(f"/sys/class/net/{self.bridge}"):
            result = subprocess.run(["ip", "link", "delete", self.bridge, "type", "bridge"],
                                    capture_output=True, text=True, timeout=30)
            if result.returncode != 0 and os.path.exists(f"/sys/class/net/{self.bridge}"):
                raise CniError(f"deleting bridge {self.bridge}: {result.stderr.strip()}")

    # -- the exec protocol ---------------------------------------------------------------------

    def _env(self, command: str, pod: PodRef, netns: str, ifname: str) -> dict[str, str]:
        args = (f"IgnoreUnknown=1;K8S_POD_NAMESPACE={pod.namespace};K8S_POD_NAME={pod.name};"
                f"K8S_POD_INFRA_CONTAINER_ID={pod.sandbox_id};K8S_POD_UID={pod.uid}")
        return {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
                "CNI_COMMAND": command, "CNI_CONTAINERID": pod.sandbox_id,
                "CNI_NETNS": netns, "CNI_IFNAME": ifname, "CNI_ARGS": args,
                "CNI_PATH": self.bin_dir}

    def _exec(self, command: str, plugin: Mapping[str, Any], conflist: Mapping[str, Any],
              pod: PodRef, netns: str, ifname: str,
              prev_result: Mapping[str, Any] | None) -> dict[str, Any] | None:
        conf = dict(plugin)
        conf["name"] = conflist["name"]
        conf["cniVersion"] = conflist["cniVersion"]
        if prev_result is not None:
            conf["prevResult"] = prev_result
        kind = str(plugin.get("type", ""))
        binary = os.path.join(self.bin_dir, kind)
        if not self.bin_dir or not os.access(binary, os.X_OK):
            raise CniError(f"failed to find plugin {go_quote(kind)} in path [{self.bin_dir}]")
        try:
            result = subprocess.run([binary], input=json.dumps(conf).encode(),
                                    env=self._env(command, pod, netns, ifname),
                                    capture_output=True, timeout=PLUGIN_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise CniError(f"plugin type={go_quote(kind)} timed out after "
                           f"{PLUGIN_TIMEOUT:g}s") from None
        out = result.stdout.decode(errors="replace").strip()
        if result.returncode != 0:
            try:
                error = json.loads(out)
                message = str(error.get("msg", ""))
                if error.get("details"):
                    message += f"; {error['details']}"
            except (json.JSONDecodeError, AttributeError):
                message = out or result.stderr.decode(errors="replace").strip()
            raise CniError(f"plugin type={go_quote(kind)} failed ({command}): {message}")
        if command != "ADD" or not out:
            return None
        try:
            answer: dict[str, Any] = json.loads(out)
        except json.JSONDecodeError:
            raise CniError(f"plugin type={go_quote(kind)} answered no JSON: {out[:200]}") from None
        return answer

    def loopback(self, command: str, pod: PodRef, netns: str) -> None:
        """Only the loopback plugin (a sandbox made before the node has a pod CIDR)."""
        self._loopback(command, pod, netns)

    def _loopback(self, command: str, pod: PodRef, netns: str) -> None:
        conflist = {"cniVersion": CNI_VERSION, "name": "cni-loopback"}
        self._exec(command, {"type": "loopback"}, conflist, pod, netns, "lo", None)

    def add(self, pod: PodRef, netns: str) -> dict[str, Any]:
        """Attach the sandbox's netns to the pod network; the CNI result (keep it for DEL
        and CHECK). Undone (DEL) if a plugin fails."""
        conflist = self.config()
        self._loopback("ADD", pod, netns)
        result: dict[str, Any] | None = None
        try:
            for plugin in conflist["plugins"]:
                result = self._exec("ADD", plugin, conflist, pod, netns, POD_IFNAME, result)
        except CniError:
            with contextlib.suppress(CniError):
                self.delete(pod, netns, result or {}, conflist)
            raise
        return result or {}

    def check(self, pod: PodRef, netns: str, result: Mapping[str, Any]) -> None:
        """CHECK: raise CniError if the sandbox's network is not as ADD left it."""
        conflist = self.config()
        for plugin in conflist["plugins"]:
            self._exec("CHECK", plugin, conflist, pod, netns, POD_IFNAME, result)

    def delete(self, pod: PodRef, netns: str, result: Mapping[str, Any],
               conflist: Mapping[str, Any] | None = None) -> None:
        """DEL in reverse order; idempotent (plugins ignore what is already gone). `netns`
        may be "" when the namespace no longer exists: the IP lease is released anyway."""
        conflist = conflist or self.config()
        errors: list[str] = []
        for plugin in reversed(conflist["plugins"]):
            try:
                self._exec("DEL", plugin, conflist, pod, netns, POD_IFNAME, result or None)
            except CniError as err:
                errors.append(str(err))
        if errors:
            raise CniError("; ".join(errors))


def result_ips(result: Mapping[str, Any]) -> list[str]:
    """The pod's addresses in a CNI result (without prefix lengths)."""
    ips: Sequence[Mapping[str, Any]] = result.get("ips") or []
    return [str(entry["address"]).split("/")[0] for entry in ips if entry.get("address")]
