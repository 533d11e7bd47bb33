"""`kubectl dynamic`'s changes to a pod, applied to a pod read from the API."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from ephemera.cli.dynamic import CommandError, _add_container_change


def _pod() -> dict[str, Any]:
    return {"metadata": {"name": "w"},
            "spec": {"initContainers": [{"name": "setup", "image": "busybox"}],
                     "containers": [{"name": "c", "image": "busybox"}]}}


def _args(name: str) -> argparse.Namespace:
    return argparse.Namespace(container_name=name, image="busybox", command=[],
                              volume_mounts=[])


def test_add_container_appends_it() -> None:
    pod = _pod()
    summary, change = _add_container_change(_args("side"))
    change(pod)
    assert summary == "container side added"
    assert [c["name"] for c in pod["spec"]["containers"]] == ["c", "side"]


@pytest.mark.parametrize("name", ["c", "setup"])
def test_add_container_refuses_a_name_the_pod_has(name: str) -> None:
    pod = _pod()
    _, change = _add_container_change(_args(name))
    with pytest.raises(CommandError) as raised:
        change(pod)
    assert str(raised.value) == f'pod "w" already has a container "{name}"'
    assert [c["name"] for c in pod["spec"]["containers"]] == ["c"]
