"""The node's own address on one machine: an interface the project creates for it.

What it owns: the interface `ephn` + 11 hex digits of the SHA-256 of a kubelet root dir
(15 characters, Linux's limit), holding one /32 of `NODE_RANGE`, 198.18.0.0/15 (RFC 2544's
benchmarking range, never routed on the Internet and rarely used on a LAN). The interface
is a Linux bridge with no port, which acts as a dummy interface does (always up, never sends
a packet out) and, unlike the `dummy` driver, exists in every kernel that runs the pod
network (whose CNI `bridge` plugin needs it; some kernels, e.g. Firecracker guests, have no
`dummy` module). The address is
chosen from the root dir's hash too, so that a kubelet (or `ephemera up`, which makes the
one of its kubelet before starting the apiserver on it) gets the same address at every start,
and several kubelets and test clusters on one machine get distinct ones: the first address
from that starting point that no interface of the machine holds.

Pods reach the address through their default route (the bridge's gateway): the kernel
delivers a packet for any of its local addresses whatever the interface, so no forwarding,
route or NAT is needed, and nothing is exposed on the machine's external interfaces.

Cleanup: `remove(root)` at a clean stop; the interface's alias names the root dir, and
`sweep()` (run by every `ensure`) deletes the `ephn*` interfaces whose root dir is gone, so
that a cluster killed with SIGKILL and deleted leaves nothing for long; one killed and started
again on the same root dir finds its interface and keeps it.

Errors (no `ip`, no CAP_NET_ADMIN) are `NodeAddressError` with `ip`'s message.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import subprocess
from pathlib import Path

NODE_RANGE = ipaddress.IPv4Network("198.18.0.0/15")
PREFIX = "ephn"
IP_TIMEOUT = 30.0
IFALIAS_MAX = 256  # Linux's IFALIASZ, with its terminating NUL


class NodeAddressError(Exception):
    """The node's interface could not be made (the message is `ip`'s)."""


def interface_name(root: Path) -> str:
    """The dummy interface of the kubelet whose root dir is `root`."""
    return PREFIX + hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:11]


def _start_index(root: Path) -> int:
    digest = hashlib.sha256(b"node-address\0" + str(Path(root).resolve()).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def candidates(root: Path, count: int = 64) -> list[str]:
    """The addresses `root`'s node tries, in order (never the range's first or last)."""
    usable = NODE_RANGE.num_addresses - 2
    start = _start_index(root) % usable
    return [str(NODE_RANGE.network_address + 1 + (start + i) % usable) for i in range(count)]


def _ip(*argv: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=IP_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise NodeAddressError(f"ip {' '.join(argv)}: {err}") from None


def _checked(*argv: str) -> None:
    result = _ip(*argv)
    if result.returncode != 0:
        raise NodeAddressError(f"ip {' '.join(argv)}: {result.stderr.strip()}")


def _exists(name: str) -> bool:
    return os.path.exists(f"/sys/class/net/{name}")


def machine_addresses() -> dict[str, str]:
    """Every IPv4 address of the machine's interfaces, to the interface holding it."""
    out = _ip("-4", "-o", "addr", "show").stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields and len(fields) > 1:
            found[fields[fields.index("inet") + 1].split("/")[0]] = fields[1].split("@")[0]
    return found


def current_address(root: Path) -> str:
    """The address `root`'s interface holds now, "" if there is none."""
    name = interface_name(root)
    for address, holder in machine_addresses().items():
        if holder == name and ipaddress.ip_address(address) in NODE_RANGE:
            return address
    return ""


def _alias(name: str) -> str:
    try:
        return Path(f"/sys/class/net/{name}/ifalias").read_text().strip()
    except OSError:
        return ""


def sweep() -> list[str]:
    """Delete the node interfaces whose root dir (their alias) no longer exists; their
    names."""
    removed = []
    try:
        names = os.listdir("/sys/class/net")
    except OSError:
        return []
    for name in names:
        if not name.startswith(PREFIX):
            continue
        alias = _alias(name)
        if (alias and os.path.isabs(alias) and not os.path.isdir(alias)
                and _ip("link", "delete", name).returncode == 0):
            removed.append(name)
    return removed


def ensure(root: Path) -> str:
    """The node address of `root`'s kubelet, creating its interface when missing. A failure
    half-way undoes what this call made (the interface it created, or the address it added
    to one that was there) before `NodeAddressError` is raised: nothing is left behind."""
    root = Path(root).resolve()
    sweep()
    name = interface_name(root)
    held = machine_addresses()
    if _exists(name):
        mine = [a for a, holder in held.items()
                if holder == name and ipaddress.ip_address(a) in NODE_RANGE]
        if mine:
            _checked("link", "set", name, "up")
            return mine[0]
        created = False
    else:
        _checked("link", "add", name, "type", "bridge")
        created = True
    added = ""
    try:
        if len(str(root).encode()) < IFALIAS_MAX:  # a longer one is never swept
            _checked("link", "set", name, "alias", str(root))
        for address in candidates(root):
            if address in held:
                continue
            _checked("addr", "replace", f"{address}/32", "dev", name)
            added = address
            _checked("link", "set", name, "up")
            return address
        raise NodeAddressError(f"no free address for {name} in {NODE_RANGE}")
    except BaseException:
        _undo(name, created, added)
        raise


def _undo(name: str, created: bool, added: str) -> None:
    """Take back what a failed `ensure` made: the interface it created (its address goes
    with it), else the address it added; best effort, the first error is what is raised."""
    with contextlib.suppress(NodeAddressError):
        if created:
            _ip("link", "delete", name)
        elif added:
            _ip("addr", "delete", f"{added}/32", "dev", name)


def remove(root: Path) -> None:
    """Delete `root`'s interface (its address goes with it); nothing if it is not there."""
    name = interface_name(root)
    if _exists(name):
        result = _ip("link", "delete", name)
        if result.returncode != 0 and _exists(name):
            raise NodeAddressError(f"ip link delete {name}: {result.stderr.strip()}")
