"""`kubectl dynamic` (cli/dynamic.py): which dynamicVolumePolicy a mount change sets. `--live`
asks for NotRequired (mounted into the running container), `--restart` for RestartContainer,
and without either the container keeps the policy it has (else RestartContainer)."""

from __future__ import annotations

import argparse
import copy
from typing import Any

import pytest

from ephemera.cli.dynamic import configure_parser

# What a node says when a change does not fit (the one reason it refuses one).
NO_ROOM = ("Node didn't have enough resource: memory, requested: 104857600, used: 0, "
           "capacity: 0")


def _pod(policy: str | None = None) -> dict[str, Any]:
    app: dict[str, Any] = {"name": "app", "image": "busybox",
                           "volumeMounts": [{"name": "old", "mountPath": "/old"}]}
    if policy:
        app["dynamicVolumePolicy"] = {"restartPolicy": policy}
    return {"metadata": {"name": "p"},
            "spec": {"containers": [app], "volumes": [{"name": "old", "emptyDir": {}}]}}


def _apply(argv: list[str], pod: dict[str, Any]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="kubectl dynamic")
    configure_parser(parser)
    args = parser.parse_args(argv)
    _, change = args.change(args)
    changed = copy.deepcopy(pod)
    change(changed)
    return changed


def _policy(pod: dict[str, Any]) -> Any:
    return pod["spec"]["containers"][0].get("dynamicVolumePolicy")


@pytest.mark.parametrize(("flags", "existing", "expected"), [
    ([], None, "RestartContainer"),
    ([], "NotRequired", "NotRequired"),
    ([], "RestartContainer", "RestartContainer"),
    (["--live"], None, "NotRequired"),
    (["--live"], "RestartContainer", "NotRequired"),
    (["--restart"], "NotRequired", "RestartContainer"),
])
def test_policy_of_a_mount_change(flags: list[str], existing: str | None,
                                  expected: str) -> None:
    added = _apply(["add-volume", "p", "--emptydir", "scratch", "--mount", "app:/s", *flags],
                   _pod(existing))
    assert _policy(added) == {"restartPolicy": expected}
    assert added["spec"]["containers"][0]["volumeMounts"][-1] == {"name": "scratch",
                                                                  "mountPath": "/s"}
    removed = _apply(["remove-volume", "p", "old", *flags], _pod(existing))
    assert _policy(removed) == {"restartPolicy": expected}
    assert removed["spec"]["containers"][0]["volumeMounts"] == []


def test_live_and_restart_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _apply(["add-volume", "p", "--emptydir", "s", "--live", "--restart"], _pod())
    assert "not allowed with argument" in capsys.readouterr().err


class _Api:
    """The reads `kubectl dynamic status` makes: the pod, its `/allocated`, its events."""

    def __init__(self, pod: dict[str, Any], allocated: dict[str, Any] | None,
                 events: list[dict[str, Any]]) -> None:
        self.pod, self.allocated, self.events = pod, allocated, events

    async def get(self, path: str) -> dict[str, Any]:
        if path.endswith("/allocated"):
            if self.allocated is None:  # a node without a kubelet API (simulated)
                from ephemera.api.errors import StatusError
                raise StatusError(503, "ServiceUnavailable", "no kubelet API")
            return self.allocated
        return self.pod

    async def list(self, path: str, **_: Any) -> dict[str, Any]:
        return {"items": self.events}


async def test_status_says_why_the_node_has_not_allocated_a_change() -> None:
    from typing import cast

    from ephemera.cli.dynamic import status_text
    from ephemera.client import ApiClient

    allocated = _pod()
    allocated["metadata"] |= {"namespace": "default", "uid": "u"}
    allocated["spec"]["nodeName"] = "vm"
    pod = copy.deepcopy(allocated)
    pod["spec"]["volumes"].append({"name": "s", "secret": {"secretName": "nosuch"}})
    failed = {"reason": "FailedAllocation", "lastTimestamp": "2026-12-01T17:00:00Z",
              "message": NO_ROOM}
    text = await status_text(cast(ApiClient, _Api(pod, allocated, [failed])), "/p")
    assert text.splitlines()[-1] == \
        f"the node has not allocated it: {NO_ROOM}"
    # Once allocated, no such line.
    text = await status_text(cast(ApiClient, _Api(pod, pod, [failed])), "/p")
    assert "has not allocated" not in text



async def test_wait_says_why_a_node_without_a_kubelet_api_has_not_allocated() -> None:
    """Simulated nodes have no kubelet API (no `/allocated`): `--wait` judges by the events,
    a FailedAllocation being the node's latest word on the pod."""
    from typing import cast

    from ephemera.cli.dynamic import CommandError, wait_actuated
    from ephemera.client import ApiClient

    before = _pod()
    before["metadata"] |= {"namespace": "default", "uid": "u"}
    desired = copy.deepcopy(before)
    desired["spec"]["volumes"].append({"name": "s", "secret": {"secretName": "nosuch"}})
    failed = {"reason": "FailedAllocation", "lastTimestamp": "2026-12-01T17:00:00Z",
              "message": NO_ROOM}
    with pytest.raises(CommandError) as raised:
        await wait_actuated(cast(ApiClient, _Api(desired, None, [failed])), "/p", before,
                            desired, timeout=0)
    assert str(raised.value).splitlines() == [
        "not actuated within 0s: volume s is not yet allocated",
        f"the node has not allocated it: {NO_ROOM}"]
    # an allocation that succeeded after it: the volume, which no container mounts (so it
    # is never set up on the host), is done
    succeeded = {"reason": "SuccessfulAllocation", "message": 'added volume "s"',
                 "lastTimestamp": "2026-12-01T17:00:05Z"}
    await wait_actuated(cast(ApiClient, _Api(desired, None, [failed, succeeded])), "/p",
                        before, desired, timeout=0)


