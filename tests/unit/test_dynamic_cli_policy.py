"""`kubectl dynamic` (cli/dynamic.py): which dynamicVolumePolicy a mount change sets. `--live`
asks for NotRequired (mounted into the running container), `--restart` for RestartContainer,
and without either the container keeps the policy it has (else RestartContainer)."""

from __future__ import annotations

import argparse
import copy
from typing import Any

import pytest

from ephemera.cli.dynamic import configure_parser


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
