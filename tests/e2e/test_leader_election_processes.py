"""Leader election of real `ephemera scheduler` and `ephemera controller-manager` processes
against one `ephemera apiserver`, each as its own RBAC identity, on short timings (lease 4 s,
renew deadline 3 s, retry 1 s): two schedulers, of which only the leader ever schedules (the
follower never binds, so no bind is refused with 409: the apiserver's audit log holds exactly
one bind per pod, each 201); `kill -9` of the leader, after which
the follower takes the Lease over no earlier than one lease duration after the last renewal
and within client-go's bound, and binds the new pods; a stopped leader that releases its
Lease. Two controller-managers, of which only the leader runs controllers, the follower
taking over after a `kill -9`; a controller-manager whose Lease is taken exits 1. Flag
errors are usage errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import ClusterAccess
from processes import WAIT, Proc, tails, until

from ephemera.apiserver.certs import (
    CONTROLLER_MANAGER_USER,
    SCHEDULER_USER,
    ensure_pki,
    write_client_kubeconfig,
)
from ephemera.client.leaderelection import JITTER_FACTOR

pytestmark = pytest.mark.e2e

LEASE, RENEW, RETRY = 4.0, 3.0, 1.0
TIMINGS = ["--leader-elect-lease-duration", f"{LEASE:g}s",
           "--leader-elect-renew-deadline", f"{RENEW:g}s",
           "--leader-elect-retry-period", f"{RETRY:g}s"]
# client-go's bound on a takeover after the leader's last renewal: the follower sees that
# renewal at most one jittered retry later, waits one lease duration from then, and tries
# again at most one jittered retry after; plus slack for requests on a loaded machine.
TAKEOVER_BOUND = LEASE + 2 * RETRY * (1 + JITTER_FACTOR) + 3.0


def identity(c: Proc) -> str:
    """The candidate identity the component's log names ("" before it started electing)."""
    for line in c.text().splitlines():
        if "candidate " in line and " for lease " in line:
            return line.split("candidate ", 1)[1].split(" for lease ", 1)[0]
    return ""


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterAccess]:
    """`ephemera apiserver` on a free port (its admin kubeconfig in the data dir) and
    kubeconfigs for the scheduler and the controller-manager identities."""
    base = tmp_path_factory.mktemp("leader-election")
    data_dir = base / "data"
    data_dir.mkdir()
    port_file = data_dir / "port"
    apiserver = Proc("apiserver", [
        "apiserver", "--data-dir", str(data_dir), "--port", "0", "--port-file", str(port_file),
        "--write-kubeconfig", str(data_dir / "kubeconfig"),
        "--audit-log-path", str(data_dir / "audit.log")], base / "apiserver.log").start()
    try:
        until(lambda: (data_dir / "kubeconfig").exists() or apiserver.process.poll() is not None,
              "the apiserver to write its kubeconfig", logs=tails([apiserver]))
        assert apiserver.process.poll() is None, apiserver.text()
        url = f"https://127.0.0.1:{port_file.read_text().strip()}"
        pki = ensure_pki(data_dir)
        write_client_kubeconfig(data_dir / "scheduler.kubeconfig", url, pki, SCHEDULER_USER)
        write_client_kubeconfig(data_dir / "controller-manager.kubeconfig", url, pki,
                                CONTROLLER_MANAGER_USER)
        home = base / "home"
        home.mkdir()
        yield ClusterAccess(data_dir, home)
    finally:
        apiserver.stop(30)


@contextmanager
def components(cp: ClusterAccess, command: str, count: int, *extra: str
               ) -> Iterator[list[Proc]]:
    kubeconfig = cp.data_dir / ("scheduler.kubeconfig" if command == "scheduler"
                                else "controller-manager.kubeconfig")
    started: list[Proc] = []
    try:
        for i in range(count):
            log = cp.data_dir.parent / f"{command}-{i}-{time.monotonic_ns()}.log"
            started.append(Proc(f"{command}-{i}", [command, "--kubeconfig", str(kubeconfig),
                                                   *TIMINGS, *extra], log).start())
        yield started
    finally:
        for c in started:
            c.kill()


