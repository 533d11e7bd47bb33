"""Applying a `Ruleset` to the kernel through Debian's `nft` (the `nftables` package), in its
JSON interface (`nft -j -f -`): each call is one atomic transaction.

- `full_transaction`: `add table`, `delete table`, `add table`, then every chain, map, set,
  element and rule: the table is replaced whole, whatever was in it (a stale table a
  `kill -9`ed proxy left behind included), in one step that no packet sees half done.
- `partial_transaction(old, new)`: against the table last applied, only what changed: new
  chains added, changed ones flushed and refilled, maps and sets flushed and refilled (as
  upstream rebuilds them at every sync), chains no longer used flushed now and deleted by
  the next sync (upstream waits as well before deleting a chain a map pointed at).
- `delete_table`: on exit.

`table_name(cluster_cidr, node)` is unique per cluster and node, so several proxies (joined
nodes, test clusters side by side) on one machine never touch each other's table.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ephemera.proxy.rules import (
    BASE_CHAINS,
    FAMILY,
    MAP_TYPES,
    SET_TYPES,
    Ruleset,
)

Command = dict[str, Any]
NFT_TIMEOUT = 30.0
TABLE_PREFIX = "ephemera-"
BRIDGE_NF_CALL = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


class NftError(Exception):
    """`nft` failed or is missing; the message is nft's own."""


def table_name(cluster_cidr: str, node_name: str) -> str:
    """`ephemera-` and 12 hex digits of the SHA-256 of the cluster CIDR and the node name."""
    digest = hashlib.sha256(f"{cluster_cidr}|{node_name}".encode()).hexdigest()[:12]
    return TABLE_PREFIX + digest


def _obj(table: str, **fields: Any) -> dict[str, Any]:
    return {"family": FAMILY, "table": table, **fields}


def _chain(table: str, name: str) -> Command:
    base = BASE_CHAINS.get(name)
    if base is None:
        return {"chain": _obj(table, name=name)}
    return {"chain": _obj(table, name=name, type=base.type, hook=base.hook, prio=base.prio,
                          policy="accept")}


def _rules(table: str, chain: str, rules: Iterable[list[Any]]) -> list[Command]:
    return [{"add": {"rule": _obj(table, chain=chain, expr=expr)}} for expr in rules]


def _elements(table: str, rs: Ruleset) -> list[Command]:
    out: list[Command] = []
    for name, elems in rs.maps.items():
        if elems:
            out.append({"add": {"element": _obj(table, name=name,
                                                elem=[[k, v] for k, v in elems])}})
    for name, members in rs.sets.items():
        if members:
            out.append({"add": {"element": _obj(table, name=name, elem=list(members))}})
    return out


def _containers(table: str) -> list[Command]:
    out: list[Command] = []
    for name, key in MAP_TYPES.items():
        out.append({"add": {"map": _obj(table, name=name, type=key, map="verdict")}})
    for name, key in SET_TYPES.items():
        out.append({"add": {"set": _obj(table, name=name, type=key)}})
    return out


def full_transaction(table: str, rs: Ruleset) -> list[Command]:
    """Replace the table with `rs`."""
    tbl = {"table": {"family": FAMILY, "name": table}}
    cmds: list[Command] = [{"add": tbl}, {"delete": tbl}, {"add": tbl}]
    cmds += [{"add": _chain(table, name)} for name in rs.chains]
    cmds += _containers(table)
    cmds += _elements(table, rs)
    for name, rules in rs.chains.items():
        cmds += _rules(table, name, rules)
    return cmds


def partial_transaction(table: str, old: Ruleset, new: Ruleset,
                        stale: Sequence[str] = ()) -> tuple[list[Command], list[str]]:
    """The commands that turn the table from `old` into `new`, and the chains to delete at
    the next sync. `stale`: chains flushed by the previous partial sync, deleted now unless
    `new` uses them again."""
    cmds: list[Command] = []
    now_stale = [c for c in old.chains if c not in new.chains]
    for name in stale:
        if name not in new.chains:
            cmds.append({"delete": {"chain": _obj(table, name=name)}})
    added = [c for c in new.chains if c not in old.chains]
    cmds += [{"add": _chain(table, name)} for name in added]
    for name in (*MAP_TYPES, *SET_TYPES):
        cmds.append({"flush": {"map" if name in MAP_TYPES else "set": _obj(table, name=name)}})
    changed = [c for c in new.chains if c in old.chains and old.chains[c] != new.chains[c]]
    cmds += [{"flush": {"chain": _obj(table, name=name)}} for name in (*changed, *now_stale)]
    cmds += _elements(table, new)
    for name in (*added, *changed):
        cmds += _rules(table, name, new.chains[name])
    return cmds, now_stale


def delete_table_command(table: str) -> list[Command]:
    """Delete the table if it is there (`add` first makes the delete never fail)."""
    tbl = {"table": {"family": FAMILY, "name": table}}
    return [{"add": tbl}, {"delete": tbl}]


def nft_binary() -> str:
    found = shutil.which("nft") or ("/usr/sbin/nft" if Path("/usr/sbin/nft").exists() else "")
    if not found:
        raise NftError("nft not found (install Debian's nftables package)")
    return found


def run(commands: list[Command], *, check_only: bool = False) -> None:
    """One `nft -j -f -` transaction; `check_only`: `nft -c` (parse and check, apply nothing)."""
    argv = [nft_binary(), *(["-c"] if check_only else []), "-j", "-f", "-"]
    body = json.dumps({"nftables": [{"metainfo": {"json_schema_version": 1}}, *commands]})
    try:
        done = subprocess.run(argv, input=body, capture_output=True, text=True,
                              timeout=NFT_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise NftError(f"nft: {err}") from None
    if done.returncode != 0:
        raise NftError((done.stderr or done.stdout).strip() or f"nft exited {done.returncode}")


def list_tables() -> list[str]:
    """The names of the `ip` family's tables."""
    done = subprocess.run([nft_binary(), "-j", "list", "tables", FAMILY], capture_output=True,
                          text=True, timeout=NFT_TIMEOUT, check=False)
    if done.returncode != 0:
        raise NftError(done.stderr.strip())
    items = json.loads(done.stdout or "{}").get("nftables") or []
    return [item["table"]["name"] for item in items if "table" in item]


def list_table(table: str) -> list[dict[str, Any]]:
    """The table's objects as `nft -j list table` gives them; [] when there is none."""
    done = subprocess.run([nft_binary(), "-j", "list", "table", FAMILY, table],
                          capture_output=True, text=True, timeout=NFT_TIMEOUT, check=False)
    if done.returncode != 0:
        return []
    items: list[dict[str, Any]] = json.loads(done.stdout or "{}").get("nftables") or []
    return [item for item in items if "metainfo" not in item]


def ensure_bridge_netfilter() -> bool:
    """Whether bridged IPv4 traffic passes the `ip` family's hooks (br_netfilter with
    `bridge-nf-call-iptables` on), turning the switch on when the module is there and it is
    off, and loading the module when `modprobe` can: then a reply from a backend to a
    client pod on the same bridge is un-DNATed by conntrack, as upstream expects. False
    means the proxy must masquerade pod traffic to Services instead."""
    if not BRIDGE_NF_CALL.exists() and shutil.which("modprobe"):
        subprocess.run(["modprobe", "br_netfilter"], capture_output=True, check=False,
                       timeout=NFT_TIMEOUT)
    try:
        if BRIDGE_NF_CALL.read_text().strip() != "1":
            BRIDGE_NF_CALL.write_text("1\n")
        return BRIDGE_NF_CALL.read_text().strip() == "1"
    except OSError:
        return False
