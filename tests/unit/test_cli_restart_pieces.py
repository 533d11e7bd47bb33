"""Pure pieces of the command line (issue 11, items 1, 5 and 9(b)): the directory lock, how
`ephemera up` tells that its kubelet reported the Node and the demo that its pod started
again, and how `kubectl dynamic` reads mounts and projected sources."""

from __future__ import annotations

import argparse
import datetime as dt
import os
from pathlib import Path

import pytest

from ephemera.cli import dynamic
from ephemera.cli.demo import started_again
from ephemera.cli.dirlock import DirLockedError, lock_dir
from ephemera.cli.up import node_reported_ready

SINCE = dt.datetime(2026, 12, 1, 15, 0, 0, tzinfo=dt.UTC)


# --- the directory lock -------------------------------------------------------------------


def test_a_held_dir_is_refused_naming_the_holder_and_free_once_released(
        tmp_path: Path) -> None:
    held = lock_dir(tmp_path / "data", "up.lock")
    assert (tmp_path / "data" / "up.lock").read_text() == f"{os.getpid()}\n"
    with pytest.raises(DirLockedError) as refused:
        lock_dir(tmp_path / "data", "up.lock")  # another open file description: refused
    assert refused.value.holder == os.getpid()
    assert str(refused.value) == (f"{tmp_path / 'data'} is in use by process {os.getpid()}; "
                                  "stop it first, or use another directory")
    other = lock_dir(tmp_path / "data", "kubelet.lock")  # another name, another lock
    other.release()
    held.release()
    again = lock_dir(tmp_path / "data", "up.lock")
    again.release()


def test_the_lock_is_not_inherited(tmp_path: Path) -> None:
    held = lock_dir(tmp_path, "up.lock")
    try:
        assert held._fd is not None and not os.get_inheritable(held._fd)
    finally:
        held.release()


# --- up: its node, the demo's pod ----------------------------------------------------------


def node(port: int, ready: str, beat: str) -> dict[str, object]:
    return {"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
                       "conditions": [{"type": "MemoryPressure", "status": "False",
                                       "lastHeartbeatTime": beat},
                                      {"type": "Ready", "status": ready,
                                       "lastHeartbeatTime": beat}]}}


def test_the_node_counts_once_this_kubelet_reported_it_ready() -> None:
    assert node_reported_ready(node(10250, "True", "2026-12-01T15:00:00Z"), SINCE, 10250)
    assert not node_reported_ready(node(10250, "True", "2026-12-01T14:59:59Z"), SINCE, 10250)
    assert not node_reported_ready(node(10250, "False", "2026-12-01T15:00:05Z"), SINCE, 10250)
    assert not node_reported_ready(node(10251, "True", "2026-12-01T15:00:05Z"), SINCE, 10250)
    assert not node_reported_ready({}, SINCE, 10250)


def test_the_demo_pod_counts_once_ready_again_since_the_start() -> None:
    def pod(status: str, changed: str) -> dict[str, object]:
        return {"status": {"conditions": [{"type": "Ready", "status": status,
                                           "lastTransitionTime": changed}]}}

    assert started_again(pod("True", "2026-12-01T15:00:01Z"), SINCE)
    assert not started_again(pod("True", "2026-12-01T14:00:00Z"), SINCE)  # last run's
    assert not started_again(pod("False", "2026-12-01T15:00:01Z"), SINCE)
    assert not started_again({}, SINCE)