def lease(cp: ClusterAccess, name: str) -> dict[str, Any]:
    result = cp.kubectl("get", "lease", "-n", "kube-system", name, "-o", "json", check=False)
    if result.returncode != 0:
        return {}
    spec: dict[str, Any] = json.loads(result.stdout)["spec"]
    return spec


def holder(cp: ClusterAccess, name: str) -> str:
    return str(lease(cp, name).get("holderIdentity") or "")


def micro(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def leader_and_follower(cp: ClusterAccess, name: str, pair: list[Proc]
                        ) -> tuple[Proc, Proc]:
    """Once both candidates are running and one holds the Lease: (leader, follower)."""
    until(lambda: all(identity(c) for c in pair), "both candidates started", logs=tails(pair))
    current = until(lambda: holder(cp, name), f"a holder of {name}", logs=tails(pair))
    leader = next(c for c in pair if identity(c) == current)
    follower = next(c for c in pair if c is not leader)
    # The follower has seen the leader's Lease (and so is waiting, not leading).
    until(lambda: f"new leader of kube-system/{name}: {current}" in follower.text(),
          "the follower saw the leader", logs=tails(pair))
    return leader, follower


def node(name: str) -> dict[str, Any]:
    allocatable = {"cpu": "8", "memory": "16Gi", "ephemeral-storage": "10Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": allocatable, "allocatable": allocatable,
                       "conditions": [{"type": "Ready", "status": "True",
                                       "reason": "KubeletReady"}]}}


def pods(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{prefix}-{i}"},
             "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}
            for i in range(count)]


def create(cp: ClusterAccess, objects: list[dict[str, Any]]) -> None:
    cp.kubectl("create", "-f", "-", input=yaml.safe_dump_all(objects))


def unbound(cp: ClusterAccess, prefix: str) -> list[str]:
    listed = json.loads(cp.kubectl("get", "pods", "-o", "json").stdout)
    return [p["metadata"]["name"] for p in listed["items"]
            if p["metadata"]["name"].startswith(prefix) and not p["spec"].get("nodeName")]


def bind_attempts(cp: ClusterAccess) -> list[tuple[str, int]]:
    """Every `pods/binding` create the apiserver audited: (pod, response code)."""
    attempts = []
    for line in (cp.data_dir / "audit.log").read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if event.get("stage") == "ResponseComplete" and event.get("verb") == "create" \
                and ref.get("resource") == "pods" and ref.get("subresource") == "binding":
            attempts.append((str(ref.get("name")), int(event["responseStatus"]["code"])))
    return attempts


def steal(cp: ClusterAccess, name: str, identity: str) -> bool:
    """Write the Lease as held by `identity`; False when the holder renewed in between (409)."""
    current = json.loads(cp.kubectl("get", "lease", "-n", "kube-system", name, "-o",
                                    "json").stdout)
    current["spec"]["holderIdentity"] = identity
    result = cp.kubectl("replace", "-f", "-", input=json.dumps(current), check=False)
    assert result.returncode == 0 or "Conflict" in result.stderr, result.stderr
    return result.returncode == 0


def election_events(cp: ClusterAccess, name: str) -> list[str]:
    listed = json.loads(cp.kubectl("get", "events", "-n", "kube-system", "-o", "json").stdout)
    return [e["message"] for e in listed["items"]
            if e["reason"] == "LeaderElection" and e["involvedObject"]["name"] == name]


