"""The pod workers' background work (event posts, pruning old instances, a new pod's
allocation checkpoint): an exception it ends with is logged with the pod named, never lost."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from kubelet_harness import pod, running_kubelet, wait_until


async def test_a_failing_background_task_is_logged_with_its_pod(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with running_kubelet(tmp_path) as h:
        workers = h.kubelet.workers
        assert workers is not None
        body = pod("noisy")
        body["metadata"].update({"namespace": "default", "uid": "u-noisy"})

        async def broken() -> None:
            await asyncio.sleep(0)
            raise RuntimeError("the runtime went away")

        with caplog.at_level(logging.ERROR, logger="ephemera.kubelet.podworkers"):
            workers.spawn(broken(), pod=body)
            await wait_until(lambda: any("the runtime went away" in r.getMessage()
                                         or (r.exc_info and "the runtime went away"
                                             in str(r.exc_info[1]))
                                         for r in caplog.records))
        [record] = [r for r in caplog.records if r.exc_info]
        assert record.getMessage() == "background work for pod noisy_default(u-noisy) failed"
