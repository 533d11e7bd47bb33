"""The Job controller's deletions and creations of one sync against a stand-in API
(`JobController._delete_then_create`): a failed deletion does not stop the others, and the
creations it keeps from being made are no longer expected (else the Job would wait for the
expectations' 5-minute timeout before its next sync)."""

from __future__ import annotations

from typing import Any

import pytest

from ephemera.api.errors import StatusError, internal_error
from ephemera.controllers.job import JobController

JOB = {"apiVersion": "batch/v1", "kind": "Job",
       "metadata": {"name": "j", "namespace": "default", "uid": "u1"},
       "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}


class _Api:
    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.created = 0

    async def delete(self, path: str) -> dict[str, Any]:
        self.deleted.append(path.rsplit("/", 1)[1])
        if path.endswith("/j-a"):
            raise internal_error("etcd is down")
        return {}

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.created += 1
        return body


class _Recorder:
    async def record(self, *_args: Any, **_kwargs: Any) -> None:
        return None


async def test_a_failed_deletion_tries_the_rest_and_unexpects_the_creations() -> None:
    api = _Api()
    controller = JobController(api, _Recorder())
    controller.expectations.expect("default/j", 2, ["default/j-a", "default/j-b"])
    with pytest.raises(StatusError, match="etcd is down"):
        await controller._delete_then_create(JOB, "default", ["j-a", "j-b"], [None, None])
    assert api.deleted == ["j-a", "j-b"]  # the second one was deleted all the same
    assert api.created == 0
    # Only j-b's deletion (it was made) is still awaited from the informer.
    assert not controller.expectations.satisfied("default/j")
    controller.expectations.deletion_observed("default/j", "default/j-b")
    assert controller.expectations.satisfied("default/j")