def test_two_schedulers_only_the_leader_binds_and_the_other_takes_over(
        control_plane: ClusterAccess) -> None:
    cp = control_plane
    with components(cp, "scheduler", 2) as pair:
        leader, follower = leader_and_follower(cp, "kube-scheduler", pair)
        create(cp, [node("le-node-a"), node("le-node-b")])
        create(cp, pods("first", 20))
        until(lambda: not unbound(cp, "first"), "the first pods bound",
              logs=tails([leader, follower]))
        scheduled = [line for line in leader.text().splitlines() if " scheduled default/first-"
                     in line]
        assert len(scheduled) == 20, leader.text()[-3000:]
        # The follower never scheduled: no loop started, no bind tried, none refused.
        assert "scheduler default-scheduler started" not in follower.text()
        assert "default/first-" not in follower.text()
        assert "binding" not in follower.text() and "already assigned" not in leader.text()
        # The apiserver saw one bind per pod, none refused.
        until(lambda: len(bind_attempts(cp)) >= 20, "the binds audited")
        assert sorted(bind_attempts(cp)) == sorted((f"first-{i}", 201) for i in range(20))

        last_renewal = micro(lease(cp, "kube-scheduler")["renewTime"])
        leader.process.send_signal(signal.SIGKILL)
        leader.process.wait(30)
        last_renewal = max(last_renewal, micro(lease(cp, "kube-scheduler")["renewTime"]))
        create(cp, pods("second", 5))
        until(lambda: holder(cp, "kube-scheduler") == identity(follower),
              "the follower took the Lease over", logs=tails([follower]))
        taken = lease(cp, "kube-scheduler")
        assert taken["leaseTransitions"] == 1
        gap = micro(taken["acquireTime"]) - last_renewal
        # Never before the dead leader's lease ran out, and within client-go's bound.
        assert LEASE <= gap <= TAKEOVER_BOUND, (gap, taken)
        until(lambda: not unbound(cp, "second"), "the new pods bound by the new leader",
              logs=tails([follower]))
        assert "successfully acquired lease kube-system/kube-scheduler" in follower.text()
        assert len([line for line in follower.text().splitlines()
                    if " scheduled default/second-" in line]) == 5
        until(lambda: len(bind_attempts(cp)) >= 25, "the binds audited")
        assert sorted(bind_attempts(cp)) == sorted(
            [(f"first-{i}", 201) for i in range(20)] + [(f"second-{i}", 201) for i in range(5)])
        messages = election_events(cp, "kube-scheduler")
        assert f"{identity(leader)} became leader" in messages
        assert f"{identity(follower)} became leader" in messages

        # A stopped leader releases its Lease (kube-scheduler's ReleaseOnCancel).
        follower.process.send_signal(signal.SIGTERM)
        assert follower.process.wait(30) == 0
        released = lease(cp, "kube-scheduler")
        assert (released["holderIdentity"], released["leaseDurationSeconds"]) == ("", 1)
        assert f"{identity(follower)} stopped leading" in election_events(cp, "kube-scheduler")


def test_two_controller_managers_one_leads_and_a_lost_lease_exits(
        control_plane: ClusterAccess) -> None:
    cp = control_plane
    with components(cp, "controller-manager", 2) as pair:
        leader, follower = leader_and_follower(cp, "kube-controller-manager", pair)
        until(lambda: "controller-manager: running against" in leader.text(),
              "the leader runs the controllers", logs=tails([leader]))
        assert "controller-manager: running against" not in follower.text()

        leader.process.send_signal(signal.SIGKILL)
        leader.process.wait(30)
        until(lambda: holder(cp, "kube-controller-manager") == identity(follower),
              "the follower took the Lease over", logs=tails([follower]))
        until(lambda: "controller-manager: running against" in follower.text(),
              "the new leader runs the controllers", logs=tails([follower]))
        # The controllers work: the new namespace gets its default ServiceAccount.
        cp.kubectl("create", "namespace", "le-fresh")
        until(lambda: cp.kubectl("get", "serviceaccount", "default", "-n", "le-fresh",
                                 check=False).returncode == 0,
              "the default ServiceAccount", logs=tails([follower]))

        # Someone else takes the Lease: the leader cannot renew and exits 1.
        until(lambda: steal(cp, "kube-controller-manager", "someone-else"), "the Lease taken",
              logs=tails([follower]))
        assert follower.process.wait(WAIT) == 1
        assert "leaderelection lost" in follower.text()


@pytest.mark.parametrize(("flags", "message"), [
    (["--leader-elect-lease-duration", "5s", "--leader-elect-renew-deadline", "10s"],
     "leader election: leaseDuration must be greater than renewDeadline"),
    (["--leader-elect-retry-period", "15"],
     "argument --leader-elect-retry-period: time: missing unit in duration \"15\""),
    (["--leader-elect=maybe"],
     "argument --leader-elect: strconv.ParseBool: parsing \"maybe\": invalid syntax"),
])
def test_leader_election_flag_errors_are_usage_errors(tmp_path: Path, flags: list[str],
                                                      message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ephemera.cli", "scheduler", *flags],
        capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(tmp_path)})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"ephemera scheduler: error: {message}"