def test_the_demo_pod_counts_once_its_containers_run_since_the_start() -> None:
    # The kubelet started the containers again before it wrote a not-ready status: the
    # Ready condition keeps the last run's transition time.
    def pod(ready: str, *started: str) -> dict[str, object]:
        return {"status": {
            "conditions": [{"type": "Ready", "status": ready,
                            "lastTransitionTime": "2026-12-01T14:00:00Z"}],
            "containerStatuses": [{"name": f"c{i}", "state": {"running": {"startedAt": at}}}
                                  for i, at in enumerate(started)]}}

    assert started_again(pod("True", "2026-12-01T15:00:00Z", "2026-12-01T15:00:02Z"), SINCE)
    assert not started_again(pod("True", "2026-12-01T15:00:02Z", "2026-12-01T14:00:00Z"),
                             SINCE)  # one container is the last run's
    assert not started_again(pod("False", "2026-12-01T15:00:02Z"), SINCE)
    assert not started_again(pod("True"), SINCE)  # no container status


# --- kubectl dynamic: its arguments ----------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kubectl dynamic")
    dynamic.configure_parser(parser)
    return parser.parse_args(list(argv))


def test_mounts_and_their_errors_match_the_help() -> None:
    assert dynamic.parse_mount("c:/data:ro") == dynamic.Mount("c", "/data", True)
    assert dynamic.parse_mount("c:/data") == dynamic.Mount("c", "/data", False)
    # An explicit read-write mode is not taken as part of the path.
    assert dynamic.parse_mount("c:/data:rw") == dynamic.Mount("c", "/data", False)
    with pytest.raises(dynamic.CommandError):
        dynamic.parse_mount("c::rw")
    with pytest.raises(dynamic.CommandError) as err:
        dynamic.parse_mount("c")
    assert str(err.value) == 'invalid --mount "c": expected CONTAINER:PATH[:ro]'
    with pytest.raises(dynamic.CommandError) as err:
        dynamic.parse_mount("v:", dynamic.VOLUME_MOUNT_OPTION)
    assert str(err.value) == 'invalid --volume-mount "v:": expected VOLUME:PATH[:ro]'


def test_a_projected_volume_keeps_its_sources_in_order() -> None:
    args = parse("add-volume", "w", "--projected", "bundle", "--project-token", "token",
                 "--project-secret", "creds", "--project-downward-api",
                 "labels=metadata.labels", "--project-configmap", "settings",
                 "--token-audience", "vault", "--mount", "c:/bundle")
    name, change = args.change(args)
    pod: dict[str, object] = {"metadata": {"name": "w"},
                              "spec": {"containers": [{"name": "c"}]}}
    change(pod)
    assert name == "volume bundle added"
    assert pod["spec"] == {
        "volumes": [{"name": "bundle", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "audience": "vault"}},
            {"secret": {"name": "creds"}},
            {"downwardAPI": {"items": [{"path": "labels",
                                        "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"configMap": {"name": "settings"}}]}}],
        "containers": [{"name": "c", "volumeMounts": [{"name": "bundle",
                                                       "mountPath": "/bundle"}],
                        "dynamicVolumePolicy": {"restartPolicy": "RestartContainer"}}]}


@pytest.mark.parametrize(("argv", "message"), [
    (["--projected", "p"], "--projected needs at least one source: --project-secret, "
                           "--project-configmap, --project-downward-api or --project-token"),
    (["--projected", "p", "--project-secret", "s", "--token-audience", "a"],
     "--token-audience and --token-expiration-seconds apply only to --project-token"),
    (["--emptydir", "e", "--project-secret", "s"],
     "--project-* and --token-* options apply only to --projected"),
    (["--secret", "s", "--token-expiration-seconds", "600"],
     "--project-* and --token-* options apply only to --projected"),
])
def test_projected_options_out_of_place_are_refused(argv: list[str], message: str) -> None:
    args = parse("add-volume", "w", *argv)
    with pytest.raises(dynamic.CommandError) as err:
        args.change(args)
    assert str(err.value) == message


def test_a_downward_api_source_needs_a_path_and_a_field(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("add-volume", "w", "--projected", "p", "--project-downward-api", "labels")
    assert capsys.readouterr().err.splitlines()[-1] == (
        'kubectl dynamic add-volume: error: argument --project-downward-api: invalid value '
        '"labels": expected PATH=FIELDPATH')