async def test_wait_for_a_volume_no_container_mounts_ends_at_its_allocation() -> None:
    """A volume added without a mount never gets a host phase (the kubelet sets up only the
    volumes containers use): `--wait` is done once the node's `/allocated` has it; a mounted
    one still waits for `HostMounted`."""
    from typing import cast

    from ephemera.cli.dynamic import CommandError, pending_work, wait_actuated
    from ephemera.client import ApiClient

    before = _pod()
    before["metadata"] |= {"namespace": "default", "uid": "u"}
    desired = copy.deepcopy(before)
    desired["spec"]["volumes"].append({"name": "spare", "emptyDir": {}})
    with pytest.raises(CommandError) as raised:
        await wait_actuated(cast(ApiClient, _Api(desired, before, [])), "/p", before, desired,
                            timeout=0)
    assert str(raised.value) == "not actuated within 0s: volume spare is not yet allocated"
    await wait_actuated(cast(ApiClient, _Api(desired, desired, [])), "/p", before, desired,
                        timeout=0)
    mounted = _live_pod([("old", "/old"), ("new", "/new")], [("old", "/old")])
    mounted["status"]["volumeStatuses"] = [{"name": "old", "hostPhase": "HostMounted"}]
    plain = _live_pod([("old", "/old")], [("old", "/old")])
    assert pending_work(plain, mounted, mounted)[0] == "volume new is not yet reported"


def _live_pod(mounts: list[tuple[str, str]], actuated: list[tuple[str, str]]) -> dict[str, Any]:
    """A running NotRequired container with the spec `mounts` and the status `actuated`."""
    pod = _pod("NotRequired")
    pod["metadata"] |= {"namespace": "default", "uid": "u"}
    pod["spec"]["nodeName"] = "vm"
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": n, "mountPath": p} for n, p in mounts]
    pod["spec"]["volumes"] = [{"name": n, "emptyDir": {}} for n, _ in mounts]
    pod["status"] = {
        "containerStatuses": [{"name": "app", "state": {"running": {}}, "volumeMounts": [
            {"name": n, "mountPath": p} for n, p in actuated]}],
        "volumeStatuses": [{"name": n, "hostPhase": "HostMounted"} for n, _ in mounts]}
    return pod


async def test_wait_counts_only_this_changes_mounts_and_names_a_failed_live_mount() -> None:
    """`--wait` after an earlier live mount failed (the kubelet retries it with FailedMount
    events): a later change is done once its own mounts are actuated, and a change whose
    live mount fails ends with the kubelet's cause, not only "not yet running"."""
    from typing import cast

    from ephemera.cli.dynamic import CommandError, pending_work, wait_actuated
    from ephemera.client import ApiClient

    # `bad` (a symlink out of the root at its path) never mounted; `good` is added after it
    before = _live_pod([("old", "/old"), ("bad", "/evil/x")], [("old", "/old")])
    desired = _live_pod([("old", "/old"), ("bad", "/evil/x"), ("good", "/good")],
                        [("old", "/old")])
    assert pending_work(before, desired, desired) == [
        "container app not yet running with its new mounts"]
    now = _live_pod([("old", "/old"), ("bad", "/evil/x"), ("good", "/good")],
                    [("old", "/old"), ("good", "/good")])
    assert pending_work(before, desired, now) == []
    # removing the mount that never came is done at once; removing a live one is done once
    # the status no longer lists it
    assert pending_work(desired, now, now) == []
    gone = _live_pod([("old", "/old"), ("bad", "/evil/x")], [("old", "/old")])
    assert pending_work(now, gone, now) == [
        "volume good is HostMounted", "container app not yet running with its new mounts"]
    assert pending_work(now, gone, gone) == []

    failed = {"reason": "FailedMount", "lastTimestamp": "2026-12-01T17:00:00Z",
              "message": 'MountVolume.LiveMount failed for volume "bad" : mounting '
                         '"/evil/x" in running container "app": too many levels of '
                         'symbolic links'}
    other = {"reason": "FailedMount", "lastTimestamp": "2026-12-01T17:00:01Z",
             "message": 'MountVolume.LiveMount failed for volume "elsewhere" : no'}
    start = _live_pod([("old", "/old")], [("old", "/old")])
    with pytest.raises(CommandError) as raised:
        await wait_actuated(cast(ApiClient, _Api(before, before, [failed, other])), "/p",
                            start, before, 0)
    assert str(raised.value).splitlines() == [
        "not actuated within 0s: container app not yet running with its new mounts",
        "the node cannot mount it: " + failed["message"]]
