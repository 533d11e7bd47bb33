"""Fixtures shared by the kubelet tests: `oci_runtime`, a real runc `OciRuntime` whose
sandboxes, containers and mounts are all removed afterwards (tests/runtime's
`teardown_runtime`; that directory's helpers are importable from here)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[1] / "runtime"))

from kubelet_harness import release_images
from runtime_testing import teardown_runtime

from ephemera.kubelet.runtime.oci import OciRuntime


@pytest.fixture
async def oci_runtime(tmp_path: Path) -> AsyncIterator[OciRuntime]:
    """runc rooted at `tmp_path/root`, on a node name of its own; afterwards every sandbox
    and container is removed and whatever is still mounted under the root is unmounted."""
    runtime = OciRuntime("runc", tmp_path / "root", f"node-{uuid.uuid4().hex[:6]}")
    try:
        yield runtime
    finally:
        await teardown_runtime(runtime)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """A kubelet root directory (`tmp_path/kubelet`); afterwards no pod image is left mounted
    or attached to a loop device (`release_images`)."""
    root = tmp_path / "kubelet"
    root.mkdir()
    try:
        yield root
    finally:
        release_images(root)
